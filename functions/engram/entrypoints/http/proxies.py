"""Which forwarding headers to believe: ``X-Forwarded-For``, ``-Host`` and ``-Proto`` count only when the
peer that sent them is a configured proxy (``ENGRAM_TRUSTED_PROXIES``; README, section Admin panel).

Anyone can send these headers. Believed from anyone, a client picks its own address (and escapes the
login rate limit) or its own host name (and passes the Origin check). Behind a proxy, the client's
address is the right-most ``X-Forwarded-For`` hop that is not itself a trusted proxy: each proxy
appends the address it received the request from, so hops to its right are the proxies' own and
hops to its left were written by the client.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from starlette.requests import HTTPConnection

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class TrustedProxies:
    """The proxies whose forwarding headers count; with none, only the TCP peer counts."""

    def __init__(self, networks: Iterable[str] = ()) -> None:
        # Settings validated them (settings.py), so a bad entry fails at start.
        self._networks: tuple[Network, ...] = tuple(ipaddress.ip_network(n, strict=False) for n in networks)

    def __bool__(self) -> bool:
        return bool(self._networks)

    def trusts(self, address: str | None) -> bool:
        if not address or not self._networks:
            return False
        try:
            ip = ipaddress.ip_address(address.strip().strip("[]"))
        except ValueError:
            return False
        return any(ip in net for net in self._networks)

    def _peer(self, conn: HTTPConnection) -> str | None:
        return conn.client.host if conn.client else None

    def forwarded(self, conn: HTTPConnection) -> bool:
        """Whether this request came from a trusted proxy (so its forwarding headers count)."""
        return self.trusts(self._peer(conn))

    def client_ip(self, conn: HTTPConnection) -> str:
        """The caller's address: the peer, or behind trusted proxies the right-most untrusted hop."""
        peer = self._peer(conn) or "unknown"
        if not self.trusts(peer):
            return peer
        hops = [h.strip() for v in conn.headers.getlist("x-forwarded-for") for h in v.split(",") if h.strip()]
        for hop in reversed(hops):
            if not self.trusts(hop):
                return hop[:64]
        return hops[0][:64] if hops else peer

    def host(self, conn: HTTPConnection) -> str:
        """The host name the client used: ``X-Forwarded-Host`` from a trusted proxy, else ``Host``."""
        if self.forwarded(conn) and (forwarded := conn.headers.get("x-forwarded-host")):
            return forwarded.split(",")[0].strip().lower()
        return conn.headers.get("host", "").lower()

    def scheme(self, conn: HTTPConnection) -> str:
        """``https`` or ``http`` as the client saw it (``X-Forwarded-Proto`` from a trusted proxy)."""
        if self.forwarded(conn) and (forwarded := conn.headers.get("x-forwarded-proto")):
            return forwarded.split(",")[0].strip().lower()
        return conn.url.scheme
