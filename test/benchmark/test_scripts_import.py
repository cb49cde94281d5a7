"""Every benchmark script still imports: the benchmarks are run by hand, now and then, so a helper
renamed in the tests or the package (test.helpers.procs.wait_for became waiting.wait_until) broke
benchmark/hostile_inputs for weeks before anyone ran it. Nothing here runs a benchmark: each file
is executed under a name other than __main__, in one child process (one import of torch)."""

from __future__ import annotations

from test.helpers.benchmark_child import ROOT, run_with_benchmarks

SCRIPTS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "benchmark").rglob("*.py"))

CHILD = """
import traceback
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
    child = run_with_benchmarks(CHILD, *SCRIPTS)
    assert child.returncode == 0, child.stdout + child.stderr[-4000:]
