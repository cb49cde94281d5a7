"""The server's socket is bound at once (a busy port fails before the engine starts) but listens only
once the app's start-up is done: a client is refused, not queued, while a worker is still starting,
so with SO_REUSEPORT no connection waits in the backlog of a worker that cannot answer yet."""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest
from fastapi import FastAPI

from sglang.srt.frontend.http.uvicorn_server import make_listen_socket, make_server, serve
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.network import get_free_port
from test.helpers.waiting import wait_until


def _connects(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return True
    except ConnectionRefusedError:
        return False


def test_busy_port_fails_at_bind():
    port = get_free_port()
    first = make_listen_socket("127.0.0.1", port, reuse_port=False)
    first.listen()  # another server already serving there
    try:
        with pytest.raises(OSError):
            make_listen_socket("127.0.0.1", port, reuse_port=False)
    finally:
        first.close()


def test_refused_until_the_apps_startup_is_done():
    port, release, in_startup = get_free_port(), threading.Event(), threading.Event()
    app = FastAPI()

    @app.on_event("startup")
    async def slow_startup() -> None:
        in_startup.set()
        await asyncio.get_running_loop().run_in_executor(None, release.wait, 30)

    server = make_server(app, ServerArgs(log_level="warning"))
    sock = make_listen_socket("127.0.0.1", port, reuse_port=True)
    thread = threading.Thread(target=serve, args=(server, sock), daemon=True)
    thread.start()
    try:
        assert not _connects(port)  # bound, not listening
        assert in_startup.wait(30)
        assert not _connects(port)  # the app is still starting
        release.set()
        assert wait_until(lambda: server.started, timeout=30)
        assert _connects(port)
    finally:
        release.set()
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
