"""Every long-lived process of a real server (the HTTP process, the scheduler, the detokenizer)
has frozen its start-up objects and collects its youngest generation less often once it serves
(utils/gc_freeze.py, issue #32).

Each process reports its collector's state through a sitecustomize put first on PYTHONPATH: a
thread that, once the test creates a trigger file, writes the process's name, frozen-object count
and thresholds to a file of its own. Spawned children run sitecustomize too, so the scheduler and
the detokenizer report as well as the server process.
"""

from __future__ import annotations

import json
import os

import requests

from sglang.srt.utils.gc_freeze import YOUNG_GC_THRESHOLD
from test.helpers.server import ServerProcess
from test.helpers.waiting import wait_until

PROBE = """
import gc, json, os, threading, time

def _report(directory):
    trigger = os.path.join(directory, "report")
    while not os.path.exists(trigger):
        time.sleep(0.1)
    with open("/proc/self/comm") as f:
        name = f.read().strip()
    state = {"pid": os.getpid(), "name": name, "frozen": gc.get_freeze_count(), "threshold": list(gc.get_threshold())}
    path = os.path.join(directory, f"gc-{os.getpid()}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(state, f)
    os.replace(path + ".tmp", path)

_directory = os.environ.get("SGLANG_TEST_GC_PROBE")
if _directory:
    threading.Thread(target=_report, args=(_directory,), daemon=True).start()
"""


def reports(directory: str) -> dict[int, dict]:
    """pid -> what that process reported."""
    out = {}
    for name in os.listdir(directory):
        if name.startswith("gc-") and name.endswith(".json"):
            with open(os.path.join(directory, name)) as f:
                state = json.load(f)
            out[state["pid"]] = state
    return out


def test_every_server_process_freezes_startup_objects(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(PROBE)
    probe = tmp_path / "probe"
    probe.mkdir()
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    with ServerProcess(env={"PYTHONPATH": path, "SGLANG_TEST_GC_PROBE": str(probe)}) as server:
        r = requests.post(server.base_url + "/v1/embeddings", json={"input": "frozen start-up"}, timeout=60)
        assert r.status_code == 200, r.text
        (probe / "report").touch()
        names = ("sglang-schedule", "sglang-detokeni")

        def every_process_reported() -> bool:
            states = reports(str(probe))
            return server.proc.pid in states and set(names) <= {s["name"] for s in states.values()}

        assert wait_until(every_process_reported, 30)
        states = reports(str(probe))
    by_name = {s["name"]: s for s in states.values()}
    # the server process (HTTP and tokenizer), the scheduler, the detokenizer
    for state in [states[server.proc.pid], by_name[names[0]], by_name[names[1]]]:
        assert state["frozen"] > 10_000, state  # the modules at least
        assert state["threshold"][0] == YOUNG_GC_THRESHOLD, state
