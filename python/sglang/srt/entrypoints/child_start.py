"""A server's children (engine processes, extra HTTP workers) import their heavy modules before
they are told what to run.

A scheduler spent ~3.4 s of its start-up importing torch, the model code and transformers' config
machinery, an HTTP worker ~2 s importing the HTTP stack, and the server process ~4 s waiting on its
model check (which imports torch too) before it knew that the engine may start. A child started
with `start_child` imports its `preload` modules at once, then waits for `StartingChild.run(...)`:
the arguments only known later (the checked model's options, the tokenizer class the check found,
the engines' ModelInfo). Started before the check, the imports share the cores instead of following
each other. A child told nothing (`discard`, or its parent gone) exits without having run
anything, so a bad model still ends start-up with the check's one line.

Every engine child and extra HTTP worker starts this way (a restart too, told at once), so there is
one start path.
"""

from __future__ import annotations

import dataclasses
import importlib
import multiprocessing as mp
from multiprocessing.connection import Connection
from typing import Any, Callable, Sequence

from sglang.srt.utils.allocator import child_environment
from sglang.srt.utils.process import ignore_sigint, stop_signals_deferred


@dataclasses.dataclass
class StartingChild:
    """A spawned child waiting for its arguments; `ready` carries its READY (or error) message."""

    name: str
    proc: mp.Process
    ready: Connection
    go: Connection

    def run(self, **kwargs: Any) -> None:
        """Hand the child its target's keyword arguments, all but `ready_pipe` (its own end)."""
        self.go.send(kwargs)
        self.go.close()

    def discard(self, timeout: float = 5.0) -> None:
        """Stop a child that was never told to run (it holds nothing but imported modules)."""
        self.go.close()
        self.ready.close()
        if self.proc.is_alive():
            self.proc.terminate()  # the default SIGTERM action: nothing to flush yet
            self.proc.join(timeout)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(timeout)


def start_child(
    name: str, target: Callable[..., None], env: dict[str, str], preload: Sequence[str] = ()
) -> StartingChild:
    """Spawn `target`'s process under `env` (read by the child's libraries as they load, so set at
    spawn); it imports `preload` and waits. `target` is later called as
    target(ready_pipe=<the child's end of `ready`>, **<what `run` was given>)."""
    ctx = mp.get_context("spawn")
    ready_reader, ready_writer = ctx.Pipe(duplex=False)
    go_reader, go_writer = ctx.Pipe(duplex=False)
    proc = ctx.Process(
        target=wait_then_run, name=name, args=(target, tuple(preload), go_reader, ready_writer), daemon=True
    )
    with child_environment(env), stop_signals_deferred():
        proc.start()
    ready_writer.close()
    go_reader.close()
    return StartingChild(name, proc, ready_reader, go_writer)


def wait_then_run(target: Callable[..., None], preload: tuple[str, ...], go: Connection, ready: Connection) -> None:
    """The child's entry: import, wait for the arguments, run the target (which owns `ready`)."""
    ignore_sigint()  # every target ignores it too: an interrupted start-up prints no traceback per child
    for module in preload:
        try:
            importlib.import_module(module)
        except Exception:  # the target imports it again and reports the error through `ready`
            pass
    try:
        kwargs = go.recv()
    except EOFError:  # start-up was called off (a bad model, the parent gone): run nothing
        return
    finally:
        go.close()
    target(ready_pipe=ready, **kwargs)
