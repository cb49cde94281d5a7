"""A route's JSON body read by hand (routes whose body shape decides the dialect)."""

from __future__ import annotations

from typing import Any, Optional

import orjson
from fastapi import Request


async def read_json(raw: Request) -> Optional[Any]:
    """The parsed body, or None when it is not JSON. orjson, not the json module: a body nested
    thousands of levels deep is a parse error here, not a RecursionError (a 500)."""
    try:
        return orjson.loads(await raw.body())
    except (orjson.JSONDecodeError, RecursionError):
        return None
