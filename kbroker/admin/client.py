"""A small blocking Kafka client: one socket per broker, kio for the message bodies.

Enough for admin commands: it negotiates versions with ApiVersions, sends one request at
a time and reads its answer. Requests are given as plain dicts of kio field names (as
the broker's handlers answer), built for the newest version both sides speak within
the range the caller asks for.
"""

from __future__ import annotations

import io
import socket
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from kbroker.protocol.messages import build, is_flexible, known_versions

API_VERSIONS = 18
MAX_RESPONSE_BYTES = 100 * 1024 * 1024


class ClientError(Exception):
    """The broker could not be reached, or answered something this client cannot use."""


def parse_address(address: str, default_port: int = 9092) -> tuple[str, int]:
    """`host:port`, `host`, or `[v6]:port` to (host, port)."""
    address = address.strip()
    if address.startswith("["):
        host, _, rest = address[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else default_port
    host, sep, port = address.rpartition(":")
    if not sep:
        return address, default_port
    try:
        return host, int(port)
    except ValueError:
        raise ClientError(f"bad port in address {address!r}") from None


@dataclass
class BrokerConnection:
    host: str
    port: int
    timeout: float = 10.0
    client_id: str = "kbroker-admin"
    versions: dict[int, tuple[int, int]] = field(default_factory=dict)
    _sock: socket.socket | None = None
    _correlation: int = 0

    def open(self) -> BrokerConnection:
        try:
            self._sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        except OSError as exc:
            raise ClientError(f"cannot connect to {self.host}:{self.port}: {exc}") from None
        response = self.call(API_VERSIONS, {}, versions=(0, 0))
        if response.error_code != 0:
            raise ClientError(f"ApiVersions answered error {int(response.error_code)}")
        self.versions = {
            int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys
        }
        return self

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def version_for(self, api_key: int, wanted: tuple[int, int]) -> int:
        """The newest version in `wanted` that both the broker and kio speak."""
        low, high = wanted
        known = known_versions(api_key)
        high = min(high, known.stop - 1)
        low = max(low, known.start)
        if self.versions:
            if api_key not in self.versions:
                raise ClientError(f"the broker does not serve API {api_key}")
            broker_low, broker_high = self.versions[api_key]
            low, high = max(low, broker_low), min(high, broker_high)
        if low > high:
            raise ClientError(f"no version of API {api_key} in {wanted} that both sides speak")
        return high

    def call(self, api_key: int, body: dict[str, Any], versions: tuple[int, int]) -> Any:
        """Send one request and return the decoded response (a kio dataclass)."""
        if self._sock is None:
            raise ClientError("connection is not open")
        version = self.version_for(api_key, versions)
        request = build(load_request_schema(api_key, version), body)
        flexible = is_flexible(api_key, version)
        self._correlation += 1
        client_id = self.client_id.encode()
        head = struct.pack(">hhih", api_key, version, self._correlation, len(client_id))
        head += client_id
        if flexible:
            head += b"\x00"  # no tagged fields in the header
        buffer = io.BytesIO()
        entity_writer(type(request))(buffer, request)
        payload = head + buffer.getvalue()
        try:
            self._sock.sendall(struct.pack(">i", len(payload)) + payload)
            size = struct.unpack(">i", self._recv(4))[0]
            if not 4 <= size <= MAX_RESPONSE_BYTES:
                raise ClientError(f"response of implausible size {size}")
            data = self._recv(size)
        except OSError as exc:
            raise ClientError(f"{self.host}:{self.port}: {exc}") from None
        (correlation,) = struct.unpack_from(">i", data, 0)
        if correlation != self._correlation:
            raise ClientError(f"correlation id {correlation} != {self._correlation}")
        # ApiVersions answers with header v0 whatever the request's version.
        offset = 5 if flexible and api_key != API_VERSIONS else 4
        response, _ = entity_reader(load_response_schema(api_key, version))(data, offset)
        return response

    def _recv(self, n: int) -> bytes:
        assert self._sock is not None
        chunks = bytearray()
        while len(chunks) < n:
            chunk = self._sock.recv(n - len(chunks))
            if not chunk:
                raise ClientError(f"{self.host}:{self.port} closed the connection")
            chunks += chunk
        return bytes(chunks)


class Cluster:
    """Connections to the brokers of one cluster, opened on first use."""

    def __init__(self, bootstrap: str, timeout: float = 10.0) -> None:
        self.bootstrap = [parse_address(a) for a in bootstrap.split(",") if a.strip()]
        if not self.bootstrap:
            raise ClientError("no bootstrap address given")
        self.timeout = timeout
        self._connections: dict[tuple[str, int], BrokerConnection] = {}

    def connection(self, host: str, port: int) -> BrokerConnection:
        key = (host, port)
        conn = self._connections.get(key)
        if conn is None:
            conn = BrokerConnection(host, port, self.timeout).open()
            self._connections[key] = conn
        return conn

    def any(self) -> BrokerConnection:
        errors = []
        for host, port in self.bootstrap:
            try:
                return self.connection(host, port)
            except ClientError as exc:
                errors.append(str(exc))
        raise ClientError("; ".join(errors))

    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()


@contextmanager
def cluster(bootstrap: str, timeout: float = 10.0) -> Iterator[Cluster]:
    c = Cluster(bootstrap, timeout)
    try:
        yield c
    finally:
        c.close()
