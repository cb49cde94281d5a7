"""Turns gpu_check.sh's stage records into summary.json (and, when rehearsing, rehearsal.json).

gpu_check.sh appends one tab-separated line per stage to a file: name, exit status (empty when
the stage was skipped), seconds, note. Written in Python rather than shell so that the verdicts
(what counts as ok, how a time-out reads) are unit-tested (test/benchmark/test_gpu_check_report.py).

    python benchmark/gpu_check_report.py STAGES_TSV OUT_DIR [--rehearsal BUNDLE_DIR
        --gpu-tests-collected N --flashinfer-missing-fails 0|1]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Optional

TIMED_OUT = (124, 137)  # timeout(1)'s status, and SIGKILL after --kill-after


def parse_stages(text: str) -> list[dict]:
    """One dict per stage line, in order: {"name", "rc" (None: skipped), "seconds", "note"}."""
    stages = []
    for line in text.splitlines():
        if not line.strip():
            continue
        name, rc, seconds, note = (line.split("\t") + ["", "", ""])[:4]
        stages.append({"name": name, "rc": int(rc) if rc else None, "seconds": int(seconds or 0), "note": note})
    return stages


def verdict(stage: dict) -> str:
    """'ok', or why not, in a few words."""
    if stage["rc"] == 0:
        return "ok"
    if stage["rc"] is None:
        return stage["note"] or "skipped"
    if stage["rc"] in TIMED_OUT:
        return f"timed out after {stage['seconds']}s"
    return f"exit {stage['rc']}" + (f": {stage['note']}" if stage["note"] else "")


def summary(stages: list[dict]) -> dict:
    return {
        "stages": {s["name"]: {"rc": s["rc"], "seconds": s["seconds"], "verdict": verdict(s)} for s in stages},
        "failed": any(verdict(s) != "ok" for s in stages) or not stages,
    }


def rehearsal(stages: list[dict], gpu_tests_collected: int, flashinfer_missing_fails: bool) -> dict:
    return {
        "stages": {s["name"]: verdict(s) for s in stages},
        "gpu_tests_collected": gpu_tests_collected,
        "flashinfer_missing_fails": flashinfer_missing_fails,
    }


def rehearsal_passed(report: dict) -> bool:
    """Every stage ok, GPU tests collected, and a missing FlashInfer stops the check."""
    stages = report["stages"]
    return (
        bool(stages)
        and all(v == "ok" for v in stages.values())
        and report["gpu_tests_collected"] > 0
        and report["flashinfer_missing_fails"] is True
    )


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stages_tsv")
    parser.add_argument("out_dir")
    parser.add_argument("--rehearsal", metavar="BUNDLE_DIR", help="also write BUNDLE_DIR/rehearsal.json")
    parser.add_argument("--gpu-tests-collected", type=int, default=0)
    parser.add_argument("--flashinfer-missing-fails", type=int, choices=(0, 1), default=0)
    args = parser.parse_args(argv)
    with open(args.stages_tsv) as f:
        stages = parse_stages(f.read())
    result = summary(stages)
    with open(os.path.join(args.out_dir, "summary.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result, indent=1))
    if args.rehearsal is None:
        return 1 if result["failed"] else 0
    report = rehearsal(stages, args.gpu_tests_collected, bool(args.flashinfer_missing_fails))
    with open(os.path.join(args.rehearsal, "rehearsal.json"), "w") as f:
        json.dump(report, f, indent=1)
    print("rehearsal.json:", json.dumps(report))
    return 0 if rehearsal_passed(report) else 1


if __name__ == "__main__":
    sys.exit(main())
