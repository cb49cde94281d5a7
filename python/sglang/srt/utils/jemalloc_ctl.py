"""jemalloc's control interface (`mallctl`) from Python: the freed pages it holds, and giving them back.

The scheduler runs jemalloc with time-based page return switched off (`dirty_decay_ms:-1`, see
utils/allocator.py): freed activation buffers stay mapped as a pool the next batch reuses without
page faults, and the scheduler itself decides when the pool goes back to the system, through the
calls here.
"""

from __future__ import annotations

import ctypes
import logging
from typing import Optional

logger = logging.getLogger(__name__)

# MALLCTL_ARENAS_ALL in jemalloc's public header: "every arena" in arena.<i>.* and stats.arenas.<i>.*
_ALL_ARENAS = 4096


class JemallocControl:
    """`mallctl` of the jemalloc mapped into this process (open() is None where it is not)."""

    def __init__(self, mallctl) -> None:
        self._mallctl = mallctl
        self.page_size = self._read(b"arenas.page", ctypes.c_size_t) or 4096
        self.has_stats = bool(self._read(b"config.stats", ctypes.c_bool))

    @classmethod
    def open(cls, library: str) -> Optional["JemallocControl"]:
        """Bind to `library` (already loaded: dlopen hands back the same copy), or None."""
        try:
            mallctl = ctypes.CDLL(library).mallctl
        except (OSError, AttributeError):  # not jemalloc, or a prefixed build (je_mallctl)
            return None
        mallctl.restype = ctypes.c_int
        mallctl.argtypes = [
            ctypes.c_char_p,
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_size_t),
            ctypes.c_void_p,
            ctypes.c_size_t,
        ]
        return cls(mallctl)

    def _read(self, name: bytes, ctype):
        value, size = ctype(), ctypes.c_size_t(ctypes.sizeof(ctype))
        if self._mallctl(name, ctypes.byref(value), ctypes.byref(size), None, 0) != 0:
            return None
        return value.value

    def dirty_bytes(self) -> Optional[int]:
        """Freed pages jemalloc still holds (all arenas), or None when it was built without stats."""
        if not self.has_stats:
            return None
        epoch = ctypes.c_uint64(1)  # writing the epoch refreshes the statistics read below
        size = ctypes.c_size_t(ctypes.sizeof(epoch))
        self._mallctl(b"epoch", ctypes.byref(epoch), ctypes.byref(size), ctypes.byref(epoch), size)
        pages = self._read(f"stats.arenas.{_ALL_ARENAS}.pdirty".encode(), ctypes.c_size_t)
        return None if pages is None else pages * self.page_size

    def purge(self) -> bool:
        """Give every arena's freed pages back to the system now; False if jemalloc refused."""
        rc = self._mallctl(f"arena.{_ALL_ARENAS}.purge".encode(), None, None, None, 0)
        if rc != 0:
            logger.warning("jemalloc refused arena.%d.purge (error %d)", _ALL_ARENAS, rc)
        return rc == 0
