"""Running uvicorn: the listening socket, signal handling, and the serving loop (uvloop when installed).

Used by the server process (launch.py) and by each extra HTTP worker (http_worker.py) alike.
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

from sglang.srt.frontend.http.http_protocol import ConnectionLimits, limited_protocol
from sglang.srt.frontend.http.tls import tls_options
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.gc_freeze import freeze_startup_objects

logger = logging.getLogger(__name__)


class UvicornServer(uvicorn.Server):
    """uvicorn's server, minus re-raising SIGINT/SIGTERM after shutdown.

    uvicorn re-raises the signal so that the process dies by it; we still have children to stop
    and IPC files to remove, and a graceful stop should exit 0.
    """

    loop: Optional[asyncio.AbstractEventLoop] = None
    on_signal: Optional[Callable[[], None]] = None  # told first when SIGINT/SIGTERM arrives
    listen_sockets: tuple[socket.socket, ...] = ()  # what serve() listens on (engine_death.py closes them early)

    freeze_after_startup = False  # make_server's servers (a serving process's one) set it

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets=sockets)
        if self.freeze_after_startup:  # the app's lifespan (tokenizer, sockets) has run by now
            freeze_startup_objects()

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


class _GracefulTimeoutNote(logging.Filter):
    """uvicorn logs the cancellation of requests at the graceful timeout as an ERROR; it is the
    documented end of a drain (each request is answered 503), so it is logged at INFO."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.ERROR and str(record.msg).startswith("Cancel %s running task"):
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


def _quiet_graceful_timeout() -> None:
    log = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _GracefulTimeoutNote) for f in log.filters):
        log.addFilter(_GracefulTimeoutNote())


# Connections the kernel queues for a worker before its app accepts them.
LISTEN_BACKLOG = 4096


def make_listen_socket(host: str, port: int, reuse_port: bool) -> socket.socket:
    """The server's socket, bound (a busy port fails here, before the engine starts) but not yet
    listening: uvicorn listens once the app's startup is done. Until then a client is refused
    rather than queued, and with SO_REUSEPORT the kernel hands connections only to the HTTP
    workers that are already serving, never to one still starting."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.setblocking(False)
    return sock


def _loop_factory():
    try:
        import uvloop

        return uvloop.new_event_loop
    except ImportError:
        return None


def make_server(app, server_args: ServerArgs, on_reject: Optional[Callable[[int], None]] = None) -> UvicornServer:
    """uvicorn for `app` with the connection limits of http_protocol.py (`on_reject` is told the
    status of each connection refused before it reached the app)."""
    # log_config=None: uvicorn's loggers go through ours (configure_logging), JSON included.
    # timeout_graceful_shutdown bounds the drain after SIGTERM/SIGINT; then remaining tasks are cancelled.
    _quiet_graceful_timeout()
    limits = ConnectionLimits(
        max_connections=server_args.max_connections,
        max_header_bytes=server_args.max_header_bytes,
        header_timeout=server_args.header_timeout,
        on_reject=on_reject,
    )
    config = uvicorn.Config(
        app,
        http=limited_protocol(limits),
        log_level=server_args.log_level,
        timeout_keep_alive=server_args.keep_alive_timeout,
        log_config=None,
        backlog=LISTEN_BACKLOG,
        access_log=server_args.log_level == "debug",
        timeout_graceful_shutdown=server_args.graceful_timeout or None,
        **tls_options(server_args),
    )
    server = UvicornServer(config)
    server.freeze_after_startup = True
    return server


def serve(server: UvicornServer, sock: socket.socket) -> None:
    """Serve on `sock` until shutdown (blocking), on uvloop when it is installed."""

    async def _main() -> None:
        server.loop = asyncio.get_running_loop()
        server.listen_sockets = (sock,)
        await server.serve(sockets=[sock])

    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(_main())


def on_loop(server: UvicornServer, fn: Callable[[], None]) -> None:
    """Run `fn` on the server's event loop from another thread (no-op before it starts)."""
    if server.loop is not None:
        server.loop.call_soon_threadsafe(fn)
