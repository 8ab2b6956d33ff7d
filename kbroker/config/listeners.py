"""Listener strings (``NAME://host:port,...``) and the other address forms settings use.

Kafka names each listener and maps the name to a security protocol through
``listener.security.protocol.map``; the bare protocol names map to themselves.
kbroker speaks only PLAINTEXT, so the broker refuses at start any listener that would
need TLS or SASL rather than accept connections it cannot serve.
"""

from __future__ import annotations

import re
from typing import NamedTuple

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
WILDCARD_HOSTS = ("", "0.0.0.0", "::")

_LISTENER = re.compile(r"(?P<name>[A-Za-z0-9_\-]+)://(?P<address>.*)")
_ADDRESS = re.compile(r"(?:\[(?P<ipv6>[0-9A-Za-z:.%]*)\]|(?P<host>[0-9A-Za-z\-._]*)):(?P<port>\d+)")
_PEER = re.compile(r"(?P<id>\d+)@(?P<address>.+)")


class Endpoint(NamedTuple):
    """A named socket address; unpacks as ``(name, host, port)``."""

    name: str
    host: str
    port: int

    @property
    def is_wildcard(self) -> bool:
        return self.host in WILDCARD_HOSTS

    @property
    def bind_host(self) -> str | None:
        """Host for ``asyncio.start_server``: None binds every interface, as Kafka's ''."""
        return None if self.host == "" else self.host

    def __str__(self) -> str:
        return f"{self.name}://{format_address(self.host, self.port)}"


class Peer(NamedTuple):
    """A cluster member as named in ``cluster.peers``: ``id@host:port``."""

    node_id: int
    host: str
    port: int


def format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_address(text: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port``; empty host allowed (all interfaces)."""
    match = _ADDRESS.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not host:port")
    port = int(match["port"])
    if port > 65535:
        raise ValueError(f"port {port} is out of range in {text!r}")
    host = match["ipv6"] if match["ipv6"] is not None else match["host"]
    return host, port


def parse_listeners(text: str) -> list[Endpoint]:
    """Parse a comma list of ``NAME://host:port``; names are upper-cased as Kafka does."""
    endpoints: list[Endpoint] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        match = _LISTENER.fullmatch(item)
        if match is None:
            raise ValueError(f"listener {item!r} is not of the form NAME://host:port")
        host, port = parse_address(match["address"])
        endpoints.append(Endpoint(match["name"].upper(), host, port))
    names = [e.name for e in endpoints]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"listener name {duplicates[0]} is used more than once")
    return endpoints


def parse_protocol_map(text: str) -> dict[str, str]:
    """``NAME:PROTOCOL,...`` -> {NAME: PROTOCOL}."""
    mapping: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name:
            raise ValueError(f"{item!r} is not of the form NAME:PROTOCOL")
        if protocol not in SECURITY_PROTOCOLS:
            raise ValueError(f"{protocol!r} is not one of {', '.join(SECURITY_PROTOCOLS)}")
        if name in mapping:
            raise ValueError(f"listener name {name} is mapped more than once")
        mapping[name] = protocol
    return mapping


def parse_http_listener(text: str) -> Endpoint:
    """``http://host:port`` for the metrics and health endpoints."""
    scheme, sep, address = text.strip().partition("://")
    if not sep or scheme.lower() != "http":
        raise ValueError(f"{text!r} is not of the form http://host:port")
    host, port = parse_address(address)
    return Endpoint("HTTP", host, port)


def parse_registry_listener(text: str) -> Endpoint:
    """``http://host:port`` or ``https://host:port`` for the schema registry; the
    endpoint's name is its scheme, upper-cased."""
    scheme, sep, address = text.strip().partition("://")
    if not sep or scheme.lower() not in ("http", "https"):
        raise ValueError(f"{text!r} is not of the form http://host:port or https://host:port")
    host, port = parse_address(address.rstrip("/"))
    return Endpoint(scheme.upper(), host, port)


def parse_peer(text: str) -> Peer:
    match = _PEER.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"peer {text!r} is not of the form id@host:port")
    host, port = parse_address(match["address"])
    return Peer(int(match["id"]), host, port)
