"""Kafka's connection quotas: ``max.connections`` and ``max.connections.per.ip``.

Kafka checks both when a connection is accepted. A connection from an address that
already holds its ``max.connections.per.ip`` (or its entry in
``max.connections.per.ip.overrides``) is closed at once. At ``max.connections`` a Kafka
acceptor stops accepting until a slot frees, leaving new connections in the listen
backlog; asyncio cannot pause an acceptor, so here the connection over the limit is
closed at once instead - the client sees the same thing a full backlog ends in, and
reconnects with backoff. As in Kafka (KIP-402) the inter-broker listener is exempt
from the broker-wide limit, so replication is never locked out by clients.
``listener.name.<listener>.max.connections`` caps one listener's connections as well,
the inter-broker one included, as Kafka's per-listener quota does.
"""

from __future__ import annotations

import socket
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field


def resolve_overrides(overrides: Mapping[str, int]) -> dict[str, int]:
    """Key each override by IP address (a name resolves to its first address)."""
    resolved: dict[str, int] = {}
    for host, count in overrides.items():
        try:
            address = socket.getaddrinfo(host, None)[0][4][0]
        except OSError:
            address = host  # unresolvable: matches nothing but its literal text
        resolved[str(address)] = count
    return resolved


@dataclass
class ConnectionLimits:
    """Open connections by client address, against the broker's limits."""

    max_connections: int
    max_per_ip: int
    per_ip_overrides: dict[str, int] = field(default_factory=dict)
    exempt_listeners: frozenset[str] = frozenset()
    # listener.name.<listener>.max.connections, keyed by the listener's name.
    per_listener: dict[str, int] = field(default_factory=dict)
    total: int = 0
    by_ip: Counter[str] = field(default_factory=Counter)
    by_listener: Counter[str] = field(default_factory=Counter)

    def admit(self, ip: str, listener: str) -> str | None:
        """Count a new connection and return None, or the reason it must be closed."""
        limit = self.per_ip_overrides.get(ip, self.max_per_ip)
        if self.by_ip[ip] >= limit:
            return f"{ip} already has {self.by_ip[ip]} connections (max.connections.per.ip={limit})"
        own = self.per_listener.get(listener)
        if own is not None and self.by_listener[listener] >= own:
            return (
                f"listener {listener} has {self.by_listener[listener]} connections "
                f"(listener.name.{listener.lower()}.max.connections={own})"
            )
        if self.total >= self.max_connections and listener not in self.exempt_listeners:
            return (
                f"the broker has {self.total} connections (max.connections={self.max_connections})"
            )
        self.by_ip[ip] += 1
        self.by_listener[listener] += 1
        self.total += 1
        return None

    def release(self, ip: str, listener: str) -> None:
        self.total -= 1
        self.by_ip[ip] -= 1
        if self.by_ip[ip] <= 0:
            del self.by_ip[ip]
        self.by_listener[listener] -= 1
        if self.by_listener[listener] <= 0:
            del self.by_listener[listener]
