"""benchmark/hostile_inputs/images.py's --baseline: older code gets the image flags it defines
(the script is loaded in a child process, as test_scripts_import.py loads every script)."""

from __future__ import annotations

from test.helpers.benchmark_child import ROOT, run_with_benchmarks

CHILD = """
flag_known = runpy.run_path("benchmark/hostile_inputs/images.py", run_name="imported_by_test")["flag_known"]
print(" ".join(str(flag_known(d, f)) for d, f in zip(sys.argv[1::2], sys.argv[2::2])))
"""


def known(*pairs: str) -> list[str]:
    child = run_with_benchmarks(CHILD, *pairs)
    assert child.returncode == 0, child.stderr[-4000:]
    return child.stdout.split()


def test_flags_are_read_from_the_checkouts_server_args(tmp_path):
    old = tmp_path / "sglang" / "srt"
    old.mkdir(parents=True)
    (old / "server_args.py").write_text('g.add_argument("--mm-max-image-pixels", type=int)\n')
    here, older, missing = str(ROOT / "python"), str(tmp_path), str(tmp_path / "missing")
    answers = known(
        *(here, "--mm-max-image-pixels"),
        *(here, "--mm-allow-private-urls"),
        *(here, "--mm-no-such-flag"),
        *(older, "--mm-max-image-pixels"),
        *(older, "--mm-allow-private-urls"),
        *(missing, "--mm-max-image-pixels"),
    )
    assert answers == ["True", "True", "False", "True", "False", "False"]
