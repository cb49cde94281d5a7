"""msgcodec's header for every kind of field value, scalars on the fast path included."""

from __future__ import annotations

import enum
from dataclasses import field
from typing import Any, Optional

import numpy as np
import orjson

from sglang.srt.wire.msgcodec import decode, encode, message


class Color(str, enum.Enum):
    RED = "red"


class Small(int):
    """An int subclass: not an exact scalar type, so it takes the general path."""


@message
class Inner:
    name: str = "in"


@message
class Every:
    s: str
    i: int
    f: float
    b: bool
    none: Optional[int]
    color: Color
    np_int: Any
    small: Any
    arr: np.ndarray
    raw: bytes
    items: list = field(default_factory=list)
    table: dict = field(default_factory=dict)
    inner: Inner = field(default_factory=Inner)


def test_header_and_roundtrip_of_every_value_kind():
    msg = Every(
        "s", 7, 0.5, True, None, Color.RED, np.int64(3), Small(4), np.arange(3, dtype=np.int32), b"xy",
        [1, "a", None, (2, 3)], {"k": 1, 2: "v"}, Inner("z"),
    )  # fmt: skip
    frames = encode(msg)
    header = orjson.loads(frames[0])
    assert header == {
        "__t__": "Every",
        "s": "s",
        "i": 7,
        "f": 0.5,
        "b": True,
        "none": None,
        "color": "red",
        "np_int": 3,
        "small": 4,
        "arr": {"__nd__": 1, "dtype": "<i4", "shape": [3]},
        "raw": {"__b__": 2},
        "items": [1, "a", None, [2, 3]],
        "table": {"__kv__": [["k", 1], [2, "v"]]},
        "inner": {"__t__": "Inner", "name": "z"},
    }
    back = decode(frames)
    assert back.arr.tolist() == [0, 1, 2] and back.raw == b"xy" and back.inner == Inner("z")
    assert (back.s, back.i, back.b, back.none, back.table) == ("s", 7, True, None, {"k": 1, 2: "v"})


def test_fields_of_each_class_are_its_own():
    assert orjson.loads(encode(Inner("q"))[0]) == {"__t__": "Inner", "name": "q"}
    assert "inner" in orjson.loads(encode(Every("", 0, 0.0, False, None, Color.RED, 0, 0, np.zeros(0), b""))[0])
