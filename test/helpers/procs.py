"""Process checks for lifecycle tests: is a PID still running, which PIDs are which (waiting for a
condition is test/helpers/waiting.py)."""

from __future__ import annotations


def is_running(pid: int) -> bool:
    """True while `pid` runs; a zombie has exited and only waits for its parent to reap it."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def running(pids: list[int]) -> list[int]:
    return [p for p in pids if is_running(p)]


def pids_by_name(pids: list[int]) -> dict[str, int]:
    """{process name (/proc/PID/comm): PID} of `pids`, skipping any that has exited."""
    out = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/comm") as f:
                out[f.read().strip()] = pid
        except FileNotFoundError:
            pass
    return out
