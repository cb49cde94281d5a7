"""Start the real server (`python -m sglang.launch_server`) on a free loopback port for tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Optional

import requests

from sglang.srt.utils.network import get_free_port


class ServerProcess:
    def __init__(self, *args: str, env: Optional[dict] = None, timeout: float = 180.0) -> None:
        self.port = get_free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "sglang.launch_server", "--host", "127.0.0.1", "--port", str(self.port), *args]
        full_env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **(env or {})}
        self.log_path = f"/tmp/sglang-test-server-{self.port}.log"
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=full_env,
                                     start_new_session=True)
        self._wait_healthy(timeout)

    def _wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if requests.get(self.base_url + "/health", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"server not healthy within {timeout} s:\n{self.log()}")

    def log(self) -> str:
        self._log.flush()
        with open(self.log_path) as f:
            return f.read()[-4000:]

    def children(self) -> list[int]:
        """PIDs of every process in the server's session except the server itself."""
        out = subprocess.run(["ps", "-o", "pid=", "-s", str(self.proc.pid)], capture_output=True, text=True)
        return [int(p) for p in out.stdout.split() if int(p) != self.proc.pid]

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
