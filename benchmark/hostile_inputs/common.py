"""What every probe module shares: the run context, results, and small bounded network helpers."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional

from test.helpers.waiting import wait_until  # noqa: F401  (the probes' one poll loop, shared with the tests)


@dataclass
class Result:
    area: str
    probe: str
    ok: bool
    detail: str = ""
    skipped: bool = False  # not run here (say why in `detail`); neither tried nor failed


@dataclass
class Context:
    base_url: str
    port: int
    proc: Optional[subprocess.Popen] = None  # the server, when the runner started it (process probes)
    log_path: Optional[str] = None
    api_key: Optional[str] = None
    numbers: dict[str, Any] = field(default_factory=dict)  # measurements the runner prints at the end

    def headers(self, extra: Optional[dict] = None) -> dict:
        h = {"Content-Type": "application/json"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return {**h, **(extra or {})}


def http(
    ctx: Context, method: str, path: str, body: Optional[bytes] = None, headers: Optional[dict] = None, timeout=30.0
) -> tuple[int, dict, bytes]:
    """(status, headers, body) of one request; never raises for an HTTP error status."""
    req = urllib.request.Request(ctx.base_url + path, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


def post_json(ctx: Context, path: str, payload: Any, headers: Optional[dict] = None, timeout=30.0):
    return http(ctx, "POST", path, json.dumps(payload).encode(), ctx.headers(headers), timeout)


def raw(ctx: Context, data: bytes, read_timeout: float = 10.0, chunk: int = 256 * 1024) -> bytes:
    """Send `data` on a new connection (in chunks, stopping early once the server answers) and
    read until the server closes it (or the timeout)."""
    with socket.create_connection(("127.0.0.1", ctx.port), timeout=read_timeout) as sock:
        for i in range(0, len(data), chunk):
            if select.select([sock], [], [], 0)[0]:
                break  # answered (and probably closing): stop sending
            try:
                sock.sendall(data[i : i + chunk])
            except (BrokenPipeError, ConnectionResetError):
                break
        out = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except (ConnectionResetError, socket.timeout):
                return out
            if not chunk:
                return out
            out += chunk


def metrics(ctx: Context) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted label pairs): value} from one scrape of /metrics."""
    _, _, body = http(ctx, "GET", "/metrics", headers=ctx.headers())
    out = {}
    for line in body.decode().splitlines():
        if not line or line.startswith("#"):
            continue
        name_labels, _, val = line.rpartition(" ")
        name, _, labels = name_labels.partition("{")
        pairs = tuple(sorted(tuple(p.split("=", 1)) for p in labels.rstrip("}").split(",") if p))
        out[(name, tuple((k, v.strip('"')) for k, v in pairs))] = float(val)
    return out


def sample(scrape: dict, name: str, **labels: str) -> float:
    want = tuple(sorted(labels.items()))
    return scrape.get((name, want), 0.0)


def is_error_shape(body: bytes) -> bool:
    try:
        err = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return False
    return isinstance(err, dict) and set(err) == {"message", "type", "param", "code"}


class Recorder:
    """Collects one area's results: `check(name, ok, detail)` never raises."""

    def __init__(self, area: str) -> None:
        self.area = area
        self.results: list[Result] = []

    def check(self, probe: str, ok: bool, detail: str = "") -> None:
        self.results.append(Result(self.area, probe, bool(ok), detail))

    def skip(self, probe: str, why: str) -> None:
        self.results.append(Result(self.area, probe, True, why, skipped=True))

    def attempt(self, probe: str, fn: Callable[[], tuple[bool, str]]) -> None:
        try:
            ok, detail = fn()
        except Exception as e:  # a probe that crashes is a failed probe, not a crashed run
            ok, detail = False, f"{type(e).__name__}: {e}"
        self.check(probe, ok, detail)


def start_server(flags: list[str]) -> tuple[subprocess.Popen, int, str]:
    """Start `sglang.launch_server` with `flags` on a free loopback port; (process, port, log path)
    once /health is 200."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = os.path.join(tempfile.gettempdir(), f"hostile-inputs-server-{port}.log")
    cmd = [
        sys.executable,
        "-m",
        "sglang.launch_server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *flags,
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env, start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with {proc.returncode}; see {log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                if r.status == 200:
                    return proc, port, log
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise SystemExit(f"the server did not become healthy; see {log}")


def record_numbers(ctx: Optional[object], area: str, results: list[Result]) -> list[Result]:
    """The runner's hook's last step in an area that starts its own servers: every result's detail
    goes to ctx.numbers as "<area>: <probe>" (when ctx has numbers); returns `results`."""
    numbers = getattr(ctx, "numbers", None)
    if isinstance(numbers, dict):
        for r in results:
            numbers[f"{area}: {r.probe}"] = r.detail
    return results


def report(results: list[Result], notes: tuple[str, ...] | list[str] = ()) -> int:
    """Print one line a result, then `notes`, then tried / failed, for an area run alone; its exit
    status (1 when a probe failed)."""
    for r in results:
        print(f"{'ok  ' if r.ok else 'FAIL'}  {r.probe}: {r.detail}")
    for note in notes:
        print(note)
    failed = sum(not r.ok for r in results)
    print(f"tried {len(results)}, failed {failed}")
    return 1 if failed else 0


@contextmanager
def own_server(flags: list[str]) -> Iterator[tuple[subprocess.Popen, int, str]]:
    """`start_server(flags)` for an area that stops or kills its server: (process, port, log path);
    the process group is SIGKILLed on the way out if the server still runs."""
    proc, port, log = start_server(flags)
    try:
        yield proc, port, log
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def exit_code(proc: subprocess.Popen, timeout: float) -> Optional[int]:
    """The process's exit status within `timeout` seconds, or None when it still runs."""
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        return None
