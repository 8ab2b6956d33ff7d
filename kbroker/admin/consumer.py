"""`kbroker consume`: records of a topic, read as fast as the broker serves them.

Each leader gets one Fetch for all the partitions it leads; as soon as its answer comes,
the next Fetch is sent (its offsets read from the batch headers alone) and only then are
the records read, so the broker reads the log while the command prints. Where to start
is `--from`, as kcat's `-o` and rpk's `--offset` take it: `beginning`, `end`, an offset,
`-N` (N records before the end), or a time (`@MILLIS` or an ISO-8601 date, the first
record at or after it).
"""

from __future__ import annotations

import datetime
import queue
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from kbroker.admin.client import BrokerConnection, ClientError, Cluster
from kbroker.admin.topics import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    error_of,
    list_offsets,
    metadata,
)
from kbroker.protocol import record_codec as codec

FETCH = 1
FETCH_MAX_BYTES = 64 << 20
PARTITION_MAX_BYTES = 1 << 20
MAX_WAIT_MS = 500
AHEAD = 4  # answers the fetching thread may hold before the printing one takes them
ROUND_S = 0.2  # how often a waiting printer runs on_round (a group member's heartbeat)


@dataclass(frozen=True, slots=True)
class Start:
    """Where to start: kind is beginning, end, offset, tail (N before the end) or time."""

    kind: str
    value: int = 0


def parse_from(text: str) -> Start:
    """`beginning`, `end`, OFFSET, -N, @MILLIS or an ISO-8601 time."""
    text = text.strip()
    if text in ("beginning", "earliest", "start", "oldest"):
        return Start("beginning")
    if text in ("end", "latest", "newest"):
        return Start("end")
    try:
        number = int(text)
    except ValueError:
        pass
    else:
        return Start("tail", -number) if text.startswith("-") else Start("offset", number)
    if text.startswith("@"):
        try:
            return Start("time", int(text[1:]))
        except ValueError:
            pass
    try:
        when = datetime.datetime.fromisoformat(text.lstrip("@"))
    except ValueError:
        raise ClientError(
            f"bad --from {text!r}: expected beginning, end, OFFSET, -N, @MILLIS or an ISO-8601 time"
        ) from None
    if when.tzinfo is None:
        when = when.astimezone()
    return Start("time", int(when.timestamp() * 1000))


def start_positions(
    cluster: Cluster, topic: str, partitions: list[int], start: Start
) -> dict[int, int]:
    tps = [(topic, p) for p in partitions]
    if start.kind == "offset":
        return dict.fromkeys(partitions, start.value)
    if start.kind == "beginning":
        found = list_offsets(cluster, tps, EARLIEST_TIMESTAMP)
    elif start.kind == "time":
        found = list_offsets(cluster, tps, start.value)
    else:
        found = list_offsets(cluster, tps, LATEST_TIMESTAMP)
        if start.kind == "tail":
            first = list_offsets(cluster, tps, EARLIEST_TIMESTAMP)
            found = {tp: max(first[tp], o - start.value) for tp, o in found.items()}
    return {p: o for (_, p), o in found.items()}


@dataclass
class _Leader:
    connection: BrokerConnection
    partitions: list[int]
    in_flight: tuple[int, int, int] | None = None
    asked: dict[int, int] = field(default_factory=dict)


class Fetcher:
    """Batches of the chosen partitions from their positions on, a Fetch ahead."""

    def __init__(
        self,
        cluster: Cluster,
        topic: str,
        positions: dict[int, int],
        *,
        isolation_level: int = 0,
        exit_at_end: bool = False,
        idle_timeout_s: float | None = None,
    ) -> None:
        self.cluster, self.topic = cluster, topic
        self.positions = dict(positions)
        self.isolation_level = isolation_level
        self.exit_at_end = exit_at_end
        self.idle_timeout_s = idle_timeout_s
        self.done: set[int] = set()
        # Called after each round of answers: True stops the reading (a group member
        # whose assignment changed).
        self.on_round: Callable[[], bool] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        md = metadata(cluster, [topic])
        self.leaders: dict[tuple[str, int], _Leader] = {}
        for p in positions:
            address = md.leader_address((topic, p))
            if address is None:
                raise ClientError(f"no leader for {topic}-{p}")
            if address not in self.leaders:
                self.leaders[address] = _Leader(cluster.connection(*address), [])
            self.leaders[address].partitions.append(p)

    def _ask(self, leader: _Leader) -> None:
        wanted = [p for p in leader.partitions if p not in self.done]
        if not wanted:
            leader.in_flight = None
            return
        leader.asked = {p: self.positions[p] for p in wanted}
        body = fetch_v4(self.topic, leader.asked, self.isolation_level)
        leader.in_flight = (
            FETCH,
            FETCH_VERSION,
            leader.connection.send_raw(FETCH, FETCH_VERSION, body),
        )

    def batches(self) -> Iterator[tuple[int, codec.Section, int]]:
        """(partition, section, first offset delta to show) until every partition is
        at its end (`exit_at_end`) or nothing new has come for `idle_timeout_s`.

        The fetching runs in a thread of its own, a few answers ahead of the caller, so
        the broker reads the next records while this thread prints the last ones (the
        socket waits release the interpreter); `on_round` runs in the caller's thread."""
        if self.exit_at_end:
            ends = start_positions(
                self.cluster, self.topic, list(self.positions), Start("end")
            )  # a partition already at its end needs no fetch
            self.done = {p for p, o in self.positions.items() if o >= ends[p]}
        self._stop = threading.Event()
        answers: queue.Queue[Any] = queue.Queue(maxsize=AHEAD)
        self._thread = threading.Thread(
            target=self._fetch_loop, args=(answers,), name="fetcher", daemon=True
        )
        self._thread.start()
        try:
            while True:
                try:
                    item = answers.get(timeout=ROUND_S)
                except queue.Empty:
                    if self.on_round is not None and self.on_round():
                        return
                    continue
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                p, data, aborted, start = item
                for section in codec.sections(data, aborted):
                    if section.next > start:
                        yield p, section, max(0, start - section.base_offset)
                if self.on_round is not None and self.on_round():
                    return
        finally:
            self._stop.set()

    def _fetch_loop(self, answers: queue.Queue[Any]) -> None:
        """The fetching thread: each leader's next Fetch is sent as soon as its last
        answer is in; the answers' records go to `answers`, then None (or the error)."""
        try:
            for leader in self.leaders.values():
                self._ask(leader)
            idle_since = time.monotonic()
            while any(leader.in_flight for leader in self.leaders.values()):
                got_any = False
                for leader in self.leaders.values():
                    if leader.in_flight is None:
                        continue
                    frame = leader.connection.receive_raw(leader.in_flight[2])
                    leader.in_flight = None
                    ready = [self._advance(answer) for answer in parse_fetch_v4(frame)]
                    got_any = got_any or any(data for _, data, _ in ready)
                    asked = leader.asked
                    if self._stop.is_set():
                        return
                    self._ask(leader)
                    for p, data, aborted in ready:
                        if data:
                            self._put(answers, (p, data, aborted, asked[p]))
                if got_any:
                    idle_since = time.monotonic()
                elif (
                    self.idle_timeout_s is not None
                    and time.monotonic() - idle_since >= self.idle_timeout_s
                ):
                    break
            self._put(answers, None)
        except BaseException as exc:  # handed to the caller's thread, raised there
            self._put(answers, exc)

    def _put(self, answers: queue.Queue[Any], item: Any) -> None:
        while not self._stop.is_set():
            try:
                answers.put(item, timeout=ROUND_S)
                return
            except queue.Full:
                continue

    def close(self) -> None:
        """Stop the fetching thread and read the answers still due, so the connections
        can carry other requests."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        for leader in self.leaders.values():
            if leader.in_flight is not None:
                leader.connection.receive_raw(leader.in_flight[2])
                leader.in_flight = None

    def _advance(self, answer: FetchedPartition) -> tuple[int, bytes, list[tuple[int, int]]]:
        p = answer.partition
        error = error_of(answer.error_code)
        if error != ErrorCode.none:
            raise ClientError(f"fetching {self.topic}-{p}: {error.name.upper()}")
        after = codec.last_offset_after(answer.records)
        if after is not None:
            self.positions[p] = max(self.positions[p], after)
        end = answer.high_watermark
        if self.isolation_level == 1 and answer.last_stable_offset >= 0:
            end = answer.last_stable_offset
        if self.exit_at_end and self.positions[p] >= end:
            self.done.add(p)
        return p, answer.records, answer.aborted


# -- Fetch v4, framed here ------------------------------------------------------------------
# The one request `consume` repeats, built and read with struct rather than through the
# protocol's schemas (whose load and per-answer decoding cost a console consumer more
# than its records do). v4 is the oldest Fetch Kafka 4 serves and has all a console
# consumer needs: isolation levels, last stable offsets and aborted transactions.

FETCH_VERSION = 4
_FETCH_HEAD = struct.Struct(">iiiib")  # replica id, max wait, min bytes, max bytes, isolation
_PARTITION = struct.Struct(">iqi")  # partition, fetch offset, partition max bytes
_ANSWER = struct.Struct(">ihqq")  # partition, error, high watermark, last stable offset
_ABORTED = struct.Struct(">qq")  # producer id, first offset
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def fetch_v4(topic: str, positions: dict[int, int], isolation_level: int) -> bytes:
    name = topic.encode()
    out = bytearray(_FETCH_HEAD.pack(-1, MAX_WAIT_MS, 1, FETCH_MAX_BYTES, isolation_level))
    out += _I32.pack(1) + _I16.pack(len(name)) + name + _I32.pack(len(positions))
    for p, offset in positions.items():
        out += _PARTITION.pack(p, offset, PARTITION_MAX_BYTES)
    return bytes(out)


@dataclass(frozen=True, slots=True)
class FetchedPartition:
    partition: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    aborted: list[tuple[int, int]]
    records: bytes


def parse_fetch_v4(body: bytes) -> list[FetchedPartition]:
    """The partitions of a Fetch v4 answer (the body after the correlation id)."""
    try:
        pos = 4  # throttle time
        (topics,) = _I32.unpack_from(body, pos)
        pos += 4
        found = []
        for _ in range(topics):
            (n,) = _I16.unpack_from(body, pos)
            pos += 2 + n
            (partitions,) = _I32.unpack_from(body, pos)
            pos += 4
            for _ in range(partitions):
                p, error, hw, lso = _ANSWER.unpack_from(body, pos)
                pos += _ANSWER.size
                (count,) = _I32.unpack_from(body, pos)
                pos += 4
                aborted = []
                for _ in range(max(count, 0)):
                    aborted.append(_ABORTED.unpack_from(body, pos))
                    pos += _ABORTED.size
                (size,) = _I32.unpack_from(body, pos)
                pos += 4
                records = body[pos : pos + max(size, 0)]
                if len(records) < size:
                    raise ValueError("records past the end")
                pos += max(size, 0)
                found.append(FetchedPartition(p, error, hw, lso, aborted, records))
        return found
    except (struct.error, ValueError) as exc:
        raise ClientError(f"a Fetch answer this client cannot read: {exc}") from None


# -- printing -------------------------------------------------------------------------------

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "0": "\0"}


def compile_format(fmt: str) -> list[tuple[str, str]]:
    """kcat's -f: %t topic, %p partition, %o offset, %k key, %K key length, %s value,
    %S value length, %T timestamp (ms), %h headers (k=v,...), %% a percent sign;
    \\n \\t \\r \\\\ escapes. As (kind, text) parts: ("lit", text) or ("field", letter)."""
    parts: list[tuple[str, str]] = []
    literal: list[str] = []
    i = 0
    while i < len(fmt):
        c = fmt[i]
        if c == "%" and i + 1 < len(fmt):
            letter = fmt[i + 1]
            if letter == "%":
                literal.append("%")
            elif letter in "tpokKsSTh":
                if literal:
                    parts.append(("lit", "".join(literal)))
                    literal = []
                parts.append(("field", letter))
            else:
                raise ClientError(f"unknown placeholder %{letter} in --format")
            i += 2
        elif c == "\\" and i + 1 < len(fmt) and fmt[i + 1] in _ESCAPES:
            literal.append(_ESCAPES[fmt[i + 1]])
            i += 2
        else:
            literal.append(c)
            i += 1
    if literal:
        parts.append(("lit", "".join(literal)))
    return parts


def format_record(
    parts: list[tuple[str, str]],
    topic: str,
    partition: int,
    offset: int,
    timestamp: int,
    key: bytes | None,
    value: bytes | None,
    headers: tuple[tuple[bytes, bytes | None], ...],
) -> bytes:
    out = bytearray()
    for kind, text in parts:
        if kind == "lit":
            out += text.encode()
        elif text == "t":
            out += topic.encode()
        elif text == "p":
            out += str(partition).encode()
        elif text == "o":
            out += str(offset).encode()
        elif text == "T":
            out += str(timestamp).encode()
        elif text == "k":
            out += key or b""
        elif text == "K":
            out += str(-1 if key is None else len(key)).encode()
        elif text == "s":
            out += value or b""
        elif text == "S":
            out += str(-1 if value is None else len(value)).encode()
        elif text == "h":
            out += b",".join(k + b"=" + (v or b"") for k, v in headers)
    return bytes(out)
