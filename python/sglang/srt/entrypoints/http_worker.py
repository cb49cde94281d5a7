"""An extra HTTP + tokenizer worker process (`--tokenizer-worker-num N`, worker ids 1..N-1).

Each worker runs the FastAPI app with its own TokenizerManager on a SO_REUSEPORT socket bound to
the server's port (the kernel spreads connections over them); all feed the scheduler replica(s)
and get their own results back from the detokenizer. The server process spawns them (launch.py
hands this entry function to EngineProcesses.start_http_workers).
"""

from __future__ import annotations

import signal

from sglang.srt.configs.model_info import ModelInfo
from sglang.srt.frontend.http.http_server import count_refusal, create_app, engine_died, start_draining
from sglang.srt.frontend.http.uvicorn_server import make_listen_socket, make_server, serve
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.logging_utils import configure_logging
from sglang.srt.utils.network import PortArgs
from sglang.srt.utils.process import ENGINE_DEAD_SIGNAL, set_parent_death_signal, set_process_name, watch_parent


def run_http_worker_process(
    server_args: ServerArgs, port_args: PortArgs, model_info: ModelInfo, worker_id: int, ready_pipe, parent_pid: int
) -> None:
    """An extra HTTP + tokenizer process (worker_id >= 1)."""
    # Ctrl-C reaches the whole process group; the parent stops us with SIGTERM (a graceful drain).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    set_process_name(f"sglang-http-{worker_id}")
    set_parent_death_signal(signal.SIGTERM)
    watch_parent(parent_pid, port_args.ipc_dir)
    configure_logging(server_args.log_level, f"http-{worker_id}", server_args.log_format)
    sock = make_listen_socket(server_args.host, server_args.port, reuse_port=True)

    def on_ready() -> None:
        ready_pipe.send({"status": "ready"})
        ready_pipe.close()

    app = create_app(server_args, port_args, model_info, worker_id=worker_id, on_ready=on_ready)
    server = make_server(app, server_args, on_reject=count_refusal(app))
    server.on_signal = lambda: start_draining(app, server_args)
    # The server process saw the scheduler or detokenizer die: answer 503 at once, and exit.
    signal.signal(ENGINE_DEAD_SIGNAL, lambda *_: engine_died(app, server, "an engine process exited unexpectedly"))
    try:
        serve(server, sock)
    finally:
        sock.close()
