"""One logging format for every process."""

from __future__ import annotations

import logging


def configure_logging(level: str = "info", prefix: str = "") -> None:
    fmt = f"[%(asctime)s{(' ' + prefix) if prefix else ''}] %(levelname)s %(message)s"
    logging.basicConfig(level=level.upper(), format=fmt, datefmt="%Y-%m-%d %H:%M:%S", force=True)
