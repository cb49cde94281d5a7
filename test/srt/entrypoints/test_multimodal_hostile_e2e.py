"""Hostile image inputs against a live GME server (issue 15, items 1-4).

Two servers: `server` opts in to loopback image URLs from 127.0.0.1 only (the attacker's dripping
host and the victim's image host both live there), with a 3 s fetch deadline, 8 fetch slots, a
1 MB image-memory budget and a media directory; `default_server` has no image flags at all.
"""

from __future__ import annotations

import json
import os
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import requests
from PIL import Image

from test.helpers.images import HOSTILE_IMAGE_STRINGS, ImageServer, blank_png, data_uri, encode_image, gradient_image
from test.helpers.server import ServerProcess
from test.helpers.waiting import wait_until

pytestmark = pytest.mark.slow
URL_FAILED = "could not load the image URL (the server log has the reason)"
TIMEOUT = 3.0
PNG = encode_image(gradient_image(100, 60, seed=1))
NOISE = encode_image(Image.fromarray(np.random.default_rng(7).integers(0, 256, (400, 400, 3), np.uint8)))  # 480 KB


@pytest.fixture(scope="module")
def media(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("media")
    (root / "cat.png").write_bytes(PNG)
    return str(root)


@pytest.fixture(scope="module")
def images():
    with ImageServer(
        {
            "/cat.png": PNG,
            "/drip.png": ("drip", 0.5, 100_000),
            "/stall.png": ("stall", 900_000, 2.0),
            "/gone.png": 404,
            "/text": b"plain text, not pixels",
            "/to-localhost": ("redirect", "/to-localhost"),  # rewritten below, once the port is known
        }
    ) as s:
        s.routes["/to-localhost"] = ("redirect", s.url("/cat.png", host="localhost"))
        yield s


@pytest.fixture(scope="module")
def server(gme_dir, media):
    args = ["--model-path", gme_dir, "--is-embedding", "--chat-template", "gme-qwen2-vl"]
    args += ["--mm-allow-private-urls", "--mm-allowed-url-hosts", "127.0.0.1"]
    args += ["--mm-image-timeout", str(TIMEOUT), "--mm-fetch-concurrency", "8"]
    args += ["--mm-max-bytes-in-flight", "1000000", "--allowed-local-media-path", media]
    with ServerProcess(*args) as s:
        yield s


@pytest.fixture(scope="module")
def default_server(gme_dir):
    with ServerProcess("--model-path", gme_dir, "--is-embedding", "--chat-template", "gme-qwen2-vl") as s:
        yield s


def _post(server, items, timeout: float = 60) -> requests.Response:
    return requests.post(server.base_url + "/v1/embeddings", json={"input": items}, timeout=timeout)


def _message(resp: requests.Response) -> str:
    assert resp.headers["content-type"].startswith("application/json"), resp.text
    return resp.json()["error"]["message"]


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


# ----- 1: slow hosts, fetch slots, disconnects -----
def test_dripping_urls_neither_outlast_the_deadline_nor_starve_others(server, images):
    """32 URLs that drip a byte every 0.5 s in one request: the request fails at the deadline, and
    another client's image meanwhile loads at once (the attacker holds only its share of slots)."""
    with ThreadPoolExecutor(1) as pool:
        start = time.monotonic()
        attack = pool.submit(_post, server, [{"image": images.url("/drip.png")}] * 32)
        assert wait_until(lambda: images.open_to("/drip.png") >= 2, 10)  # it holds its share of the slots
        t0 = time.monotonic()
        victim = _post(server, [{"text": "a cat", "image": images.url("/cat.png")}])
        victim_s = time.monotonic() - t0
        resp = attack.result()
        attack_s = time.monotonic() - start
    assert victim.status_code == 200 and victim_s < TIMEOUT - 0.5, (victim.text, victim_s)  # no wait for a slot
    assert resp.status_code == 400 and _message(resp).endswith(URL_FAILED)
    assert attack_s < TIMEOUT + 2, attack_s  # before: 40 s for a 2 s timeout
    assert images.wait_idle(2.0)


def test_client_disconnect_cancels_its_fetches(server, images):
    path = "/drip.png?test=disconnect"  # its own tag: another test's late connection is not counted
    body = json.dumps({"input": [{"image": images.url(path)}] * 4}).encode()
    head = "POST /v1/embeddings HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(head.encode() + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        assert wait_until(lambda: images.open_to(path) >= 2, 2)
        assert images.open_to(path) == 2  # the request's share: a quarter of 8 slots
    hung_up = time.monotonic()
    assert images.wait_idle(TIMEOUT, path)
    assert time.monotonic() - hung_up < TIMEOUT / 2  # closed by the disconnect, not the deadline


# ----- 2: pixels and memory -----
def test_decompression_bomb_is_refused_from_its_header(default_server):
    """The issue's probe: a 250 KB fully transparent 8000x8000 PNG, four times in one request."""
    bomb = data_uri(blank_png(8000, 8000))
    pid = default_server.proc.pid
    before = _rss_mb(pid)
    start = time.monotonic()
    resp = _post(default_server, [{"image": bomb}] * 4)
    elapsed = time.monotonic() - start
    assert resp.status_code == 400, resp.text
    assert "8000x8000 pixels, over the limit of 33177600 pixels" in _message(resp)
    assert elapsed < 3 and _rss_mb(pid) - before < 100, (elapsed, before, _rss_mb(pid))


def test_large_images_leave_no_memory_behind(default_server):
    """Four allowed 4000x4000 images (64 MB each decoded) are reduced as they decode, and the
    HTTP process gives the memory back when the request ends."""
    warm = _post(default_server, [{"image": data_uri(PNG)}])
    assert warm.status_code == 200
    pid = default_server.proc.pid
    before = _rss_mb(pid)
    resp = _post(default_server, [{"image": data_uri(blank_png(4000, 4000))}] * 4)
    assert resp.status_code == 200, resp.text
    vectors = np.asarray([d["embedding"] for d in resp.json()["data"]])
    assert np.abs(vectors - vectors[0]).max() < 1e-5  # four blank images, one vector
    assert wait_until(lambda: _rss_mb(pid) - before < 150, 5), (before, _rss_mb(pid))  # given back


def test_image_memory_budget(server, images):
    """Over --mm-max-bytes-in-flight: 400 when the request alone needs more, 429 while others hold it."""
    noise = data_uri(NOISE)
    assert 400_000 < len(NOISE) < 1_000_000
    resp = _post(server, [{"image": noise}] * 4)
    assert resp.status_code == 400 and "need more than --mm-max-bytes-in-flight (1000000 bytes)" in _message(resp)
    with ThreadPoolExecutor(1) as pool:
        holder = pool.submit(_post, server, [{"image": images.url("/stall.png")}])
        time.sleep(0.5)  # 900 KB of its body are in, the rest never comes
        resp = _post(server, [{"image": noise}])
        assert resp.status_code == 429 and resp.headers.get("Retry-After") == "1"
        assert "holding too many images right now" in _message(resp)
        assert holder.result().status_code == 400
    assert _post(server, [{"image": noise}]).status_code == 200  # and all of it was given back


# ----- 3: SSRF -----
@pytest.mark.parametrize(
    "host", ["127.0.0.1", "localhost", "127.1", "2130706433", "0x7f.0.0.1", "[::1]", "[::ffff:127.0.0.1]", "0.0.0.0"]
)
def test_loopback_urls_are_refused_by_default(default_server, images, host):
    before = len(images.requests)
    resp = _post(default_server, [{"image": images.url("/cat.png", host=host)}])
    assert resp.status_code == 400 and _message(resp) == f"Item 0: could not load image: {URL_FAILED}"
    assert len(images.requests) == before  # never connected


def test_every_url_failure_reads_the_same(server, images):
    """A port scanner learns nothing: closed port, 404, not an image, too slow all answer alike."""
    urls = ["http://127.0.0.1:1/x.png", images.url("/gone.png"), images.url("/text"), images.url("/drip.png")]
    with ThreadPoolExecutor(len(urls)) as pool:
        answers = list(pool.map(lambda u: _post(server, [{"text": "x", "image": u}]), urls))
    assert {(r.status_code, _message(r)) for r in answers} == {(400, f"Item 0: could not load image: {URL_FAILED}")}
    log = server.log()
    assert "answered HTTP 404" in log and "cannot connect" in log  # the reasons are in the log


def test_redirects_are_checked_hop_by_hop(server, images):
    """--mm-allowed-url-hosts 127.0.0.1: a redirect to `localhost` (the same address under a name
    that is not allowed) is refused at the second hop, before connecting."""
    before = [path for path, _ in images.requests]
    assert _post(server, [{"image": images.url("/cat.png", host="localhost")}]).status_code == 400
    resp = _post(server, [{"image": images.url("/to-localhost")}])
    assert resp.status_code == 400 and _message(resp) == f"Item 0: could not load image: {URL_FAILED}"
    assert [path for path, _ in images.requests][len(before) :] == ["/to-localhost"]  # hop 2 never connected
    assert "host 'localhost' is not in --mm-allowed-url-hosts" in server.log()


# ----- 4: malformed strings -----


def test_malformed_image_strings_are_400s_that_name_no_path(server, media):
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda s: _post(server, [{"image": s}]), HOSTILE_IMAGE_STRINGS))
    for source, resp in zip(HOSTILE_IMAGE_STRINGS, answers):
        assert resp.status_code == 400, (source[:40], resp.status_code, resp.text[:300])
        message = _message(resp)
        # A lone surrogate is refused with the whole body, before any image is looked at (#15 item 5).
        assert message.startswith(("Item 0: could not load image: ", "The request body holds a lone surrogate"))
        assert media not in message and os.path.dirname(media) not in message
    assert _post(server, [{"image": "cat.png"}]).status_code == 200  # the media directory still works


def test_the_attack_left_the_server_healthy(server, images):
    assert requests.get(server.base_url + "/health", timeout=5).status_code == 200
    assert _post(server, [{"text": "a cat", "image": images.url("/cat.png")}]).status_code == 200
    assert images.wait_idle(TIMEOUT)
