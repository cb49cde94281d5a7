"""What an HTTP process serves and how it changes state: one model's app or a ModelRouter over one
app per model, and what a drain, an engine death or one model's death does to them.

launch.py (the server process) and http_worker.py (each extra HTTP worker) use these.
"""

from __future__ import annotations

import logging
from typing import Callable, Optional, Union

from fastapi import FastAPI

from sglang.srt.configs.served_models import ServedModel
from sglang.srt.frontend.http.engine_death import wind_down
from sglang.srt.frontend.http.http_server import create_app
from sglang.srt.frontend.http.middleware import UNMATCHED_ROUTE, ServerLifecycle
from sglang.srt.frontend.http.model_router import ModelRouter
from sglang.srt.frontend.http.uvicorn_server import on_loop
from sglang.srt.frontend.tokenizer_manager import TokenizerManager
from sglang.srt.metrics.server_metrics import ServerMetrics
from sglang.srt.server_args import ServerArgs

logger = logging.getLogger(__name__)

ServerApp = Union[FastAPI, ModelRouter]


def create_server_app(
    server_args: ServerArgs,
    models: list[ServedModel],
    engine_alive: Optional[list[Callable[[], bool]]] = None,
    worker_id: int = 0,
    on_ready: Optional[Callable[[], None]] = None,
) -> ServerApp:
    """The app an HTTP process serves: one model's app, or a ModelRouter over one app per model."""
    alive = engine_alive or [lambda: True] * len(models)
    if len(models) == 1:
        m = models[0]
        return create_app(m.args, m.port_args, m.info, alive[0], worker_id=worker_id, on_ready=on_ready)
    apps = [create_app(m.args, m.port_args, m.info, a, worker_id=worker_id) for m, a in zip(models, alive)]
    return ModelRouter(apps, models, server_args.max_payload_bytes, server_args.body_timeout, on_ready=on_ready)


def member_apps(app: ServerApp) -> list[FastAPI]:
    """The per-model apps behind what an HTTP process serves."""
    return app.apps if isinstance(app, ModelRouter) else [app]


def count_refusal(app: ServerApp) -> Callable[[int], None]:
    """Counts connections refused before reaching the app (431, 408, 503: http_protocol.py), as
    route="unmatched" under the first model's `model` label (its ServerMetrics carries it)."""
    metrics: ServerMetrics = member_apps(app)[0].state.metrics
    return lambda status: metrics.requests.inc(route=UNMATCHED_ROUTE, status=str(status))


def start_draining(app: ServerApp, server_args: ServerArgs) -> None:
    """SIGTERM/SIGINT: new requests get 503 from now on, in-flight ones get --graceful-timeout."""
    lifecycles: list[ServerLifecycle] = [a.state.lifecycle for a in member_apps(app)]
    if not lifecycles[0].draining:
        for lifecycle in lifecycles:
            lifecycle.draining = True
        limit = f"{server_args.graceful_timeout:g} s" if server_args.graceful_timeout > 0 else "no limit"
        logger.info("shutting down: finishing in-flight requests (%s); new requests get 503", limit)


def engine_died(app: ServerApp, server, reason: str) -> None:
    """From any thread: fail in-flight and later requests with 503, let the answers go out, then
    stop serving (exit 1); engine_death.py says why in that order. (Every model's engine is dead.)"""
    logger.error("failing in-flight and new requests with 503 and stopping: %s", reason)
    if server.loop is None:  # not serving yet: nothing to answer
        server.should_exit = True
        return

    def fail_all() -> None:
        for member in member_apps(app):
            _fail_all(member, member.state.lifecycle.dead_reason or reason)

    on_loop(server, lambda: wind_down(server, fail_all))


def model_died(app: FastAPI, server, reason: str) -> None:
    """From any thread: one model of several lost its engine. Its requests fail with 503 until it
    is back (model_revived; connections stay open); the server and the other models keep serving."""
    logger.error("model %s: failing its requests with 503 from now on: %s", app.state.model_name, reason)
    app.state.lifecycle.server_lives = True
    if server.loop is None:
        _fail_all(app, reason)
        return
    on_loop(server, lambda: _fail_all(app, reason))


def _fail_all(app: FastAPI, reason: str) -> None:
    tm: Optional[TokenizerManager] = getattr(app.state, "tokenizer_manager", None)
    if tm is not None:
        tm.on_engine_dead(reason)
    app.state.lifecycle.dead_reason = reason


def model_revived(app: FastAPI, server) -> None:
    """From any thread: a dead model's engine was started again; its requests are served again."""

    def revive() -> None:
        tm: Optional[TokenizerManager] = getattr(app.state, "tokenizer_manager", None)
        if tm is not None:
            tm.on_engine_back()
        app.state.lifecycle.dead_reason = None

    logger.debug("model %s: serving again", app.state.model_name)
    if server.loop is None:
        revive()
        return
    on_loop(server, revive)
