"""The server's launch sequence: listen, start the engine processes and the extra HTTP workers,
serve the app until a signal or an engine death, then stop everything.

`sglang serve` (cli.py) calls `launch_server` once the flags and the model have been checked.
"""

from __future__ import annotations

import logging
import os

from sglang.srt.entrypoints.engine_processes import EngineProcesses
from sglang.srt.entrypoints.http_worker import run_http_worker_process
from sglang.srt.errors import ConfigError
from sglang.srt.frontend.http.host_guard import is_loopback
from sglang.srt.frontend.http.http_server import count_refusal, create_app, engine_died, start_draining
from sglang.srt.frontend.http.tls import check_tls
from sglang.srt.frontend.http.uvicorn_server import make_listen_socket, make_server, serve
from sglang.srt.metrics.prometheus import enable_multiprocess
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.logging_utils import configure_logging

logger = logging.getLogger(__name__)


def launch_server(server_args: ServerArgs) -> int:
    """Run the server until Ctrl-C / SIGTERM (exit 0) or a child process dies (exit 1)."""
    configure_logging(server_args.log_level, fmt=server_args.log_format)
    check_tls(server_args)
    workers = server_args.tokenizer_worker_num
    try:
        sock = make_listen_socket(server_args.host, server_args.port, reuse_port=workers > 1)
    except OSError as e:
        raise ConfigError(f"Cannot listen on {server_args.host}:{server_args.port}: {e.strerror}") from e
    if not is_loopback(server_args.host) and not server_args.api_key:
        logger.warning(
            "listening on %s without --api-key: anyone who can reach the port may use the server", server_args.host
        )
    engine = EngineProcesses(server_args)
    # Every process of this server (spawned from here on) writes its metrics here; any HTTP
    # worker's /metrics adds them up. Inside the private IPC directory: new now, removed at exit.
    enable_multiprocess(os.path.join(engine.port_args.ipc_dir, "metrics"))
    logger.info("starting the engine for %s", server_args.model_path)
    exit_code = 0
    try:
        model_info = engine.start()
        engine.start_http_workers(model_info, run_http_worker_process)
        app = create_app(server_args, engine.port_args, model_info, engine.alive)
        server = make_server(app, server_args, on_reject=count_refusal(app))

        def on_signal() -> None:
            start_draining(app, server_args)
            engine.begin_stop()

        server.on_signal = on_signal

        def on_death(reason: str) -> None:
            nonlocal exit_code
            exit_code = 1
            engine.notify_engine_dead()
            engine_died(app, server, reason)

        engine.watch(on_death)
        logger.info("serving %s on %s with %d HTTP worker(s)", server_args.served_model_name, server_args.url, workers)
        serve(server, sock)
    finally:
        sock.close()
        engine.shutdown()
    if exit_code:
        logger.error("the embedding engine died; exiting with status %d so a supervisor restarts the server", exit_code)
    return exit_code
