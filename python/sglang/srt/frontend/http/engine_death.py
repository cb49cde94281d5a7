"""What an HTTP process does when an engine process died: answer everything it received, then stop.

The server exits non-zero on an engine death (a supervisor restarts it, docs/operations.md), but
every request it already received gets an HTTP answer first. Stopping uvicorn at once would close
each idle kept-alive connection while its client may be writing the next request on it, and any
connection it accepted but had not read yet: those clients get a TCP reset, not an answer. So:

1. every request in flight fails with 503 naming the dead process (TokenizerManager.on_engine_dead),
   and each of those answers closes its connection;
2. the listening sockets close at once, while clients are still busy on their open connections, so
   a new connection is refused (nothing sent, safe to retry elsewhere) instead of reset later;
3. a request arriving on a connection that stays open gets 503 with `Connection: close`
   (middleware.DrainGuard, `ServerLifecycle.dead_reason`);
4. once every connection has closed, or after ENGINE_DEATH_GRACE seconds, uvicorn stops (closing
   whatever idle connection is left) and the process exits.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable

from sglang.srt.frontend.http.uvicorn_server import UvicornServer
from sglang.srt.utils.process import ENGINE_DEATH_GRACE

logger = logging.getLogger(__name__)

_POLL = 0.02


def wind_down(server: UvicornServer, fail_all: Callable[[], None], grace: float = ENGINE_DEATH_GRACE) -> None:
    """On the server's event loop: run `fail_all` (503 for what is in flight, and for what comes),
    stop accepting, and stop uvicorn once the answers went out (at most `grace` seconds)."""
    fail_all()
    if not server.started:  # uvicorn is still starting: nothing was received, and it closes what it opened
        server.should_exit = True
        return
    # Before any failed request resumes and writes its 503: each of them closes its connection.
    for conn in list(server.server_state.connections):
        cycle = getattr(conn, "cycle", None)
        if cycle is not None and not cycle.response_complete:
            cycle.keep_alive = False
    stop_listening(server)
    asyncio.get_running_loop().create_task(_stop_when_answered(server, grace))


def stop_listening(server: UvicornServer) -> None:
    """Close the listening sockets: new connections are refused from now on."""
    for srv in getattr(server, "servers", None) or []:
        srv.close()
    for sock in server.listen_sockets:
        try:
            sock.close()
        except OSError:
            pass


async def _stop_when_answered(server: UvicornServer, grace: float) -> None:
    deadline = time.monotonic() + grace
    while server.server_state.connections and time.monotonic() < deadline:
        await asyncio.sleep(_POLL)
    left = len(server.server_state.connections)
    if left:
        logger.info("stopping with %d connection(s) still open %g s after the engine died", left, grace)
    server.should_exit = True
