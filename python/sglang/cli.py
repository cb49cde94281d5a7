"""`sglang serve ...`: parse flags into ServerArgs and run the server."""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from sglang.srt.errors import ConfigError
from sglang.srt.server_args import ServerArgs


def build_serve_parser(prog: str = "sglang serve") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Serve an embedding model on an OpenAI-compatible /v1/embeddings endpoint.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    ServerArgs.add_cli_args(parser)
    return parser


def serve(argv: Sequence[str], prog: str = "sglang serve") -> int:
    args = build_serve_parser(prog).parse_args(argv)
    try:
        server_args = ServerArgs.from_cli_args(args)
        from sglang.srt.configs.model_config import check_model

        # Model problems (unsupported architecture, missing --is-embedding, uncached hub id, ...)
        # end start-up here, as one line, before any process is spawned or anything is logged.
        check_model(server_args)
        from sglang.srt.entrypoints.launch import launch_server

        return launch_server(server_args)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="sglang", description="sglang-embed command line.")
    parser.add_argument("command", choices=["serve"], help="serve: run the HTTP server")
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help()
        return 0 if argv else 2
    if argv[0] != "serve":
        parser.parse_args(argv[:1])  # prints the usage error and exits 2
    return serve(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
