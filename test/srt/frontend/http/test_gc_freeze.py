"""A serving process's uvicorn (make_server) freezes start-up's objects once it is up, so that the
cyclic collector's full passes stop walking them, and collects its youngest generation less often
(issue #32); a bare UvicornServer does neither."""

from __future__ import annotations

import gc
import threading

import uvicorn
from fastapi import FastAPI

from sglang.srt.frontend.http.uvicorn_server import UvicornServer, make_listen_socket, make_server, serve
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.gc_freeze import YOUNG_GC_THRESHOLD
from sglang.srt.utils.network import get_free_port
from test.helpers.waiting import wait_until


def test_make_server_freezes_after_startup():
    gc.unfreeze()
    thresholds = gc.get_threshold()
    app, started_with = FastAPI(), []

    @app.on_event("startup")
    async def lifespan_ran() -> None:
        started_with.append(gc.get_freeze_count())  # the lifespan runs before the freeze

    server = make_server(app, ServerArgs(log_level="warning"))
    sock = make_listen_socket("127.0.0.1", get_free_port(), False)
    thread = threading.Thread(target=serve, args=(server, sock), daemon=True)
    thread.start()
    try:
        assert wait_until(lambda: server.started, timeout=30)
        # right after uvicorn's own start-up (which sets `started`), on the serving thread
        assert wait_until(lambda: gc.get_freeze_count() > 10_000, timeout=10)  # the modules at least
        assert started_with == [0]
        # the youngest generation is collected less often; the older ones as before
        assert wait_until(lambda: gc.get_threshold()[0] == YOUNG_GC_THRESHOLD > thresholds[0], timeout=10)
        assert gc.get_threshold()[1:] == thresholds[1:]
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
        gc.unfreeze()  # give the rest of the test session its collector back
        gc.set_threshold(*thresholds)


def test_a_bare_uvicorn_server_does_not_freeze():
    assert not UvicornServer(uvicorn.Config(lambda *a: None, lifespan="off")).freeze_after_startup
