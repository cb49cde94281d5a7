"""Fetch one image URL on the event loop: HTTP/1.1 (h11) over asyncio streams, bounded in every way.

Why not urllib in a thread: a thread cannot be cancelled (a client that hangs up would leave its
fetches running) and urllib's timeout applies per socket operation, so a host dripping one byte
at a time held a fetch far past --mm-image-timeout. Here one deadline covers the whole fetch
(DNS, connect, TLS, headers, body, every redirect); cancelling the coroutine closes the socket;
each hop's host is resolved once, checked by the UrlPolicy, and connected to by the very address
that was checked (TLS still verifies the certificate against the host name). Responses are read
with a cap on header size and on body bytes, and every body chunk is reported to `on_bytes`
(the process's memory budget), which may wait for room (within the deadline) or raise to stop
the fetch.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import urllib.parse
from typing import Awaitable, Callable, Optional, Sequence

import h11

from sglang.srt.frontend.multimodal.image_errors import FetchFailed, ImageLoadError
from sglang.srt.frontend.multimodal.image_source import UrlSource, parse_url
from sglang.srt.frontend.multimodal.url_guard import IPAddress, UrlPolicy, UrlRefused, parse_ip_literal

REDIRECT_STATUSES = (301, 302, 303, 307, 308)
MAX_HEADER_BYTES = 64 * 1024
READ_CHUNK = 64 * 1024
USER_AGENT = "sglang-embed"

Resolver = Callable[[str, int], Awaitable[Sequence[IPAddress]]]
OnBytes = Callable[[int], Awaitable[None]]


async def _ignore_bytes(n: int) -> None:
    pass


async def resolve_host(host: str, port: int) -> list[IPAddress]:
    """The addresses `host` resolves to (an IP literal is its own answer, without DNS)."""
    literal = parse_ip_literal(host)
    if literal is not None:
        return [literal]
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as e:  # UnicodeError: a name the IDNA codec refuses
        raise FetchFailed(f"cannot resolve {host!r}: {e}") from None
    found: list[IPAddress] = []
    for *_, sockaddr in infos:
        ip = parse_ip_literal(str(sockaddr[0]))
        if ip is not None and ip not in found:
            found.append(ip)
    return found


class ImageUrlFetcher:
    def __init__(
        self,
        policy: UrlPolicy,
        timeout: float,
        max_bytes: int,
        max_redirects: int = 5,
        resolve: Resolver = resolve_host,
    ) -> None:
        self.policy = policy
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.max_redirects = max_redirects
        self.resolve = resolve
        self._ssl: Optional[ssl.SSLContext] = None

    @property
    def ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context()
        return self._ssl

    async def fetch(self, source: UrlSource, on_bytes: OnBytes = _ignore_bytes) -> bytearray:
        """The body of `source` (after redirects). Raises FetchFailed, or what `on_bytes` raises."""
        if not self.policy.enabled:
            raise FetchFailed("image URLs are disabled (--mm-disable-url-fetch)")
        try:
            return await asyncio.wait_for(self._follow(source, on_bytes), self.timeout)
        except asyncio.TimeoutError:
            raise FetchFailed(f"{_short(source.url)}: no complete answer within {self.timeout:g} s") from None

    async def _follow(self, source: UrlSource, on_bytes: OnBytes) -> bytearray:
        current = source
        for _ in range(self.max_redirects + 1):
            try:
                self.policy.check_host(current.host)
                addresses = await self.resolve(current.host, current.port)
                self.policy.check_addresses(current.host, addresses)
            except UrlRefused as e:
                raise FetchFailed(f"{_short(current.url)}: refused: {e}") from None
            location, body = await self._get(current, addresses, on_bytes)
            if location is None:
                return body
            current = self._redirect(current, location)
        raise FetchFailed(f"{_short(source.url)}: more than {self.max_redirects} redirects")

    def _redirect(self, current: UrlSource, location: str) -> UrlSource:
        try:
            target = parse_url(urllib.parse.urljoin(current.url, location))
        except ImageLoadError as e:
            raise FetchFailed(f"{_short(current.url)}: bad redirect location: {e}") from None
        if target.scheme != current.scheme:  # no https -> http downgrade (file:// never parses)
            raise FetchFailed(f"{_short(current.url)}: redirect from {current.scheme} to {target.scheme} refused")
        return target

    async def _connect(self, source: UrlSource, addresses: Sequence[IPAddress]):
        errors = []
        for ip in addresses:
            try:
                if source.scheme == "https":
                    return await asyncio.open_connection(
                        str(ip), source.port, ssl=self.ssl_context, server_hostname=source.host
                    )
                return await asyncio.open_connection(str(ip), source.port)
            except (OSError, ssl.SSLError) as e:
                errors.append(f"{ip}: {e}")
        raise FetchFailed(f"{_short(source.url)}: cannot connect ({'; '.join(errors)})")

    async def _get(
        self, source: UrlSource, addresses: Sequence[IPAddress], on_bytes: OnBytes
    ) -> tuple[Optional[str], bytearray]:
        """(redirect location, b"") or (None, body) for one GET of `source`."""
        reader, writer = await self._connect(source, addresses)
        try:
            return await self._exchange(source, reader, writer, on_bytes)
        except h11.ProtocolError as e:
            raise FetchFailed(f"{_short(source.url)}: bad HTTP response: {e}") from None
        except (OSError, ssl.SSLError) as e:
            raise FetchFailed(f"{_short(source.url)}: connection failed: {e}") from None
        finally:
            writer.transport.abort()  # never wait for a peer to acknowledge the close

    async def _exchange(self, source: UrlSource, reader, writer, on_bytes) -> tuple[Optional[str], bytearray]:
        conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEADER_BYTES)
        headers = [
            ("Host", source.host_header),
            ("User-Agent", USER_AGENT),
            ("Accept", "image/*"),
            ("Accept-Encoding", "identity"),
            ("Connection", "close"),
        ]
        writer.write(conn.send(h11.Request(method="GET", target=source.target, headers=headers)))
        writer.write(conn.send(h11.EndOfMessage()))
        await writer.drain()
        body = bytearray()
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await reader.read(READ_CHUNK))  # b"" at EOF
            elif isinstance(event, h11.InformationalResponse):
                continue
            elif isinstance(event, h11.Response):
                location = self._check_response(source, event)
                if location is not None:
                    return location, body
            elif isinstance(event, h11.Data):
                if len(body) + len(event.data) > self.max_bytes:
                    raise FetchFailed(f"{_short(source.url)}: the body is over {self.max_bytes} bytes")
                await on_bytes(len(event.data))
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                return None, body
            else:  # ConnectionClosed, PAUSED
                raise FetchFailed(f"{_short(source.url)}: the connection closed before the answer was complete")

    def _check_response(self, source: UrlSource, response: h11.Response) -> Optional[str]:
        status = response.status_code
        fields = {name.lower(): value for name, value in response.headers}
        if status in REDIRECT_STATUSES:
            location = fields.get(b"location")
            if not location:
                raise FetchFailed(f"{_short(source.url)}: HTTP {status} without a Location")
            return location.decode("latin-1")
        if not 200 <= status < 300 or status in (204, 205, 206):
            raise FetchFailed(f"{_short(source.url)}: answered HTTP {status}")
        declared = fields.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_bytes:
            raise FetchFailed(f"{_short(source.url)}: declares {int(declared)} bytes, over {self.max_bytes}")
        return None


def _short(url: str, n: int = 200) -> str:
    return url if len(url) <= n else url[: n - 3] + "..."
