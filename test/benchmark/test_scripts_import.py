"""Every benchmark script still imports: the benchmarks are run by hand, now and then, so a helper
renamed in the tests or the package (test.helpers.procs.wait_for became waiting.wait_until) broke
benchmark/hostile_inputs for weeks before anyone ran it. Nothing here runs a benchmark: each file
is executed under a name other than __main__, in one child process (one import of torch)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "benchmark").rglob("*.py"))

CHILD = """
import runpy, sys, traceback
sys.path[:0] = [{root!r}, {root!r} + "/benchmark"]
failed = []
for path in sys.argv[1:]:
    try:
        runpy.run_path(path, run_name="imported_by_test")
    except BaseException:
        failed.append(path + "\\n" + traceback.format_exc(limit=-2))
print("\\n".join(failed))
sys.exit(1 if failed else 0)
"""


def test_every_benchmark_script_imports():
    assert len(SCRIPTS) > 20, SCRIPTS  # found them
    child = subprocess.run(
        [sys.executable, "-c", CHILD.format(root=str(ROOT)), *SCRIPTS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == 0, child.stdout + child.stderr[-4000:]
