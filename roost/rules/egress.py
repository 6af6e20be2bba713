"""What a job may reach over the network: its mode, its allow-list, and whether one host and port pass.

``network = "none" | "allow" | "all"``. ``allow`` sends every connection through the job's egress
proxy (roost/egress/), which asks :meth:`Policy.allows` on the exact host and port the job
named, before any name is resolved. A pattern is a host name (``api.anthropic.com``), a wildcard for
its subdomains (``*.github.com``: any depth, not ``github.com`` itself), or an IP literal; with
``:PORT`` it allows that port only, without one the web's ports (443 and 80). A raw IP passes only a
pattern that is that IP: no wildcard ever matches an address. A job's provider hosts (the hosts of
its driver's base-URL settings) always pass under ``allow``: a job reaches its model.

A child is never more open than its parent (the strictest wins): its mode is the strictest of the
chain, and a host must pass every ``allow`` list along it. Pure: the daemon gives the values.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping
from urllib.parse import urlsplit

#: The modes, most closed first.
MODES = ("none", "allow", "all")
#: The ports a pattern without one allows.
WEB_PORTS = (443, 80)
#: The most patterns one list may hold, and the longest pattern (a host name is at most 253).
MAX_PATTERNS = 256
MAX_PATTERN = 260

_NAME = re.compile(r"^(?:\*\.)?(?:[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?\.)*[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?$")


class PatternError(ValueError):
    """A pattern or mode that cannot be read; the message says which and why."""


def stricter(a: str, b: str) -> str:
    """The more closed of two modes."""
    return a if MODES.index(a) <= MODES.index(b) else b


def normal_host(host: str) -> str | None:
    """``host`` as patterns compare it (lower case, no trailing dot, an IPv6 literal without brackets
    and in its short form), or None when it is no host name or address at all."""
    host = host.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    host = host[:-1] if host.endswith(".") else host
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    try:  # what C's resolver reads as an address (2130706433, 0x7f.1) is never a name
        socket.inet_aton(host)
        return None
    except OSError:
        pass
    return host if host and len(host) <= 253 and _NAME.match(host) and not host.startswith("*") else None


def is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Pattern:
    host: str
    port: int | None

    def matches(self, host: str, port: int) -> bool:
        if port not in ((self.port,) if self.port is not None else WEB_PORTS):
            return False
        if self.host.startswith("*."):
            return not is_address(host) and host.endswith(self.host[1:])
        return host == self.host


def parse_pattern(text: str) -> Pattern:
    """One allow-list entry; PatternError saying what is wrong with it."""
    if not isinstance(text, str) or not text or len(text) > MAX_PATTERN:
        raise PatternError(f"{text!r} is not a host pattern (a host name, *.domain or an IP, with an optional :port)")
    host, port = split_authority(text.strip(), None)
    wild = host.startswith("*.")
    name = normal_host(host[2:] if wild else host)
    if name is None or (wild and is_address(name)):
        raise PatternError(f"{text!r} is not a host pattern (a host name, *.domain or an IP, with an optional :port)")
    return Pattern(("*." if wild else "") + name, port)


def split_authority(text: str, default_port: int | None) -> tuple[str, int | None]:
    """``host[:port]`` (``[v6]:port`` for IPv6) as (host, port); PatternError on a bad port."""
    host, port = text, None
    if text.startswith("["):
        end = text.find("]")
        host, rest = text[:end + 1], text[end + 1:]
        if rest:
            if not rest.startswith(":"):
                raise PatternError(f"{text!r}: text after the address")
            port = rest[1:]
    elif text.count(":") == 1:
        host, port = text.split(":")
    if port is None:
        return host, default_port
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise PatternError(f"{text!r}: the port must be a number from 1 to 65535")
    return host, int(port)


def parse_list(values: Iterable[Any], where: str) -> tuple[str, ...]:
    """A config or spawn ``allow`` list checked whole: each entry a pattern, at most MAX_PATTERNS."""
    values = list(values)
    if len(values) > MAX_PATTERNS:
        raise PatternError(f"{where}: {len(values)} patterns, at most {MAX_PATTERNS}")
    for value in values:
        try:
            parse_pattern(value)
        except PatternError as exc:
            raise PatternError(f"{where}: {exc}") from None
    return tuple(values)


def url_pattern(url: str) -> str | None:
    """The pattern for a base URL's host and port (its scheme's port when it names none), or None when
    it is no http(s) URL."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    host = normal_host(parts.hostname)
    if host is None:
        return None
    port = port or (443 if parts.scheme == "https" else 80)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(frozen=True)
class Policy:
    """A job's network: its mode, the allow-lists along its chain (a host passes each), and the
    provider hosts its driver reaches whatever those lists say."""

    mode: str = "allow"
    chain: tuple[tuple[str, ...], ...] = ()
    provider: tuple[str, ...] = ()
    _parsed: tuple[tuple[Pattern, ...], ...] = field(default=(), compare=False, repr=False)
    _provider: tuple[Pattern, ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_parsed", tuple(tuple(map(parse_pattern, c)) for c in self.chain))
        object.__setattr__(self, "_provider", tuple(map(parse_pattern, self.provider)))

    def allows(self, host: str, port: int) -> bool:
        """Whether a connection to exactly ``host``:``port`` (as the job named it) may be made."""
        if self.mode == "all":
            return True
        name = normal_host(host)
        if self.mode == "none" or name is None:
            return False
        if any(p.matches(name, port) for p in self._provider):
            return True
        return bool(self._parsed) and all(any(p.matches(name, port) for p in c) for c in self._parsed)

    def reaches_nothing(self) -> bool:
        """Whether no host at all passes (``none``, or ``allow`` with no provider and an empty list):
        a namespace with loopback only is the whole of it, and no proxy is needed."""
        return self.mode == "none" or (self.mode == "allow" and not self.provider and
                                       (not self.chain or any(not c for c in self.chain)))

    def stored(self) -> dict[str, Any]:
        """What a job's record keeps (``driver_opts["network"]``): the mode and the chain; the provider
        hosts come from the driver's profile at each start."""
        return {"mode": self.mode, "allow": [list(c) for c in self.chain]}


def resolve(profile_mode: str | None, profile_allow: Iterable[str] | None, asked_mode: str | None,
            asked_allow: Iterable[str] | None, parent: Mapping[str, Any] | None) -> Policy:
    """A new job's policy: the spawn's mode and list where it gives them, else its profile's (default
    ``allow`` with an empty list), narrowed by its parent's stored policy (``parent``: None for a root
    job). A level in ``allow`` adds its list to the chain; the strictest mode wins."""
    mode = asked_mode or profile_mode or "allow"
    own = tuple(asked_allow if asked_allow is not None else profile_allow or ())
    chain = [own] if mode == "allow" else []
    if parent is not None:
        mode = stricter(mode, str(parent.get("mode") or "allow"))
        chain = [tuple(c) for c in parent.get("allow") or ()] + chain
    return Policy(mode=mode, chain=tuple(chain) if mode == "allow" else ())


def from_record(stored: Mapping[str, Any] | None, provider: Iterable[str]) -> Policy:
    """The policy a job's record keeps (None: a job from before policies, which gets the default:
    ``allow`` with only its provider hosts)."""
    stored = stored or {"mode": "allow", "allow": [[]]}
    mode = str(stored.get("mode") or "allow")
    return Policy(mode=mode, chain=tuple(tuple(c) for c in stored.get("allow") or ()), provider=tuple(provider))
