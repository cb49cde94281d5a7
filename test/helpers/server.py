"""Start the real server (`python -m sglang.launch_server`) on a free loopback port for tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Optional

import requests

from sglang.srt.utils.network import get_free_port
from sglang.srt.utils.process import set_parent_death_signal
from test.helpers.prom import parse
from test.helpers.waiting import wait_until


def die_with_parent() -> None:
    set_parent_death_signal(signal.SIGTERM)


class ServerProcess:
    def __init__(
        self,
        *args: str,
        env: Optional[dict] = None,
        timeout: float = 180.0,
        tls: Optional[dict] = None,
        wait: bool = True,
    ) -> None:
        self.port = get_free_port()
        # tls: requests' keyword arguments for an HTTPS server (verify=CA file, cert=(cert, key)).
        self.tls = tls
        self.base_url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "sglang.launch_server", "--host", "127.0.0.1", "--port", str(self.port), *args]
        full_env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **(env or {})}
        self.log_path = f"/tmp/sglang-test-server-{self.port}.log"
        self._log = open(self.log_path, "w")
        # Own session (so signals to the test runner's group do not reach it), but it still dies
        # with the test process if pytest is killed: no stray servers after a timeout.
        self.proc = subprocess.Popen(
            cmd,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=full_env,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        if wait:  # wait=False: start several servers, then wait_healthy() on each
            self.wait_healthy(timeout)

    def wait_healthy(self, timeout: float = 180.0) -> None:
        if not wait_until(self._healthy, timeout, interval=0.2):
            self.stop()
            raise TimeoutError(f"server not healthy within {timeout} s:\n{self.log()}")

    def _healthy(self) -> bool:
        """Whether /health answers 200 now; a server that exited will never be, so that raises."""
        if self.proc.poll() is not None:
            raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
        try:
            return requests.get(self.base_url + "/health", timeout=1, **(self.tls or {})).status_code == 200
        except requests.RequestException:
            return False

    def log(self) -> str:
        self._log.flush()
        with open(self.log_path) as f:
            return f.read()[-4000:]

    def in_flight(self, headers: Optional[dict] = None) -> float:
        """HTTP requests the server is handling now (all HTTP workers: the gauge is a live sum), from
        /metrics, not counting the scrape itself: what a test waits on before it signals or kills
        something mid-request. With several models, every model's series (their `model` label) add up."""
        text = requests.get(self.base_url + "/metrics", headers=headers, timeout=10, **(self.tls or {})).text
        samples = parse(text)["sglang_http_requests_in_flight"]["samples"]
        return sum(v for _, _, v in samples) - 1

    def children(self) -> list[int]:
        """PIDs of every process in the server's session except the server itself."""
        out = subprocess.run(["ps", "-o", "pid=", "-s", str(self.proc.pid)], capture_output=True, text=True)
        return [int(p) for p in out.stdout.split() if int(p) != self.proc.pid]

    def ipc_dir(self) -> str:
        """The IPC directory this server's processes bound their ZeroMQ sockets in.

        Read from /proc/net/unix and the children's socket fds: other servers may start and stop
        in /tmp meanwhile, so a before/after listing of /tmp is not enough.
        """
        paths = {}
        with open("/proc/net/unix") as f:
            for line in f.readlines()[1:]:
                parts = line.split()
                if len(parts) >= 8 and "/sglang-embed-" in parts[7]:
                    paths[parts[6]] = parts[7]
        dirs = set()
        for pid in self.children():
            try:
                fds = os.listdir(f"/proc/{pid}/fd")
            except FileNotFoundError:
                continue
            for fd in fds:
                try:
                    link = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if link.startswith("socket:[") and link[8:-1] in paths:
                    dirs.add(os.path.dirname(paths[link[8:-1]]))
        if len(dirs) != 1:
            raise AssertionError(f"expected one IPC directory, found {dirs}")
        return dirs.pop()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self._log.close()
        return self.proc.returncode

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
