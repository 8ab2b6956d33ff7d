"""`kbroker produce`: lines of input as records, batched and pipelined.

The input is read in large chunks and cut into batches of up to `codec.BATCH_BYTES`
straight from its bytes (kbroker.protocol.record_codec). Unkeyed records fill one batch for one
partition and the next batch goes to the next partition (the sticky partitioner of
Kafka's producers); keyed ones go where Kafka's default partitioner puts their key
(murmur2); `--partition` sends all to one. Each leader gets its requests on one
connection, up to `IN_FLIGHT` of them before the oldest answer is read, so the broker
stores one batch while the next is built and sent.

A record counts as produced once its leader acknowledged it; with acks=0 nothing is
acknowledged, so the count is of records sent, and the connections are closed only
after the broker has read everything sent on them. Ctrl-C or a refused batch stops the
sending, the answers already due are read, and the count says how many records are
on the broker.
"""

from __future__ import annotations

import contextlib
import select
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from kio.schema.errors import ErrorCode

from kbroker.admin.client import BrokerConnection, ClientError, Cluster, produce_fields
from kbroker.admin.records import partition_for
from kbroker.admin.topics import ClusterMetadata, error_of, metadata
from kbroker.protocol import record_codec as codec

PRODUCE = 0
METADATA = 3
IN_FLIGHT = 4
READ_CHUNK = 4 << 20
WAIT_SLICE_S = 0.2
# What Metadata answers while a topic it just created has no leaders yet.
_NOT_READY = {ErrorCode.leader_not_available, ErrorCode.unknown_topic_or_partition}


def topic_for_producing(cluster: Cluster, topic: str, deadline: float) -> ClusterMetadata:
    """The topic's metadata once every partition has a leader. Metadata asks the broker
    to create a missing topic, as a producer's does: it does when its
    auto.create.topics.enable allows, and a topic it does not create is named."""
    body = {
        "topics": [{"name": topic, "topic_id": None}],
        "allow_auto_topic_creation": True,
        "include_topic_authorized_operations": False,
    }
    first = True
    while True:
        answer = cluster.any().call(METADATA, body, versions=(4, 12)).topics[0]
        error = error_of(answer.error_code)
        if error == ErrorCode.unknown_topic_or_partition and first:
            # Asked once more: a broker that creates the topic answers LEADER_NOT_AVAILABLE
            # or the topic; one that does not answers UNKNOWN_TOPIC_OR_PARTITION again.
            first = False
            time.sleep(0.1)
            continue
        if error == ErrorCode.unknown_topic_or_partition:
            raise ClientError(
                f"topic {topic} does not exist and the broker did not create it "
                "(auto.create.topics.enable is false)"
            )
        if error == ErrorCode.none and all(int(p.leader_id) >= 0 for p in answer.partitions):
            return metadata(cluster, [topic])
        if error not in _NOT_READY and error != ErrorCode.none:
            raise ClientError(f"topic {topic}: {error.name.upper()}")
        if time.monotonic() > deadline:
            raise ClientError(f"topic {topic} has partitions without a leader")
        time.sleep(0.05)


def read_available(stream: BinaryIO, wanted: int) -> tuple[bytes, bool]:
    """What the input has now, up to about `wanted` bytes but at least one read (which
    waits): (data, at end). A slow writer's lines go out as they come, as with linger.ms=0,
    and a fast one's fill whole batches."""
    read1 = getattr(stream, "read1", None)
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        fd = -1
    if read1 is None or fd < 0:
        chunk = stream.read(READ_CHUNK)
        return chunk, not chunk
    chunks: list[bytes] = []
    size = 0
    # The wait is a select that wakes every WAIT_SLICE_S, not a read that blocks: Ctrl-C
    # arriving just before a blocking read is entered runs its handler then, and the
    # KeyboardInterrupt comes only when the read returns, which a quiet input never does.
    # (read1 of READ_CHUNK reads past BufferedReader's buffer, which so stays empty.)
    while not select.select([fd], [], [], WAIT_SLICE_S)[0]:
        pass
    while size < wanted:
        if chunks and not select.select([fd], [], [], 0)[0]:
            break
        chunk = read1(READ_CHUNK)
        if not chunk:
            return b"".join(chunks), True
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks), False


@contextlib.contextmanager
def _ctrl_c_held() -> Iterator[None]:
    """SIGINT held back in the block (main thread; elsewhere Python runs no handler)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def input_lines(stream: BinaryIO) -> Iterator[bytes]:
    """The lines of `stream` without their newlines (a last one without a newline too),
    read as `read_available` reads, so that Ctrl-C ends a wait for the next line."""
    rest = b""
    while True:
        chunk, eof = read_available(stream, READ_CHUNK)
        lines = (rest + chunk).split(b"\n")
        rest = lines.pop()
        yield from lines
        if eof:
            if rest:
                yield rest
            return


@dataclass
class _Leader:
    connection: BrokerConnection
    in_flight: deque[tuple[tuple[int, int, int], int, int]] = field(default_factory=deque)


@dataclass
class Result:
    """What a run of `produce` did: records acknowledged (or sent, with acks=0) per
    partition, each partition's first and last offset, and why it stopped early."""

    topic: str
    acks: int
    sent: int = 0
    acknowledged: int = 0
    partitions: dict[int, list[int]] = field(default_factory=dict)  # p -> [count, first, last]
    error: str | None = None
    interrupted: bool = False

    @property
    def produced(self) -> int:
        return self.sent if self.acks == 0 else self.acknowledged


class Producer:
    """Sends batches to their partitions' leaders, IN_FLIGHT requests deep."""

    def __init__(
        self,
        cluster: Cluster,
        topic: str,
        *,
        acks: int = -1,
        partition: int | None = None,
        key_separator: bytes | None = None,
        headers: bytes = b"\x00",
        compression: int = 0,
        request_timeout_ms: int = 30_000,
        on_acked: Callable[[int], None] | None = None,
    ) -> None:
        self.cluster, self.topic = cluster, topic
        self.acks, self.partition = acks, partition
        self.key_separator, self.headers = key_separator, headers
        self.compression = compression
        self.timeout_ms = request_timeout_ms
        self.on_acked = on_acked
        md = topic_for_producing(cluster, topic, time.monotonic() + cluster.timeout)
        self.count = len(md.topics[0].partitions)
        if partition is not None and not 0 <= partition < self.count:
            raise ClientError(f"topic {topic} has no partition {partition}")
        self.leaders: dict[int, _Leader] = {}
        by_address: dict[tuple[str, int], _Leader] = {}
        for p in range(self.count):
            address = md.leader_address((topic, p))
            if address is None:
                raise ClientError(f"no leader for {topic}-{p}")
            if address not in by_address:
                by_address[address] = _Leader(cluster.connection(*address))
            self.leaders[p] = by_address[address]
        self.result = Result(topic, acks)
        self.next_partition = 0

    # -- sending ----------------------------------------------------------------------------

    def _send(self, p: int, section: bytes, count: int) -> None:
        records = codec.batch(section, count, int(time.time() * 1000), self.compression)
        leader = self.leaders[p]
        while len(leader.in_flight) >= IN_FLIGHT:
            self._receive(leader)
        if self.result.error is not None:
            return
        body = produce_fields(
            self.topic, records, partition=p, acks=self.acks, timeout_ms=self.timeout_ms
        )
        # Ctrl-C waits until the request is sent and counted: raised in between, the
        # batch would be stored but its answer never read (and Ctrl-C report too few).
        with _ctrl_c_held():
            sent = leader.connection.send_call(PRODUCE, body, versions=(3, 11))
            self.result.sent += count
            if self.acks == 0:
                self._count(p, count, -1)
            else:
                leader.in_flight.append((sent, p, count))

    def _receive(self, leader: _Leader) -> None:
        sent, p, count = leader.in_flight.popleft()
        answer = leader.connection.receive(sent).responses[0].partition_responses[0]
        error = error_of(answer.error_code)
        if error != ErrorCode.none:
            if self.result.error is None:
                message = f" ({answer.error_message})" if answer.error_message else ""
                self.result.error = f"producing to {self.topic}-{p}: {error.name.upper()}{message}"
            return
        self.result.acknowledged += count
        self._count(p, count, int(answer.base_offset))

    def _count(self, p: int, count: int, base: int) -> None:
        stats = self.result.partitions.setdefault(p, [0, base, base])
        stats[0] += count
        if base >= 0:
            stats[1] = base if stats[1] < 0 else min(stats[1], base)
            stats[2] = max(stats[2], base + count - 1)
        if self.on_acked is not None:
            self.on_acked(count)

    def _target(self) -> int:
        if self.partition is not None:
            return self.partition
        p = self.next_partition
        self.next_partition = (p + 1) % self.count
        return p

    def send_stream(self, stream: BinaryIO) -> None:
        """Every line of `stream` (a trailing line without a newline too) as a record."""
        if self.key_separator is not None and self.partition is None:
            self._send_keyed(stream)
            return
        data, pos, eof = b"", 0, False
        while self.result.error is None:
            if not eof and len(data) - pos < codec.BATCH_BYTES:
                chunk, eof = read_available(stream, codec.BATCH_BYTES)
                data = data[pos:] + chunk
                pos = 0
            if pos >= len(data) and eof:
                return
            try:
                section, count, pos = codec.encode_lines(
                    data, pos, eof, self.key_separator, self.headers,
                    codec.BATCH_RECORDS, codec.BATCH_BYTES,
                )  # fmt: skip
            except ValueError as exc:
                line_at = exc.args[1]
                line = data[line_at : data.find(b"\n", line_at) % (len(data) + 1)]
                raise self._stopped(f"no key separator in line {line[:80]!r}") from None
            if count:
                self._send(self._target(), section, count)
            elif eof:
                return

    def _send_keyed(self, stream: BinaryIO) -> None:
        """Keyed lines, each to its key's partition: grouped per partition, a batch sent
        when it fills and the rest at the end."""
        assert self.key_separator is not None
        sep = self.key_separator
        pending: dict[int, list[tuple[bytes | None, bytes | None]]] = {}
        sizes: dict[int, int] = {}
        for line in input_lines(stream):
            key, found, value = line.partition(sep)
            if not found:
                raise self._stopped(f"no key separator in line {line[:80]!r}")
            p = partition_for(key, self.count, 0)
            pending.setdefault(p, []).append((key, value))
            sizes[p] = sizes.get(p, 0) + len(line) + 8
            if sizes[p] >= codec.BATCH_BYTES or len(pending[p]) >= codec.BATCH_RECORDS:
                self._send_pairs(p, pending.pop(p))
                sizes[p] = 0
            if self.result.error is not None:
                return
        for p, pairs in pending.items():
            self._send_pairs(p, pairs)

    def _send_pairs(self, p: int, pairs: list[tuple[bytes | None, bytes | None]]) -> None:
        self._send(p, codec.encode_pairs(pairs, self.headers), len(pairs))

    def _stopped(self, reason: str) -> ClientError:
        self.finish()
        return ClientError(f"{reason}; {self.describe_done()}")

    # -- finishing --------------------------------------------------------------------------

    def finish(self) -> Result:
        """Read every answer still due; with acks=0, wait until each leader has read
        everything sent to it (it closes the connection once it reads our end of it)."""
        for leader in {id(v): v for v in self.leaders.values()}.values():
            try:
                while leader.in_flight:
                    self._receive(leader)
            except ClientError as exc:
                if self.result.error is None:
                    self.result.error = str(exc)
                leader.in_flight.clear()
            if self.acks == 0:
                leader.connection.drained()
        return self.result

    def describe_done(self) -> str:
        r = self.result
        if r.acks == 0:
            return f"{r.sent} records sent (acks=0: not acknowledged)"
        return f"{r.acknowledged} records acknowledged"
