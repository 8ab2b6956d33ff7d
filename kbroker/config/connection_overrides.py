"""`max.connections.per.ip.overrides`: parsed where settings are read, so a bad value
stops the start; kbroker/server/connection_limits.py resolves and enforces it."""

from __future__ import annotations


def parse_ip_overrides(text: str) -> dict[str, int]:
    """``host:count`` pairs, comma-separated (Kafka's format); a host name is resolved to
    its address now, as Kafka resolves it when the setting is read. ValueError if bad."""
    overrides: dict[str, int] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        host = host.strip().strip("[]")
        if not sep or not host or not count.strip().isdigit():
            raise ValueError(f"{item!r} is not host:count")
        overrides[host] = int(count)
    return overrides
