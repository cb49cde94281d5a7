"""Benchmark scripts loaded in a child Python, where they find what they import (the repo root for
test.helpers, benchmark/ for each other) and pytest's own imports cannot shadow theirs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRELUDE = f"import runpy, sys\nsys.path[:0] = [{str(ROOT)!r}, {str(ROOT / 'benchmark')!r}]\n"


def run_with_benchmarks(code: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`code` (after PRELUDE) with `args` as sys.argv[1:], run from the repo root; text output."""
    return subprocess.run(
        [sys.executable, "-c", PRELUDE + code, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )
