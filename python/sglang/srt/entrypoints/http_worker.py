"""Running uvicorn: listening sockets, signal handling, and extra HTTP + tokenizer worker processes.

With `--tokenizer-worker-num N`, N processes each run the FastAPI app with their own
TokenizerManager on a SO_REUSEPORT socket bound to the same port (the kernel spreads connections
over them); all feed the one scheduler and get their own results back from the detokenizer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import threading
from typing import Callable, Optional

import uvicorn

from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.logging_utils import configure_logging
from sglang.srt.utils.network import PortArgs
from sglang.srt.utils.process import set_parent_death_signal, set_process_name, watch_parent

logger = logging.getLogger(__name__)


class UvicornServer(uvicorn.Server):
    """uvicorn's server, minus re-raising SIGINT/SIGTERM after shutdown.

    uvicorn re-raises the signal so that the process dies by it; we still have children to stop
    and IPC files to remove, and a graceful stop should exit 0.
    """

    loop: Optional[asyncio.AbstractEventLoop] = None
    on_signal: Optional[Callable[[], None]] = None  # told first when SIGINT/SIGTERM arrives

    def handle_exit(self, sig, frame) -> None:
        if self.on_signal is not None:
            self.on_signal()
        super().handle_exit(sig, frame)

    @contextlib.contextmanager
    def capture_signals(self):
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def make_listen_socket(host: str, port: int, reuse_port: bool) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(4096)
    sock.setblocking(False)
    return sock


def _loop_factory():
    try:
        import uvloop

        return uvloop.new_event_loop
    except ImportError:
        return None


def make_server(app, server_args: ServerArgs) -> UvicornServer:
    # log_config=None: uvicorn's loggers go through ours (configure_logging), JSON included.
    # timeout_graceful_shutdown bounds the drain after SIGTERM/SIGINT; then remaining tasks are cancelled.
    config = uvicorn.Config(app, log_level=server_args.log_level, timeout_keep_alive=30, log_config=None,
                            access_log=server_args.log_level == "debug",
                            timeout_graceful_shutdown=server_args.graceful_timeout or None)
    return UvicornServer(config)


def serve(server: UvicornServer, sock: socket.socket) -> None:
    """Serve on `sock` until shutdown (blocking), on uvloop when it is installed."""

    async def _main() -> None:
        server.loop = asyncio.get_running_loop()
        await server.serve(sockets=[sock])

    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(_main())


def run_http_worker_process(server_args: ServerArgs, port_args: PortArgs, model_info: dict, worker_id: int,
                            ready_pipe, parent_pid: int) -> None:
    """An extra HTTP + tokenizer process (worker_id >= 1)."""
    from sglang.srt.entrypoints.engine_processes import ENGINE_DEAD_SIGNAL
    from sglang.srt.entrypoints.http_server import create_app, engine_died, start_draining

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
    server = make_server(app, server_args)
    server.on_signal = lambda: start_draining(app, server_args)
    # The server process saw the scheduler or detokenizer die: answer 503 at once, and exit.
    signal.signal(ENGINE_DEAD_SIGNAL, lambda *_: engine_died(app, server, "an engine process exited unexpectedly"))
    try:
        serve(server, sock)
    finally:
        sock.close()


def on_loop(server: UvicornServer, fn: Callable[[], None]) -> None:
    """Run `fn` on the server's event loop from another thread (no-op before it starts)."""
    if server.loop is not None:
        server.loop.call_soon_threadsafe(fn)
