"""A blocking raw Kafka client for compat tests that need requests stock clients never send.

Tests build kio request entities (or raw bytes), and this client frames them, sends them
over one TCP connection and decodes the answer by the request's version. It checks
nothing about the broker beyond the framing it needs: the tests make the assertions.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader

from kbroker.protocol import messages

API_VERSIONS = 18
MAX_RESPONSE = 64 << 20


class RawClient:
    """One TCP connection speaking Kafka frames; knows just enough to ask and read."""

    def __init__(
        self, host: str, port: int, timeout: float = 10.0, client_id: bytes = b"test"
    ) -> None:
        self.timeout = timeout
        self.client_id = client_id
        self.sock = socket.create_connection((host, port), timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        local_host, local_port = self.sock.getsockname()[:2]
        self.local = f"{local_host}:{local_port}"
        self.next_correlation = 1

    @classmethod
    def to(cls, bootstrap: str, timeout: float = 10.0, client_id: bytes = b"test") -> RawClient:
        host, port = bootstrap.rsplit(":", 1)
        return cls(host, int(port), timeout, client_id)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def request_bytes(self, api_key: int, version: int, body: bytes, correlation: int) -> bytes:
        """A whole frame; unknown keys and versions get a v1 header so garbage can be sent."""
        client = self.client_id
        head = struct.pack(">hhih", api_key, version, correlation, len(client)) + client
        known = api_key in messages.API_NAMES and version in messages.known_versions(api_key)
        if known and messages.is_flexible(api_key, version):
            head += b"\x00"
        payload = head + body
        return struct.pack(">i", len(payload)) + payload

    def ask(self, entity: Any) -> Any:
        """Send a kio request entity and decode the broker's answer to it."""
        key, version = int(entity.__api_key__), int(entity.__version__)
        correlation = self.next_correlation
        self.next_correlation += 1
        self.send(self.request_bytes(key, version, messages.encode(entity), correlation))
        answer = self.read_frame()
        (got,) = struct.unpack_from(">i", answer)
        assert got == correlation
        # ApiVersions answers with a v0 header even in its flexible versions.
        offset = 5 if messages.is_flexible(key, version) and key != API_VERSIONS else 4
        reader = entity_reader(load_response_schema(key, version))
        value, _ = reader(answer, offset)
        return value

    def call(self, api_key: int, version: int, **fields: Any) -> Any:
        """Ask with a request built from every field of the version, named as kio names them."""
        return self.ask(load_request_schema(api_key, version)(**fields))

    def read_exact(self, n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError(f"closed after {len(data)} of {n} bytes")
            data += chunk
        return bytes(data)

    def read_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self.read_exact(4))
        assert 0 <= size < MAX_RESPONSE, f"response size {size}"
        return self.read_exact(size)

    def closed_by_broker(self, timeout: float | None = None) -> bool:
        """True once the broker closes (EOF or reset); False if it sends data or waits."""
        self.sock.settimeout(self.timeout if timeout is None else timeout)
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False
        finally:
            self.sock.settimeout(self.timeout)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
