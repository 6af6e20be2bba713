"""Reading what a job asks its egress proxy: one HTTP request head, whole and bounded, and the head
that goes on to the server (origin-form, one request per connection, the real key in place of the
placeholder when, and only when, it goes to that key's provider).

Pure but for the reading: roost/egress/proxy.py does the connecting.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from urllib.parse import urlsplit

from roost.rules.egress import Pattern, PatternError, normal_host, parse_pattern, split_authority

#: The most bytes a request head may take (request line and headers), and how long it may take to come.
HEAD_MAX = 64 * 1024
HEAD_TIMEOUT = 30.0
#: Headers about the hop to the proxy, never sent on.
HOP_HEADERS = {b"proxy-connection", b"proxy-authorization", b"connection", b"keep-alive", b"te", b"trailer", b"upgrade"}


class BadRequest(Exception):
    """A request the proxy cannot read; the message says what was wrong (sent back to the job)."""


@dataclass(frozen=True)
class SecretKey:
    """A real key the job never sees: where ``placeholder`` stands in a request head to ``provider``
    (a host:port pattern), the proxy writes ``real``."""

    placeholder: str
    real: str
    provider: str

    def target(self) -> Pattern:
        return parse_pattern(self.provider)


@dataclass(frozen=True)
class Request:
    """What the job asked: a tunnel (``CONNECT host:port``) or one plain-HTTP request."""

    method: str
    host: str
    port: int
    #: The head to send on (plain HTTP only; empty for a tunnel).
    head: bytes = b""

    @property
    def tunnel(self) -> bool:
        return self.method == "CONNECT"


async def read_head(reader: asyncio.StreamReader) -> bytes:
    """The bytes up to and including the blank line ending a request head; BadRequest past HEAD_MAX or
    HEAD_TIMEOUT, or on a connection closed before it ends."""
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT)
    except asyncio.LimitOverrunError:
        raise BadRequest(f"the request head is over {HEAD_MAX} bytes") from None
    except asyncio.IncompleteReadError:
        raise BadRequest("the connection closed before the request head ended") from None
    except asyncio.TimeoutError:
        raise BadRequest(f"no whole request head in {HEAD_TIMEOUT:g} s") from None
    if len(head) > HEAD_MAX:  # the reader's limit lets the end mark run a little past it
        raise BadRequest(f"the request head is over {HEAD_MAX} bytes")
    return head


def parse_request(head: bytes, keys: tuple[SecretKey, ...] = ()) -> Request:
    """The request in ``head``: ``CONNECT host:port`` (a port is required), or an absolute ``http://``
    URL (origin-form and ``https://`` URLs are refused: a client tunnels those with CONNECT)."""
    lines = head[:-4].split(b"\r\n")
    try:
        method, target, version = lines[0].decode("ascii").split(" ")
    except (UnicodeDecodeError, ValueError):
        raise BadRequest("the request line is not `METHOD TARGET HTTP/1.x`") from None
    if not version.startswith("HTTP/1."):
        raise BadRequest(f"{version!r} is not HTTP/1.x")
    if method == "CONNECT":
        try:
            host, port = split_authority(target, None)
        except PatternError as exc:
            raise BadRequest(str(exc)) from None
        if port is None:
            raise BadRequest(f"CONNECT {target}: a tunnel names its port")
        return Request(method, host.strip("[]"), port)
    url = urlsplit(target)
    if url.scheme != "http" or not url.hostname:
        raise BadRequest(f"{target[:200]!r} is not an absolute http:// URL (tunnel https with CONNECT)")
    try:
        port = url.port or 80
    except ValueError:
        raise BadRequest(f"{target[:200]!r}: a bad port") from None
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    lines = [f"{method} {path} {version}".encode()] + _headers(lines[1:], url.hostname, port, keys)
    return Request(method, url.hostname, port, b"\r\n".join(lines) + b"\r\n\r\n")


def _headers(lines: list[bytes], host: str, port: int, keys: tuple[SecretKey, ...]) -> list[bytes]:
    """The headers sent on: the hop's own left out, ``Connection: close`` (one request per connection,
    so a second request on it cannot go to a host nobody checked), and each placeholder of a key
    whose provider this is replaced by the real key."""
    name = normal_host(host)
    mine = [k for k in keys if name is not None and k.target().matches(name, port)]
    kept = []
    for line in lines:
        name, sep, value = line.partition(b":")
        if not sep:
            raise BadRequest("a header line without a colon")
        if name.strip().lower() in HOP_HEADERS:
            continue
        for key in mine:
            value = value.replace(key.placeholder.encode(), key.real.encode())
        kept.append(name + b":" + value)
    return kept + [b"Connection: close"]
