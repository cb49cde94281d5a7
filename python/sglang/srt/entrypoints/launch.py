"""The server's launch sequence: listen, start every model's engine processes and the extra HTTP
workers, serve the app until a signal or the engines' death, then stop everything.

`sglang serve` (cli.py) calls `launch_server` once the flags have been checked, with the model
check running in its child: the engine's processes start importing meanwhile (prestart), and are
told to run once the check has passed.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Optional

from sglang.srt.configs.served_models import plan_models
from sglang.srt.entrypoints.http_worker import run_http_worker_process
from sglang.srt.entrypoints.model_check import ModelCheck
from sglang.srt.entrypoints.server_processes import ServerProcesses
from sglang.srt.errors import ConfigError
from sglang.srt.frontend.http.host_guard import is_loopback
from sglang.srt.frontend.http.server_app import (
    count_refusal,
    create_server_app,
    engine_died,
    member_apps,
    model_died,
    model_revived,
    start_draining,
)
from sglang.srt.frontend.http.tls import check_tls
from sglang.srt.frontend.http.uvicorn_server import make_listen_socket, make_server, serve
from sglang.srt.metrics.prometheus import enable_multiprocess
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.logging_utils import configure_logging

logger = logging.getLogger(__name__)


def launch_server(
    server_args: ServerArgs, models: Optional[list[ServerArgs]] = None, check: Optional[ModelCheck] = None
) -> int:
    """Run the server until Ctrl-C / SIGTERM (exit 0) or its engines die (exit 1): with several
    models, one model's death fails only that model's requests until its engine is started again;
    the server exits when all are dead at once. `check`: the model check cli.py started, whose
    verdict comes before anything else is done (None: the caller checked the models)."""
    configure_logging(server_args.log_level, fmt=server_args.log_format)
    models = models or plan_models(server_args)
    workers = server_args.tokenizer_worker_num
    processes = ServerProcesses(server_args, models)
    # Every process of this server (spawned from here on) writes its metrics here; any HTTP
    # worker's /metrics adds them up. Inside the private IPC directory: new now, removed at exit.
    enable_multiprocess(os.path.join(processes.ipc_dir, "metrics"))
    try:
        processes.prestart(run_http_worker_process)  # they import torch / the HTTP stack during the check
        if check is not None:
            check.wait()  # a bad model's one line comes first, as before anything else
        check_tls(server_args)
        try:
            sock = make_listen_socket(server_args.host, server_args.port, reuse_port=workers > 1)
        except OSError as e:
            raise ConfigError(f"Cannot listen on {server_args.host}:{server_args.port}: {e.strerror}") from e
    except BaseException:
        if check is not None:
            check.cancel()
        processes.shutdown()
        raise
    if not is_loopback(server_args.host) and not server_args.api_key:
        logger.warning(
            "listening on %s without --api-key: anyone who can reach the port may use the server", server_args.host
        )
    logger.info("starting the engine for %s", ", ".join(m.model_path for m in models))
    exit_code = 0
    try:
        served = processes.start()
        processes.start_http_workers(run_http_worker_process)
        # Each model's engine as it is now (a restart replaces a dead model's EngineProcesses).
        alive = [lambda i=i: processes.engines[i].alive() for i in range(len(served))]
        app = create_server_app(server_args, served, alive)
        server = make_server(app, server_args, on_reject=count_refusal(app))

        def on_signal() -> None:
            start_draining(app, server_args)
            processes.begin_stop()

        server.on_signal = on_signal
        dead: set[int] = set()
        lock = threading.Lock()

        def on_death(reason: str) -> None:  # the server can serve nothing more: exit 1
            nonlocal exit_code
            with lock:
                if exit_code:  # an HTTP worker told to exit is no second death
                    return
                exit_code = 1
            processes.end()
            engine_died(app, server, reason)

        def on_model_death(index: int, reason: str) -> None:
            with lock:
                dead.add(index)
                everyone = len(dead) == len(served)
            if everyone:
                return on_death(reason)
            processes.notify_http_workers()
            model_died(member_apps(app)[index], server, reason)

        def on_model_revived(index: int) -> None:
            with lock:
                dead.discard(index)
            processes.notify_http_workers()
            model_revived(member_apps(app)[index], server)

        processes.watch(on_model_death, on_death, on_model_revived)
        names = ", ".join(m.name for m in served)
        logger.info("serving %s on %s with %d HTTP worker(s)", names, server_args.url, workers)
        serve(server, sock)
    finally:
        sock.close()
        processes.shutdown()
    if exit_code:
        logger.error("the embedding engine died; exiting with status %d so a supervisor restarts the server", exit_code)
    return exit_code
