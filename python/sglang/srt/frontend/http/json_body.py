"""Request bodies: strict UTF-8 JSON parsed by orjson, and large ones parsed off the event loop.

`JsonBodyRoute` is the app's route class, so every JSON route gets it, including routes added
later. Before FastAPI's own body handling runs it parses the body itself and, for a route with one
request model, validates it too; FastAPI then finds the finished model and only checks its type. A
route with nothing but that model (and the Request) skips FastAPI's handler and is called with the
model directly, with the same answers (direct_call.py).

- orjson reads UTF-8 only: UTF-16/32 bodies (which `json.loads` would guess and accept) and lone
  surrogate escapes (`"\\ud800"`, which no UTF-8 response could echo) are 400s, never a 500.
- Routes that read their body by hand (the body's shape picks the dialect) use `read_json`.
- A route that parses a body to pick another route (SageMaker's /invocations) hands the value
  over (`hand_over`): the chosen route validates it without parsing it again.
- Bodies over LARGE_BODY_BYTES are parsed and validated in a worker thread (one per route, so
  large bodies queue instead of piling up). orjson and pydantic hold the GIL while they run, but
  each step is short (about 0.1 s for 7 MB of token ids, where `json.loads` plus a union tried
  shape by shape took 0.75 s) and the event loop runs between them: /health and small requests
  keep being answered while clients send megabytes (docs/operations.md has the numbers).
"""

from __future__ import annotations

import asyncio
import gc
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Optional

import orjson
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.requests import Request

from sglang.srt.frontend.http.direct_call import direct_endpoint, direct_ok, plain_json

LARGE_BODY_BYTES = 256 * 1024
PARSED_BODY = "sglang.parsed_body"  # scope key of a ParsedBody


@dataclass(frozen=True)
class ParsedBody:
    """A body a dispatching route already parsed: the JSON value and the body's size in bytes."""

    value: Any
    size: int


def json_error(exc: orjson.JSONDecodeError, body: bytes) -> RequestValidationError:
    """orjson's complaint as the validation error FastAPI would raise for invalid JSON."""
    try:
        body.decode("utf-8")
        detail = exc.msg
    except UnicodeDecodeError:
        detail = "invalid UTF-8"  # UTF-16 and friends included: orjson's own words would mislead
    error = {"type": "json_invalid", "loc": ("body", exc.pos), "msg": "JSON decode error", "input": {}}
    return RequestValidationError([{**error, "ctx": {"error": detail}}])


def loads(body: bytes) -> Any:
    """orjson.loads with the cyclic garbage collector paused: a body of a million small lists
    (`{"ids": [[1], [2], ...]}`) set off collections over every object of the process while it
    was built, 1.9 s holding the GIL (0.12 s paused). JSON values hold no cycles; reference
    counting frees them."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return orjson.loads(body)
    finally:
        if enabled:
            gc.enable()


def parse_body(body: bytes, field: Optional[Any]) -> Any:
    """The JSON value of `body`, validated against FastAPI's body `field` when one is given."""
    try:
        value = loads(body)
    except orjson.JSONDecodeError as e:
        raise json_error(e, body) from None
    return validate_value(value, field)


def validate_value(value: Any, field: Optional[Any]) -> Any:
    if field is None:
        return value
    validated, errors = field.validate(value, {}, loc=("body",))
    if errors:
        raise RequestValidationError(errors, body=value)
    return validated


def hand_over(scope: dict, value: Any, size: int) -> None:
    """Mark a request whose body a dispatching route (/invocations) already parsed: the route it
    is handed to validates `value` without parsing the `size` bytes again."""
    scope[PARSED_BODY] = ParsedBody(value, size)


class JsonBodyRoute(APIRoute):
    """An APIRoute whose JSON body is parsed (and validated) as the module docstring says."""

    _executor: Optional[ThreadPoolExecutor] = None

    def _pool(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="json-body")
        return self._executor

    async def _run(self, size: int, fn, *args) -> Any:
        """`fn(*args)` here for a small body, in the route's worker thread for a large one."""
        if size > LARGE_BODY_BYTES:
            return await asyncio.get_running_loop().run_in_executor(self._pool(), fn, *args)
        return fn(*args)

    def get_route_handler(self):
        handler = super().get_route_handler()
        field = self.body_field
        if field is None:
            return handler
        # Several body parameters are embedded under their names: leave their validation to FastAPI.
        model_field = None if getattr(self, "_embed_body_fields", True) else field
        direct = direct_endpoint(self) if model_field is not None else None

        async def parse_then_handle(request: Request):
            parsed: Optional[ParsedBody] = request.scope.pop(PARSED_BODY, None)
            if parsed is not None:  # parsed by the route that dispatched here (hand_over)
                value = await self._run(parsed.size, validate_value, parsed.value, model_field)
            else:
                body = await request.body()
                if not body:
                    return await handler(request)
                value = await self._run(len(body), parse_body, body, model_field)
            if direct is not None and plain_json(request) and direct_ok():
                return await direct(request, value)  # what FastAPI's handler would end in (direct_call.py)
            request._json = value  # what Request.json() returns; FastAPI reads the body through it
            return await handler(request)

        return parse_then_handle


async def read_json(raw: Request) -> Optional[Any]:
    """The parsed body, or None when it is not JSON. orjson, not the json module: a body nested
    thousands of levels deep is a parse error here, not a RecursionError (a 500)."""
    parsed: Optional[ParsedBody] = raw.scope.pop(PARSED_BODY, None)
    if parsed is not None:  # parsed by the route that dispatched here (hand_over)
        return parsed.value
    try:
        return loads(await raw.body())
    except (orjson.JSONDecodeError, RecursionError):
        return None
