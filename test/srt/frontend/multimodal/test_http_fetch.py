"""Fetching image URLs against local HTTP servers: the whole-fetch deadline against a dripping host,
redirects checked hop by hop, the connection going to the address that was checked, size caps,
and cancellation closing the socket."""

from __future__ import annotations

import asyncio
import ipaddress
import time

import pytest

from sglang.srt.frontend.multimodal.http_fetch import ImageUrlFetcher
from sglang.srt.frontend.multimodal.image_errors import FetchFailed
from sglang.srt.frontend.multimodal.image_source import parse_url
from sglang.srt.frontend.multimodal.url_guard import UrlPolicy
from test.helpers.images import ImageServer, encode_image, gradient_image
from test.helpers.waiting import wait_until_async

PNG = encode_image(gradient_image(40, 30, seed=1))
LOOPBACK_OK = UrlPolicy(allow_private=True)
# Tests need a "public" host and a "private" one on loopback: 127.0.0.2 plays the public one.
FAKE_PUBLIC = UrlPolicy(is_allowed_address=lambda ip: str(ip) == "127.0.0.2")


def _fetch(url: str, policy: UrlPolicy = LOOPBACK_OK, timeout: float = 2.0, max_bytes: int = 10**6, **kw):
    fetcher = ImageUrlFetcher(policy, timeout, max_bytes, **kw)
    return asyncio.run(fetcher.fetch(parse_url(url)))


@pytest.fixture(scope="module")
def server():
    with ImageServer(
        {
            "/img.png": PNG,
            "/to-img": ("redirect", "/img.png"),
            "/to-https": ("redirect", "https://127.0.0.1:1/img.png"),
            "/to-file": ("redirect", "file:///etc/hostname"),
            "/loop": ("redirect", "/loop"),
            "/endless.png": ("stream", 4 * 1024 * 1024),
            "/declared-huge.png": ("declare", 10**9),
            "/gone.png": 404,
            "/error": 500,
            "/drip.png": ("drip", 0.5, 100_000),
            "/drip-headers": ("drip_headers", 0.5),
        }
    ) as s:
        yield s


@pytest.fixture(scope="module")
def public_server():
    """On 127.0.0.2, which FAKE_PUBLIC treats as public; redirects to the private 127.0.0.1."""
    with ImageServer({"/img.png": PNG}, host="127.0.0.2") as private_target:
        routes = {"/img.png": PNG, "/to-private": ("redirect", private_target.url("/img.png"))}
        with ImageServer(routes, host="127.0.0.2") as s:
            yield s


def test_fetch_and_redirect(server):
    assert _fetch(server.url("/img.png")) == PNG
    assert _fetch(server.url("/to-img")) == PNG
    assert server.requests[-1] == ("/img.png", f"127.0.0.1:{server.port}")


@pytest.mark.parametrize(
    "path, reason",
    [
        ("/to-https", "redirect from http to https refused"),
        ("/to-file", "bad redirect location"),
        ("/loop", "more than 5 redirects"),
        ("/gone.png", "answered HTTP 404"),
        ("/error", "answered HTTP 500"),
        ("/endless.png", "the body is over 1000000 bytes"),
        ("/declared-huge.png", "declares 1000000000 bytes"),
    ],
)
def test_refusals(server, path, reason):
    with pytest.raises(FetchFailed, match=reason):
        _fetch(server.url(path))


def test_closed_port():
    with pytest.raises(FetchFailed, match="cannot connect"):
        _fetch("http://127.0.0.1:1/x.png")


@pytest.mark.slow
@pytest.mark.parametrize("path", ["/drip.png", "/drip-headers"])
def test_deadline_bounds_the_whole_fetch(server, path):
    """One byte every 0.5 s: urllib's per-read timeout never fired; the deadline does."""
    start = time.monotonic()
    with pytest.raises(FetchFailed, match="no complete answer within 1 s"):
        _fetch(server.url(path), timeout=1.0)
    assert time.monotonic() - start < 1.5
    assert server.wait_idle(2.0)  # and the connection was closed


@pytest.mark.slow
def test_cancelling_a_fetch_closes_its_connection(server):
    path = "/drip.png?test=cancel"  # its own tag: another test's late connection is not counted

    async def scenario():
        fetcher = ImageUrlFetcher(LOOPBACK_OK, 30.0, 10**6)
        task = asyncio.ensure_future(fetcher.fetch(parse_url(server.url(path))))
        assert await wait_until_async(lambda: server.open_to(path) >= 1, 5.0)  # the drip has begun
        assert server.open_to(path) == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert server.wait_idle(2.0, path)


def test_loopback_refused_by_default(server):
    before = len(server.requests)
    for host in ("127.0.0.1", "localhost", "127.1", "2130706433", "0x7f.1", "[::ffff:127.0.0.1]"):
        with pytest.raises(FetchFailed, match="non-public address"):
            _fetch(server.url("/img.png", host=host), policy=UrlPolicy())
    assert len(server.requests) == before  # refused before connecting


def test_every_redirect_hop_is_checked(public_server):
    assert _fetch(public_server.url("/img.png"), policy=FAKE_PUBLIC) == PNG
    with pytest.raises(FetchFailed, match="refused: host '127.0.0.2' resolves"):
        _fetch(public_server.url("/img.png"), policy=UrlPolicy())
    # The redirect target is on 127.0.0.2 too; name it "private" for the second hop only.
    hops = []

    def public_once(ip) -> bool:
        hops.append(ip)
        return len(hops) == 1

    with pytest.raises(FetchFailed, match="non-public address 127.0.0.2"):
        _fetch(public_server.url("/to-private"), policy=UrlPolicy(is_allowed_address=public_once))
    assert len(hops) == 2


def test_connects_to_the_address_it_checked(public_server):
    """DNS rebinding: a name that resolves to a public address for the check and to a private one
    a moment later is connected to by the checked address; the Host header keeps the name."""
    answers = [ipaddress.ip_address("127.0.0.2"), ipaddress.ip_address("127.0.0.1")]
    asked = []

    async def rebinding_resolver(host: str, port: int):
        asked.append(host)
        return [answers[len(asked) - 1]]

    url = f"http://images.test:{public_server.port}/img.png"
    assert _fetch(url, policy=FAKE_PUBLIC, resolve=rebinding_resolver) == PNG
    assert asked == ["images.test"]
    assert public_server.requests[-1] == ("/img.png", f"images.test:{public_server.port}")


def test_allowlisted_hosts_only(server):
    policy = UrlPolicy.from_flags(False, ["127.0.0.1"], True)
    assert _fetch(server.url("/img.png"), policy=policy) == PNG
    with pytest.raises(FetchFailed, match="not in --mm-allowed-url-hosts"):
        _fetch(server.url("/img.png", host="localhost"), policy=policy)
