"""The one small Kafka client of the project: the admin commands and the tests use it.

Framing and decoding are plain functions (no I/O, in kbroker.protocol.client_frames):
`request_frame` and `encode_request` build a size-prefixed request, `decode_response`
reads an answer by its request's API and version. `BrokerConnection` is the blocking
socket around them (admin commands, compat tests); the in-process tests and the replica
fetcher wrap the same functions around asyncio streams.

A connection can negotiate versions with ApiVersions, then `call` builds a request
from a plain dict of kio field names for the newest version both sides speak within
the range the caller asks for. `request` and `ask` send one exact version (a test's
choice), and `send` / `read_frame` move raw bytes, so malformed input can be sent too.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from kbroker.admin.security import ClientSecurity, exchange
from kbroker.protocol.client_frames import (
    API_VERSIONS,
    decode_response,
    encode_request,
    request_frame,
)
from kbroker.protocol.messages import API_NAMES, build, known_versions

# The one-shot requests' fields, used by operators' commands and tests beside this client.
from kbroker.protocol.one_shot import fetch_fields as fetch_fields
from kbroker.protocol.one_shot import produce_fields as produce_fields
from kbroker.security.sasl_client import SaslFailure

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
MAX_RESPONSE_BYTES = 100 * 1024 * 1024


class ClientError(Exception):
    """The broker could not be reached, or answered something this client cannot use."""


class ConnectionClosed(ClientError, ConnectionError):
    """The broker closed the connection before the whole answer came."""


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


# -- a blocking connection ----------------------------------------------------------------


class BrokerConnection:
    """One TCP connection to one broker, one request at a time."""

    def __init__(
        self,
        host: str,
        port: int,
        timeout: float = 10.0,
        client_id: str = "kbroker-admin",
        security: ClientSecurity | None = None,
    ) -> None:
        self.host, self.port = host, port
        self.timeout = timeout
        self.client_id = client_id
        self.versions: dict[int, tuple[int, int]] = {}
        self.next_correlation = 1
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise ClientError(f"cannot connect to {host}:{port}: {exc.strerror or exc}") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if security is not None and security.tls:
            try:
                self.sock = security.ssl_context().wrap_socket(self.sock, server_hostname=host)
            except (OSError, ValueError) as exc:
                self.sock.close()
                raise ClientError(f"TLS with {host}:{port} failed: {exc}") from None
        local_host, local_port = self.sock.getsockname()[:2]
        self.local = f"{local_host}:{local_port}"

    @classmethod
    def to(
        cls, bootstrap: str, timeout: float = 10.0, client_id: str = "kbroker-admin"
    ) -> BrokerConnection:
        host, port = parse_address(bootstrap)
        return cls(host, port, timeout, client_id)

    def negotiate(self) -> BrokerConnection:
        """Learn the broker's version ranges (ApiVersions v0), for `call` to choose from."""
        response = self.request(API_VERSIONS, 0)
        if int(response.error_code) != 0:
            raise ClientError(f"ApiVersions answered error {int(response.error_code)}")
        self.versions = {
            int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys
        }
        return self

    def authenticate(self, security: ClientSecurity) -> BrokerConnection:
        """SaslHandshake, then SaslAuthenticate requests carrying the mechanism's messages."""
        mechanism = security.mechanism
        shake = self.call(SASL_HANDSHAKE, {"mechanism": mechanism}, versions=(1, 1))
        if int(shake.error_code) != 0:
            enabled = ", ".join(shake.mechanisms) or "none"
            raise ClientError(
                f"{self.host}:{self.port} does not enable SASL {mechanism} (enabled: {enabled})"
            )
        steps = exchange(security)
        message = next(steps)
        while True:
            answer = self.call(SASL_AUTHENTICATE, {"auth_bytes": message}, versions=(0, 2))
            if int(answer.error_code) != 0:
                reason = answer.error_message or ErrorCode(int(answer.error_code)).name.upper()
                raise ClientError(f"authentication failed on {self.host}:{self.port}: {reason}")
            try:
                message = steps.send(bytes(answer.auth_bytes))
            except StopIteration:
                return self
            except SaslFailure as exc:
                raise ClientError(
                    f"authentication failed on {self.host}:{self.port}: {exc}"
                ) from None

    def version_for(self, api_key: int, wanted: tuple[int, int]) -> int:
        """The newest version in `wanted` that both the broker and kio speak."""
        low, high = wanted
        known = known_versions(api_key)
        high = min(high, known.stop - 1)
        low = max(low, known.start)
        if self.versions:
            if api_key not in self.versions:
                raise ClientError(f"the broker does not serve {API_NAMES.get(api_key, api_key)}")
            broker_low, broker_high = self.versions[api_key]
            low, high = max(low, broker_low), min(high, broker_high)
        if low > high:
            raise ClientError(f"no version of API {api_key} in {wanted} that both sides speak")
        return high

    def call(self, api_key: int, body: dict[str, Any], versions: tuple[int, int]) -> Any:
        """Ask with the newest common version in `versions`, the request built from `body`."""
        version = self.version_for(api_key, versions)
        return self.ask(build(load_request_schema(api_key, version), body))

    def request(self, api_key: int, version: int, **fields: Any) -> Any:
        """Ask with exactly this version, its fields named as kio names them."""
        return self.ask(build(load_request_schema(api_key, version), fields))

    def ask(self, entity: Any) -> Any:
        """Send a kio request entity and decode the broker's answer to it."""
        correlation = self.next_correlation
        self.next_correlation += 1
        try:
            self.send(encode_request(entity, correlation, self.client_id))
            frame = self.read_frame()
        except ClientError:
            raise
        except OSError as exc:
            raise ClientError(f"{self.host}:{self.port}: {exc}") from None
        got, response = decode_response(int(entity.__api_key__), int(entity.__version__), frame)
        if got != correlation:
            raise ClientError(f"correlation id {got} != {correlation}")
        return response

    def send_call(
        self, api_key: int, body: dict[str, Any], versions: tuple[int, int]
    ) -> tuple[int, int, int]:
        """Send a request without waiting for its answer (a pipeline): returns (api key,
        version, correlation id) for `receive`, which must read answers in send order."""
        version = self.version_for(api_key, versions)
        entity = build(load_request_schema(api_key, version), body)
        correlation = self.next_correlation
        self.next_correlation += 1
        try:
            self.send(encode_request(entity, correlation, self.client_id))
        except OSError as exc:
            raise ClientError(f"{self.host}:{self.port}: {exc}") from None
        return api_key, version, correlation

    def receive(self, sent: tuple[int, int, int]) -> Any:
        """The answer to a request `send_call` sent, the oldest not yet read."""
        api_key, version, correlation = sent
        try:
            frame = self.read_frame()
        except ClientError:
            raise
        except OSError as exc:
            raise ClientError(f"{self.host}:{self.port}: {exc}") from None
        got, response = decode_response(api_key, version, frame)
        if got != correlation:
            raise ClientError(f"correlation id {got} != {correlation}")
        return response

    def send_raw(self, api_key: int, version: int, body: bytes) -> int:
        """Send a request whose body the caller encoded (after checking the broker serves
        that version); returns its correlation id for `receive_raw`."""
        if self.versions:
            low, high = self.versions.get(api_key, (1, 0))
            if not low <= version <= high:
                name = API_NAMES.get(api_key, api_key)
                raise ClientError(f"{self.host}:{self.port} does not serve {name} v{version}")
        correlation = self.next_correlation
        self.next_correlation += 1
        try:
            self.send(self.request_bytes(api_key, version, body, correlation))
        except OSError as exc:
            raise ClientError(f"{self.host}:{self.port}: {exc}") from None
        return correlation

    def receive_raw(self, correlation: int) -> bytes:
        """The body of the answer to a `send_raw` request with a v0 response header
        (a non-flexible version): what follows its correlation id."""
        try:
            frame = self.read_frame()
        except ClientError:
            raise
        except OSError as exc:
            raise ClientError(f"{self.host}:{self.port}: {exc}") from None
        (got,) = struct.unpack_from(">i", frame, 0)
        if got != correlation:
            raise ClientError(f"correlation id {got} != {correlation}")
        return frame[4:]

    def request_bytes(self, api_key: int, version: int, body: bytes, correlation: int) -> bytes:
        return request_frame(api_key, version, correlation, self.client_id, body)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_exact(self, n: int) -> bytes:
        buffer = bytearray(n)
        view = memoryview(buffer)
        got = 0
        while got < n:
            k = self.sock.recv_into(view[got:], n - got)
            if not k:
                raise ConnectionClosed(
                    f"{self.host}:{self.port} closed the connection after {got} of {n} bytes"
                )
            got += k
        return bytes(buffer)

    def read_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self.read_exact(4))
        if not 4 <= size <= MAX_RESPONSE_BYTES:
            raise ClientError(f"response of implausible size {size}")
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

    def drained(self) -> bool:
        """Close our side and wait (up to the timeout) for the broker to close its own,
        which it does after reading everything sent: how a request that gets no answer
        (Produce with acks=0) is known to have reached it. False if it did not close."""
        try:
            self.sock.shutdown(socket.SHUT_WR)
            self.sock.settimeout(self.timeout)
            while self.sock.recv(65536):
                pass
        except OSError:
            return False
        return True

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> BrokerConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Cluster:
    """Connections to the brokers of one cluster, opened (and negotiated) on first use."""

    def __init__(
        self, bootstrap: str, timeout: float = 10.0, security: ClientSecurity | None = None
    ) -> None:
        self.bootstrap = [parse_address(a) for a in bootstrap.split(",") if a.strip()]
        if not self.bootstrap:
            raise ClientError("no bootstrap address given")
        self.timeout = timeout
        self.security = security
        self._connections: dict[tuple[str, int, str], BrokerConnection] = {}

    def connection(self, host: str, port: int, purpose: str = "") -> BrokerConnection:
        """The connection to one broker; a `purpose` gets one of its own (a group
        member's heartbeats and commits beside its pipelined fetches)."""
        key = (host, port, purpose)
        conn = self._connections.get(key)
        if conn is None:
            conn = BrokerConnection(host, port, self.timeout, security=self.security)
            try:
                conn.negotiate()
                if self.security is not None and self.security.sasl:
                    conn.authenticate(self.security)
            except ClientError:
                conn.close()
                raise
            except OSError as exc:
                conn.close()
                raise ClientError(f"{host}:{port}: {exc}") from None
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
def cluster(
    bootstrap: str, timeout: float = 10.0, security: ClientSecurity | None = None
) -> Iterator[Cluster]:
    c = Cluster(bootstrap, timeout, security)
    try:
        yield c
    finally:
        c.close()
