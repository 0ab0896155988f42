"""SSRF guard: decide whether a tool may call a URL, and pin the address it will connect to.

A playbook's tool URLs are templates filled from conversation values, so a caller can steer
them. ``vet_url`` refuses anything but http/https, folds every numeric spelling of an IP literal
(``2130706433``, ``0x7f.1``, ``0177.0.0.1``, ``::ffff:127.0.0.1``) to the address it means,
resolves host names and refuses the URL when ANY resolved address is private, loopback,
link-local, reserved, multicast, unspecified or a cloud metadata address, unless the host is
listed in ``policies.allow_hosts`` exactly as written there (an entry with a port,
``127.0.0.1:8080``, allows that port only; one without allows every port of the host).

The returned ``VettedTarget`` carries the address that was vetted; the HTTP layer connects to
that address (``pinned_url``) and sends the original name as ``Host`` (and as TLS SNI), so a
second DNS answer cannot redirect the request (no DNS rebinding).
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]
"""``async resolver(host, port) -> addresses`` (strings); the default uses ``loop.getaddrinfo``."""

# Names that mean "this machine" or "the cloud metadata service" whatever a resolver says.
_BLOCKED_NAMES = frozenset({
    "localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback",
    "metadata", "metadata.google.internal", "metadata.goog",
})
_METADATA_ADDRESSES = frozenset({
    ipaddress.ip_address("169.254.169.254"),  # AWS, GCP, Azure, OpenStack
    ipaddress.ip_address("169.254.170.2"),  # AWS ECS task metadata
    ipaddress.ip_address("100.100.100.200"),  # Alibaba Cloud
    ipaddress.ip_address("fd00:ec2::254"),  # AWS IPv6
})
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NUMERIC_PART = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")
_DEFAULT_PORTS = {"http": 80, "https": 443}


class UrlRefused(ValueError):
    """The URL may not be called. ``reason`` says why and how to allow it if that is wanted."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class HostUnresolved(OSError):
    """The host name did not resolve (a network condition, not a policy refusal: retryable)."""


@dataclass(frozen=True)
class VettedTarget:
    """A URL that passed the guard, with the address the request must connect to."""

    scheme: str
    host: str  # as written in the URL (lowercased, no brackets, no trailing dot)
    port: int
    address: str  # the vetted IP to connect to
    path_qs: str  # path plus "?query" (the fragment is never sent)
    userinfo: str = ""  # "user:pass" when the URL had one (sent as basic auth, never logged)
    addresses: tuple[str, ...] = ()  # every vetted address the host resolved to

    @property
    def pinned_url(self) -> str:
        """The URL with its host replaced by the vetted address."""
        addr = f"[{self.address}]" if ":" in self.address else self.address
        auth = f"{self.userinfo}@" if self.userinfo else ""
        return f"{self.scheme}://{auth}{addr}:{self.port}{self.path_qs}"

    @property
    def url(self) -> str:
        """The URL as written (normalised host, no fragment), for a pinning client."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        auth = f"{self.userinfo}@" if self.userinfo else ""
        return f"{self.scheme}://{auth}{host}:{self.port}{self.path_qs}"

    @property
    def host_header(self) -> str:
        """The ``Host`` header the server expects for the original URL."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        if self.port == _DEFAULT_PORTS[self.scheme]:
            return host
        return f"{host}:{self.port}"


def parse_ip_literal(text: str) -> IPAddress | None:
    """The address an IP literal means, in any spelling ``inet_aton`` accepts, else None.

    Raises ``UrlRefused`` for text that looks numeric but is not a valid address
    (``1.2.3.4.5``, ``09.1``, ``256.1.1.1``): resolvers disagree on such names, so they are
    never passed on.
    """
    text = text.strip("[]").lower()
    if ":" in text:
        try:
            return ipaddress.IPv6Address(text)
        except ValueError:
            return None
    parts = text.split(".")
    if not all(_NUMERIC_PART.match(p) for p in parts):
        return None
    if len(parts) > 4:
        raise UrlRefused(f"'{text}' is not a valid IP address (more than 4 parts)")
    values: list[int] = []
    for part in parts:
        try:
            if part.startswith("0x"):
                values.append(int(part[2:], 16))  # a bare "0x" is not a number (as in inet_aton)
            elif len(part) > 1 and part.startswith("0"):
                values.append(int(part, 8))
            else:
                values.append(int(part, 10))
        except ValueError:
            raise UrlRefused(f"'{text}' is not a valid IP address ('{part}' is not a number)") from None
    *head, last = values
    if any(v > 0xFF for v in head) or last >= 1 << (8 * (5 - len(values))):
        raise UrlRefused(f"'{text}' is not a valid IP address (a part is out of range)")
    number = 0
    for v in head:
        number = (number << 8) | v
    number = (number << (8 * (5 - len(values)))) | last
    return ipaddress.IPv4Address(number)


def _embedded_ipv4(addr: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """IPv4 addresses an IPv6 address routes to (mapped, compatible, 6to4, Teredo, NAT64)."""
    found: list[ipaddress.IPv4Address] = []
    if addr.ipv4_mapped is not None:
        found.append(addr.ipv4_mapped)
    if addr.sixtofour is not None:
        found.append(addr.sixtofour)
    if addr.teredo is not None:
        found.extend(addr.teredo)
    packed = int(addr)
    if packed >> 32 == 0 and packed > 1:  # IPv4-compatible ::a.b.c.d (deprecated, still routed)
        found.append(ipaddress.IPv4Address(packed & 0xFFFFFFFF))
    if addr in _NAT64:
        found.append(ipaddress.IPv4Address(packed & 0xFFFFFFFF))
    return found


def blocked_reason(addr: IPAddress) -> str | None:
    """Why connecting to ``addr`` is not allowed, or None when it is a public address."""
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.scope_id:
            addr = ipaddress.IPv6Address(str(addr).split("%", 1)[0])
        for inner in _embedded_ipv4(addr):
            reason = blocked_reason(inner)
            if reason is not None:
                return f"{reason} (embedded in {addr})"
    if addr in _METADATA_ADDRESSES:
        return f"{addr} is a cloud metadata address"
    checks = (
        ("unspecified", addr.is_unspecified),
        ("loopback", addr.is_loopback),
        ("link-local", addr.is_link_local),
        ("multicast", addr.is_multicast),
        ("private", addr.is_private),
        ("reserved", addr.is_reserved),
        ("not publicly routable", not addr.is_global),
    )
    for label, hit in checks:
        if hit:
            return f"{addr} is {label}"
    return None


async def _getaddrinfo(host: str, port: int) -> list[str]:
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return [str(info[4][0]) for info in infos]


def _normalise_host(host: str) -> str:
    return host.strip().strip("[]").rstrip(".").lower()


def split_allow_entry(entry: str) -> tuple[str, int | None]:
    """``(host, port)`` of a ``policies.allow_hosts`` entry; port None allows every port.

    ``api.local``, ``api.local:8443``, ``127.0.0.1:8080``, ``[::1]:8080``, ``::1``. Raises
    ``ValueError`` for a port that is not a number from 1 to 65535.
    """
    text = entry.strip()
    port_text: str | None = None
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"allow_hosts entry {entry!r}: write [address]:port")
            port_text = rest[1:]
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    else:
        host = text  # a name, an IPv4 address, or a bare IPv6 address (no port)
    port: int | None = None
    if port_text is not None:
        if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            raise ValueError(
                f"allow_hosts entry {entry!r}: the port must be a number from 1 to 65535")
        port = int(port_text)
    return _normalise_host(host), port


def _allowed(
    host: str, port: int, literal: IPAddress | None, allow_hosts: Collection[str]
) -> bool:
    for entry in allow_hosts:
        try:
            written, only_port = split_allow_entry(entry)
        except ValueError:
            continue  # refused at load (policies.allow_hosts); never a match here
        if only_port is not None and only_port != port:
            continue
        if written == host:
            return True
        if literal is not None:
            try:
                if parse_ip_literal(written) == literal:
                    return True
            except UrlRefused:
                continue
    return False


async def vet_url(
    url: str, allow_hosts: Collection[str] = (), *, resolver: Resolver | None = None
) -> VettedTarget:
    """Check ``url`` against the SSRF policy and pick the address to connect to.

    Raises ``UrlRefused`` (policy: never retry) or ``HostUnresolved`` (DNS failure). Messages
    name the host, never the query string (it may hold secrets).
    """
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise UrlRefused(f"malformed URL ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise UrlRefused(
            f"scheme '{scheme or '(none)'}' is not allowed; tool URLs must start with http:// or https://"
        )
    host = _normalise_host(parts.hostname or "")
    if not host:
        raise UrlRefused("the URL has no host; write an absolute URL such as https://api.example.com/path")
    port = port or _DEFAULT_PORTS[scheme]
    literal = parse_ip_literal(host)
    allowed = _allowed(host, port, literal, allow_hosts)
    hint = (f"; add '{host}' (or '{host}:{port}' for this port only) to policies.allow_hosts "
            "if this host is meant to be called")

    if not allowed and (host in _BLOCKED_NAMES or host.endswith(".localhost")):
        raise UrlRefused(f"host '{host}' is a local or metadata name{hint}")

    if literal is not None:
        addresses: list[IPAddress] = [literal]
    else:
        try:
            raw = await (resolver or _getaddrinfo)(host, port)
        except (OSError, UnicodeError) as exc:
            raise HostUnresolved(f"cannot resolve host '{host}': {exc}") from exc
        addresses = []
        for text in raw:
            try:
                addresses.append(ipaddress.ip_address(text.split("%", 1)[0]))
            except ValueError:
                raise HostUnresolved(f"host '{host}' resolved to an invalid address {text!r}") from None
        if not addresses:
            raise HostUnresolved(f"host '{host}' resolved to no address")

    if not allowed:
        for addr in addresses:
            reason = blocked_reason(addr)
            if reason is not None:
                where = "" if literal is not None else f" (host '{host}' resolves to it)"
                raise UrlRefused(f"address {reason}{where}{hint}")

    # IPv4 first: a name like "localhost" often lists ::1 first while servers listen on 127.0.0.1.
    ordered = sorted(dict.fromkeys(addresses), key=lambda a: a.version)
    path_qs = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    userinfo = parts.netloc.rpartition("@")[0] if "@" in parts.netloc else ""
    return VettedTarget(
        scheme=scheme,
        host=host,
        port=port,
        address=str(ordered[0]),
        path_qs=path_qs,
        userinfo=userinfo,
        addresses=tuple(str(a) for a in ordered),
    )


__all__ = [
    "HostUnresolved",
    "Resolver",
    "UrlRefused",
    "VettedTarget",
    "blocked_reason",
    "parse_ip_literal",
    "split_allow_entry",
    "vet_url",
]
