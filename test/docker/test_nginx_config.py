"""The shipped nginx config (docker/nginx/sglang-embed.conf.template) on a real nginx, in front of
small scripted upstreams: what it retries, what it passes through, and the errors it makes itself.

The end-to-end test with real sglang replicas is test_nginx_e2e.py; these cases need upstreams
that fail on demand (429, 503, hang), which a healthy server does not do on request.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from test.helpers.nginx import TEMPLATE, NginxProcess, render_template, unfilled_variables

pytestmark = pytest.mark.slow  # starts nginx processes


class FakeReplica:
    """An HTTP/1.1 upstream named `name`. A request's `x-fail-on` / `x-hang-on` / `x-429-on` header
    lists the replicas that answer it with 503 / never answer (within the test) / 429."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.hits: list[dict] = []
        replica = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                replica.hits.append(
                    {
                        "headers": dict(self.headers),
                        "peer": self.client_address,
                        "version": self.request_version,
                        "size": len(body),
                    }
                )
                names = lambda h: (self.headers.get(h) or "").split(",")  # noqa: E731
                if replica.name in names("x-hang-on"):
                    time.sleep(3)
                    return
                if replica.name in names("x-429-on"):
                    self._send(429, {"error": {"message": "full", "type": "rate_limit_error"}}, {"Retry-After": "7"})
                elif replica.name in names("x-fail-on"):
                    self._send(503, {"error": {"message": "down", "type": "server_error"}})
                else:
                    self._send(200, {"replica": replica.name})

            def _send(self, status: int, body: dict, headers: dict = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.address = f"127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def replicas():
    pair = [FakeReplica("A"), FakeReplica("B")]
    yield pair
    for r in pair:
        r.close()


def post(nginx: NginxProcess, headers: dict = None, body: bytes = b'{"input": "x"}') -> requests.Response:
    return requests.post(
        nginx.base_url + "/v1/embeddings",
        data=body,
        timeout=30,
        headers={"Content-Type": "application/json", **(headers or {})},
    )


def test_template_renders_every_variable():
    env = {"NGINX_PORT": "80", "SGLANG_MAX_PAYLOAD_BYTES": "8388608", "SGLANG_PROXY_READ_TIMEOUT": "120s"}
    conf = render_template(TEMPLATE.read_text(), env, ["sglang:30000"])
    assert unfilled_variables(conf) == set()
    assert "server sglang:30000 max_fails=2 fail_timeout=10s;" in conf
    assert "$host" in conf and "$upstream_addr" in conf  # nginx's own variables survive envsubst
    assert unfilled_variables(render_template(TEMPLATE.read_text(), {}, ["x:1"])) == {
        "NGINX_PORT",
        "SGLANG_MAX_PAYLOAD_BYTES",
        "SGLANG_PROXY_READ_TIMEOUT",
    }


def test_forwarding_keepalive_and_request_ids(replicas):
    with NginxProcess([r.address for r in replicas]) as nginx:
        for _ in range(6):
            assert post(nginx).status_code == 200
        r = post(nginx, {"x-request-id": "client-id-1"})
        assert r.status_code == 200
        hits = replicas[0].hits + replicas[1].hits
        # least_conn spreads sequential requests over both; HTTP/1.1 connections are reused.
        assert len(replicas[0].hits) >= 2 and len(replicas[1].hits) >= 2
        assert all(h["version"] == "HTTP/1.1" for h in hits)
        assert len({h["peer"] for h in hits}) < len(hits), "nginx opened a new upstream connection per request"
        ids = [h["headers"].get("X-Request-Id") for h in hits]
        assert "client-id-1" in ids
        generated = [i for i in ids if i != "client-id-1"]
        assert len(generated) == 6 and all(len(i) == 32 for i in generated) and len(set(generated)) == 6
        assert all(h["headers"].get("Host") == "127.0.0.1" for h in hits)
        assert all(h["headers"].get("X-Forwarded-For") == "127.0.0.1" for h in hits)


def test_post_retried_on_503_but_429_passed_through(replicas):
    a, b = replicas
    with NginxProcess([a.address, b.address]) as nginx:
        for _ in range(4):
            r = post(nginx, {"x-fail-on": "A"})
            assert r.status_code == 200 and r.json() == {"replica": "B"}
        assert len(a.hits) >= 1, "nginx never tried the failing replica, so no retry was exercised"

    with NginxProcess([a.address, b.address]) as nginx:
        before = len(a.hits) + len(b.hits)
        r = post(nginx, {"x-429-on": "A,B"})
        assert r.status_code == 429 and r.headers["Retry-After"] == "7"
        assert r.json()["error"]["type"] == "rate_limit_error"
        assert len(a.hits) + len(b.hits) == before + 1, "a 429 must reach the client, not be retried"


def test_hung_replica_times_out_and_is_retried(replicas):
    a, b = replicas
    with NginxProcess([a.address, b.address], read_timeout="1s") as nginx:
        for _ in range(3):
            t0 = time.monotonic()
            r = post(nginx, {"x-hang-on": "A"})
            assert r.status_code == 200 and r.json() == {"replica": "B"}
            assert time.monotonic() - t0 < 2.5
        assert len(a.hits) >= 1


def test_nginx_own_errors_are_openai_json(replicas):
    with NginxProcess([r.address for r in replicas], max_payload_bytes=1000) as nginx:
        r = post(nginx, body=b'{"input": "' + b"x" * 2000 + b'"}')
        assert r.status_code == 413
        err = r.json()["error"]
        assert err["type"] == "invalid_request_error" and "1000 bytes" in err["message"]
        assert not replicas[0].hits and not replicas[1].hits
        # Every replica answering 503 (all draining): the last replica's own answer reaches the client.
        r = post(nginx, {"x-fail-on": "A,B"})
        assert r.status_code == 503 and r.json()["error"]["message"] == "down"

    dead = [f"127.0.0.1:{r.httpd.server_address[1]}" for r in replicas]
    for r in replicas:
        r.close()
    with NginxProcess(dead) as nginx:
        r = post(nginx)
        assert r.status_code == 503 and r.headers["Retry-After"] == "1"
        assert r.json()["error"] == {
            "message": "No embedding replica is available; retry later.",
            "type": "server_error",
            "param": None,
            "code": None,
        }
