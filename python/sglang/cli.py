"""`sglang serve ...`: parse flags into ServerArgs and run the server."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import signal
import sys
import threading
from typing import Iterator, Mapping, Optional, Sequence

from sglang.srt.errors import ConfigError
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.env_flags import EnvHelpFormatter, explain_error, mark_secrets, parse_with_env


def build_serve_parser(prog: str = "sglang serve") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Serve an embedding model on an OpenAI-compatible /v1/embeddings endpoint. Every flag "
        "--foo-bar may also come from the environment variable SGLANG_FOO_BAR (shown as [env: ...]); "
        "a flag on the command line wins over its variable (docs/operations.md).",
        formatter_class=EnvHelpFormatter,
    )
    ServerArgs.add_cli_args(parser)
    mark_secrets(parser, (f.name for f in dataclasses.fields(ServerArgs) if not f.repr))
    return parser


def parse_serve_args(
    argv: Sequence[str], environ: Optional[Mapping[str, str]] = None, prog: str = "sglang serve"
) -> ServerArgs:
    """Flags over `SGLANG_*` variables over defaults -> ServerArgs (a ConfigError names a bad variable)."""
    parser = build_serve_parser(prog)
    wants_help = any(a in ("-h", "--help") for a in argv)
    args, used = parse_with_env(parser, argv, os.environ if environ is None else environ, strict=not wants_help)
    try:
        return ServerArgs.from_cli_args(args)
    except ConfigError as e:
        raise ConfigError(explain_error(str(e), parser, used)) from None


SAGEMAKER_PORT = "8080"


def sagemaker_mode(argv: Sequence[str], environ: Mapping[str, str]) -> tuple[list[str], Mapping[str, str]]:
    """SageMaker runs the image (ENTRYPOINT `sglang serve`) with the argument `serve`, and expects
    port 8080: a leading `serve` is dropped and makes 8080 the port unless SGLANG_PORT or --port
    say otherwise (docs/sagemaker.md). Other arguments pass through unchanged."""
    if list(argv[:1]) != ["serve"]:
        return list(argv), environ
    return list(argv[1:]), {"SGLANG_PORT": SAGEMAKER_PORT, **environ}


@contextlib.contextmanager
def sigterm_as_ctrl_c() -> Iterator[None]:
    """Until uvicorn takes SIGINT and SIGTERM (launch_server's serve, a graceful drain), a SIGTERM
    stops start-up as Ctrl-C does: the children stopped, the IPC directory removed, exit 0. Left at
    its default, it killed the server process on the spot, perhaps between spawning a child and
    writing the child its target (the child's traceback: "Ran out of input")."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def serve(argv: Sequence[str], prog: str = "sglang serve") -> int:
    with sigterm_as_ctrl_c():
        return _serve(argv, prog)


def _serve(argv: Sequence[str], prog: str) -> int:
    from sglang.srt.utils.process import stop_signals_deferred

    check = None
    try:
        try:
            # A Ctrl-C (or SIGTERM) here lands when the imports are done, as a KeyboardInterrupt
            # in this code, not inside a library's import (see stop_signals_deferred).
            with stop_signals_deferred():
                argv, environ = sagemaker_mode(argv, os.environ)
                server_args = parse_serve_args(argv, environ, prog=prog)
                from sglang.srt.configs.served_models import plan_models
                from sglang.srt.entrypoints.model_check import ModelCheck

                # Every model's options, then model problems (unsupported architecture, missing
                # --is-embedding, uncached hub id, two models claiming one name, ...) end start-up
                # as one line, before the server runs anything or logs a line. The check runs in a
                # child process (reading a config imports torch, which this one avoids) while this
                # one imports the HTTP stack and the engine's processes import theirs
                # (launch_server waits for its verdict).
                models = plan_models(server_args)
                check = ModelCheck(models)
                from sglang.srt.entrypoints.launch import launch_server
        except BaseException:
            if check is not None:
                check.cancel()
            raise
        return launch_server(server_args, models, check)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0


def health(argv: Sequence[str]) -> int:
    """`sglang health [serve flags]`: exit 0 when the local server's /health answers 200, else 1."""
    try:
        server_args = parse_serve_args(argv, prog="sglang health")
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from sglang.srt.entrypoints.health_probe import check_health

    healthy, detail = check_health(server_args)
    print(detail, file=sys.stdout if healthy else sys.stderr)
    return 0 if healthy else 1


COMMANDS = {"serve": serve, "health": health}


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="sglang", description="sglang-embed command line.")
    parser.add_argument(
        "command",
        choices=sorted(COMMANDS),
        help="serve: run the HTTP server; health: probe a local server's /health (same flags / SGLANG_* variables)",
    )
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help()
        return 0 if argv else 2
    if argv[0] not in COMMANDS:
        parser.parse_args(argv[:1])  # prints the usage error and exits 2
    return COMMANDS[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
