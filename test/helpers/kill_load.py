"""Clients that keep a server busy until some time after a process of it is killed: fault tests."""

from __future__ import annotations

import threading
import time

import requests

from test.helpers.waiting import wait_until


class KillLoad:
    """`n` closed-loop clients posting `payload(i)` to /v1/embeddings, one connection each (so every
    HTTP worker gets some); each stops once it has started a request 0.5 s after `mark_kill()`.

    `results` holds (start, end, status code or exception name) for every request."""

    def __init__(self, base_url: str, payload, n: int = 8) -> None:
        self.base_url = base_url
        self.payload = payload
        self.results: list[tuple[float, float, object]] = []
        self.stop = threading.Event()
        self.kill_time: list[float] = []
        self.answered = [0] * n  # answers per client
        self.threads = [threading.Thread(target=self._client, args=(i,)) for i in range(n)]

    def _client(self, i: int) -> None:
        with requests.Session() as sess:
            while not self.stop.is_set():
                t0 = time.monotonic()
                try:
                    r = sess.post(self.base_url + "/v1/embeddings", json={"input": self.payload(i)}, timeout=20)
                    outcome = r.status_code
                except requests.RequestException as e:
                    outcome = type(e).__name__
                self.results.append((t0, time.monotonic(), outcome))
                self.answered[i] += 1
                if self.kill_time and t0 > self.kill_time[0] + 0.5:
                    return

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def wait_running(self, timeout: float = 60.0) -> None:
        """Return once every client has had an answer, so each has its next request in flight."""
        assert wait_until(lambda: all(self.answered), timeout), f"answers per client: {self.answered}"

    def mark_kill(self) -> float:
        self.kill_time.append(time.monotonic())
        return self.kill_time[0]

    def join(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)

    def in_flight_at_kill(self) -> list[tuple[float, float, object]]:
        k = self.kill_time[0]
        return [(t0, t1, o) for t0, t1, o in self.results if t0 < k < t1]
