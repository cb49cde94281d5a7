"""An ASGI app on a real uvicorn, in a daemon thread, for tests of the connection layer."""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

import uvicorn

from sglang.srt.utils.network import get_free_port
from test.helpers.waiting import wait_until


@contextlib.contextmanager
def uvicorn_in_thread(app: Any, http: Any) -> Iterator[tuple[uvicorn.Server, int]]:
    """`app` served with the protocol class `http` on a free loopback port: (server, port)."""
    port = get_free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, http=http, lifespan="off", log_level="warning")
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    assert wait_until(lambda: srv.started, 10), "uvicorn did not start"
    try:
        yield srv, port
    finally:
        srv.should_exit = True
        thread.join(5)
