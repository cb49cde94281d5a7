"""An extra HTTP + tokenizer worker process (`--tokenizer-worker-num N`, worker ids 1..N-1).

Each worker runs the same app as the server process (one TokenizerManager per model) on a
SO_REUSEPORT socket bound to the server's port (the kernel spreads connections over them); all feed
the models' scheduler replicas and get their own results back from each model's detokenizer. The
server process spawns them (launch.py hands this entry function to ServerProcesses.start_http_workers).
"""

from __future__ import annotations

import os
import signal

from sglang.srt.configs.served_models import ServedModel
from sglang.srt.entrypoints.server_processes import dead_marker
from sglang.srt.frontend.http.server_app import (
    count_refusal,
    create_server_app,
    engine_died,
    member_apps,
    model_died,
    model_revived,
    start_draining,
)
from sglang.srt.frontend.http.uvicorn_server import make_listen_socket, make_server, serve
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.logging_utils import configure_logging
from sglang.srt.utils.process import ENGINE_DEAD_SIGNAL, set_parent_death_signal, set_process_name, watch_parent


def run_http_worker_process(
    server_args: ServerArgs, models: list[ServedModel], worker_id: int, ready_pipe, parent_pid: int
) -> None:
    """An extra HTTP + tokenizer process (worker_id >= 1)."""
    # Ctrl-C reaches the whole process group; the parent stops us with SIGTERM (a graceful drain).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    set_process_name(f"sglang-http-{worker_id}")
    set_parent_death_signal(signal.SIGTERM)
    watch_parent(parent_pid, models[0].port_args.ipc_dir)
    configure_logging(server_args.log_level, f"http-{worker_id}", server_args.log_format)
    sock = make_listen_socket(server_args.host, server_args.port, reuse_port=True)

    def on_ready() -> None:
        ready_pipe.send({"status": "ready"})
        ready_pipe.close()

    app = create_server_app(server_args, models, worker_id=worker_id, on_ready=on_ready)
    server = make_server(app, server_args, on_reject=count_refusal(app))
    server.on_signal = lambda: start_draining(app, server_args)
    known_dead: set[int] = set()

    def on_engine_change(*_) -> None:
        """The server process saw a model's engine die or come back: the marker files say which are
        dead. All dead (or one model): answer 503 at once, and exit; else the dead models' requests
        get 503 until they are back, and the others keep serving."""
        dead = {i for i, m in enumerate(models) if os.path.exists(dead_marker(m.port_args.ipc_dir))}
        if len(models) == 1 or len(dead) == len(models):
            return engine_died(app, server, "an engine process exited unexpectedly")
        for i in dead - known_dead:
            model_died(member_apps(app)[i], server, _dead_reason(models[i]))
        for i in known_dead - dead:
            model_revived(member_apps(app)[i], server)
        known_dead.clear()
        known_dead.update(dead)

    signal.signal(ENGINE_DEAD_SIGNAL, on_engine_change)
    try:
        serve(server, sock)
    finally:
        sock.close()


def _dead_reason(model: ServedModel) -> str:
    """What the server process wrote in the model's dead marker (why its engine died)."""
    try:
        with open(dead_marker(model.port_args.ipc_dir)) as f:
            return f.read().strip() or f"model {model.name}: its engine exited unexpectedly"
    except OSError:
        return f"model {model.name}: its engine exited unexpectedly"
