"""A minimal Kafka Metadata probe over a raw socket, for timing broker start-up.

A stock client's reconnect back-off would blur the moment a restarted broker becomes
usable, so the probe speaks the two requests it needs itself: ApiVersions v0 (which
every broker answers) to pick a Metadata version, then Metadata (v1..v8, the
non-flexible encodings) to see which topics and partition leaders the broker serves.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass, field

API_METADATA = 3
API_VERSIONS = 18
CLIENT_ID = b"kbroker-bench"


class ProbeError(Exception):
    """The broker answered, but not in a way this probe understands."""


@dataclass
class ClusterView:
    """What one Metadata response said: partition -> leader id, per topic."""

    version: int
    brokers: int
    leaders: dict[str, dict[int, int]] = field(default_factory=dict)

    def ready_partitions(self, topic: str) -> int:
        return sum(1 for leader in self.leaders.get(topic, {}).values() if leader >= 0)


class _Reader:
    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def _take(self, fmt: str):
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def i8(self) -> int:
        return self._take(">b")

    def i16(self) -> int:
        return self._take(">h")

    def i32(self) -> int:
        return self._take(">i")

    def string(self) -> str | None:
        n = self.i16()
        if n < 0:
            return None
        s = self.buf[self.pos : self.pos + n].decode()
        self.pos += n
        return s

    def i32_array(self) -> list[int]:
        n = self.i32()
        return [self.i32() for _ in range(max(n, 0))]


def _request(api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    header = struct.pack(">hhih", api_key, version, correlation_id, len(CLIENT_ID)) + CLIENT_ID
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < n:
        chunk = sock.recv(n - len(chunks))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        chunks += chunk
    return bytes(chunks)


def _roundtrip(sock: socket.socket, api_key: int, version: int, corr: int, body: bytes) -> _Reader:
    sock.sendall(_request(api_key, version, corr, body))
    (size,) = struct.unpack(">i", _recv_exact(sock, 4))
    reader = _Reader(_recv_exact(sock, size))
    if reader.i32() != corr:
        raise ProbeError("correlation id mismatch")
    return reader


def _metadata_version(sock: socket.socket) -> int:
    r = _roundtrip(sock, API_VERSIONS, 0, 1, b"")
    r.i16()  # error code: an UNSUPPORTED_VERSION answer still lists the ranges
    for _ in range(r.i32()):
        key, lo, hi = r.i16(), r.i16(), r.i16()
        if key == API_METADATA:
            version = min(hi, 8)
            if version < max(lo, 1):
                raise ProbeError(f"no non-flexible Metadata version in {lo}..{hi}")
            return version
    raise ProbeError("broker lists no Metadata API")


def _metadata_body(version: int, topics: list[str] | None) -> bytes:
    if topics is None:
        body = struct.pack(">i", -1)
    else:
        body = struct.pack(">i", len(topics))
        for t in topics:
            raw = t.encode()
            body += struct.pack(">h", len(raw)) + raw
    if version >= 4:
        body += b"\x00"  # allow_auto_topic_creation
    if version >= 8:
        body += b"\x00\x00"  # include cluster / topic authorized operations
    return body


def _parse_metadata(version: int, r: _Reader) -> ClusterView:
    if version >= 3:
        r.i32()  # throttle_time_ms
    brokers = r.i32()
    for _ in range(brokers):
        r.i32(), r.string(), r.i32(), r.string()  # node_id, host, port, rack
    if version >= 2:
        r.string()  # cluster_id
    r.i32()  # controller_id
    view = ClusterView(version=version, brokers=brokers)
    for _ in range(r.i32()):
        r.i16()  # topic error
        name = r.string() or ""
        r.i8()  # is_internal
        leaders: dict[int, int] = {}
        for _ in range(r.i32()):
            err, index, leader = r.i16(), r.i32(), r.i32()
            if version >= 7:
                r.i32()  # leader_epoch
            r.i32_array(), r.i32_array()  # replicas, isr
            if version >= 5:
                r.i32_array()  # offline replicas
            leaders[index] = leader if err == 0 else -1
        if version >= 8:
            r.i32()  # topic authorized operations
        view.leaders[name] = leaders
    return view


def fetch_metadata(
    host: str, port: int, topics: list[str] | None = None, timeout: float = 5.0
) -> ClusterView:
    """One connection, ApiVersions then Metadata; raises OSError if the broker is not up."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        version = _metadata_version(sock)
        reader = _roundtrip(sock, API_METADATA, version, 2, _metadata_body(version, topics))
        return _parse_metadata(version, reader)


def wait_for_metadata(
    host: str,
    port: int,
    deadline: float,
    topic: str | None = None,
    partitions: int = 0,
    alive=lambda: True,
    since: float | None = None,
) -> tuple[float | None, float | None]:
    """Poll every 10 ms until Metadata succeeds, then until `topic` has `partitions` leaders.

    Returns (seconds to the first successful Metadata, seconds until the topic is fully
    led), counted from `since` (a time.perf_counter() value, default now), each None if
    not reached before `deadline` or while `alive()` stays true.
    """
    start = time.perf_counter() if since is None else since
    first: float | None = None
    while time.perf_counter() < deadline and alive():
        try:
            view = fetch_metadata(host, port, [topic] if topic else None, timeout=2.0)
        except (OSError, ProbeError, struct.error):
            time.sleep(0.01)
            continue
        now = time.perf_counter() - start
        if first is None:
            first = now
        if topic is None or view.ready_partitions(topic) >= partitions:
            return first, now
        time.sleep(0.01)
    return first, None
