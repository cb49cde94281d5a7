"""The server's model check, in a short-lived child process.

Reading a checkpoint's config goes through transformers' configuration module, which imports torch,
and a process that once imported torch keeps its ~200 MB. The server process is an HTTP process
(the only one without --tokenizer-worker-num), so it asks a child: the child runs
configs/model_config.check_model (the one-line ConfigError of an unknown architecture, a missing
--is-embedding, an uncached hub id, ...) and names the tokenizer class AutoTokenizer picks, which
the torch-free processes then load directly (utils/hf_tokenizer.py, ServerArgs.tokenizer_class).
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import traceback
from multiprocessing.connection import Connection

from sglang.srt.entrypoints.engine_processes import describe_exit
from sglang.srt.errors import ConfigError
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.process import ignore_sigint, set_parent_death_signal, stop_signals_deferred


def check_model_in_child(server_args: ServerArgs) -> None:
    """Raise the child's ConfigError, or set `server_args.tokenizer_class` (None: load through
    AutoTokenizer, e.g. a tokenizer with custom code or one that did not load in the check)."""
    ModelCheck([server_args]).wait()


class ModelCheck:
    """check_model_in_child for every model of a server, in one child (torch is imported once),
    started at once and answered by wait(): the server starts its engine processes meanwhile."""

    def __init__(self, models: list[ServerArgs]) -> None:
        self.models = models
        ctx = mp.get_context("spawn")
        self._reader, writer = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(target=_check_all, args=(models, writer), name="sglang-model-check", daemon=True)
        with stop_signals_deferred():
            self._proc.start()
        writer.close()

    def wait(self) -> None:
        """The verdict: a ConfigError (naming the model, for a server with several), or every
        model's tokenizer_class set."""
        try:
            msg = self._reader.recv()
        except EOFError:
            self._proc.join()
            died = describe_exit(self._proc.exitcode)
            raise ConfigError(f"The model check exited before answering ({died})") from None
        finally:
            self._reader.close()
        self._proc.join()
        for server_args, answer in zip(self.models, msg):
            if answer["status"] != "ok":
                named = f"model {server_args.served_model_name}: " if len(self.models) > 1 else ""
                raise ConfigError(named + answer["message"])
            server_args.tokenizer_class = answer["tokenizer_class"]

    def cancel(self) -> None:
        """Start-up failed for another reason first: stop the check without waiting for it."""
        self._reader.close()
        if self._proc.is_alive():
            self._proc.terminate()
        self._proc.join(5.0)


def _check_all(models: list[ServerArgs], pipe: Connection) -> None:
    # Ctrl-C reaches the whole process group: the server process decides (it cancels the check),
    # and a server killed during the check takes the check with it; neither prints a traceback.
    ignore_sigint()
    set_parent_death_signal(signal.SIGTERM)
    answers = []
    for server_args in models:
        answers.append(_check(server_args))
        if answers[-1]["status"] != "ok":
            break
    try:
        pipe.send(answers)
    except OSError:  # the server process is gone: nobody to tell
        pass


def _check(server_args: ServerArgs) -> dict:
    from sglang.srt.utils.hub import resolve_model_path

    try:
        # A missing directory, a file, an uncached hub id: answered before the config module
        # imports torch (~2 s), while the server process is still starting the other children.
        model_dir = resolve_model_path(server_args.model_path, server_args.revision, server_args.download_dir)
        from sglang.srt.configs.model_config import check_model

        check_model(server_args, model_dir)
    except ConfigError as e:
        return {"status": "error", "message": str(e)}
    except Exception as e:  # unexpected: the traceback here, one line for the user
        traceback.print_exc()
        return {"status": "error", "message": f"{type(e).__name__}: {e}"}
    from sglang.srt.utils.hf_tokenizer import load_tokenizer, tokenizer_class_of

    try:
        tokenizer = load_tokenizer(server_args.tokenizer_path, server_args.trust_remote_code)
    except Exception:  # the HTTP process reports it when it loads the tokenizer, as without this check
        tokenizer = None
    return {"status": "ok", "tokenizer_class": tokenizer_class_of(tokenizer) if tokenizer is not None else None}
