"""Fetch request decoding, by hand for versions 4-18 (v0-3: protocol.legacy_messages).

Consumers send Fetch all the time and followers every round, so the decoder reads the
body once, straight into the fields the handler reads, as produce_request.py does for
Produce, without kio's entities or the generic length walk in front of them. The
classes carry every field of `requests.FetchRequest` (with Kafka's default where the
version lacks the field) and with kio's types, so the handler reads a decoded request
of any version alike.

Every length and count is checked against the bytes that remain before anything is
built, the elements of all arrays together are bounded as request_walk.check_lengths bounds
them, and a null where the schema forbids one is refused: MalformedRequest, which closes
the connection. Tagged fields of tags the version does not define are skipped, as
Kafka's generated readers skip them; a known one must fill exactly its size.
"""

from __future__ import annotations

import datetime
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kbroker.protocol.errors import MalformedRequest
from kbroker.protocol.varint import read_uvarint

if TYPE_CHECKING:
    from kbroker.protocol import requests

FIRST_VERSION = 4  # v0-3 are read by protocol.legacy_messages
FIRST_LOG_START_OFFSET = 5
FIRST_SESSION = 7  # session id and epoch, forgotten topics (KIP-227)
FIRST_CURRENT_LEADER_EPOCH = 9
FIRST_RACK_ID = 11
FIRST_FLEXIBLE = 12  # compact lengths, tagged fields; cluster_id (tag 0), last_fetched_epoch
FIRST_TOPIC_ID = 13
FIRST_REPLICA_STATE = 15  # replica_id moves into tag 1 (KIP-903)
FIRST_REPLICA_DIRECTORY_ID = 17  # partition tag 0
FIRST_HIGH_WATERMARK = 18  # partition tag 1
LAST_VERSION = 18  # the schema read here; a newer version needs reading it first

NO_HIGH_WATERMARK = 9223372036854775807  # Kafka's default: the follower does not send it


@dataclass(slots=True)
class FetchPartition:
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int
    last_fetched_epoch: int
    log_start_offset: int
    replica_directory_id: uuid.UUID | None
    high_watermark: int


@dataclass(slots=True)
class FetchTopic:
    topic: str  # "" from v13, which names topics by id alone
    topic_id: uuid.UUID | None  # None before v13, and for the zero id
    partitions: tuple[FetchPartition, ...]


@dataclass(slots=True)
class ForgottenTopic:
    topic: str
    topic_id: uuid.UUID | None
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ReplicaState:
    replica_id: int
    replica_epoch: int


NO_REPLICA_STATE = ReplicaState(-1, -1)


@dataclass(slots=True)
class FetchRequest:
    replica_id: int  # -1 from v15, where replica_state names the follower
    max_wait: datetime.timedelta
    min_bytes: int
    max_bytes: int
    isolation_level: int
    session_id: int
    session_epoch: int
    topics: tuple[FetchTopic, ...]
    forgotten_topics_data: tuple[ForgottenTopic, ...]
    rack_id: str
    cluster_id: str | None
    replica_state: ReplicaState


if TYPE_CHECKING:  # what the handler reads: every field of every version, typed alike

    def _reads_as(request: FetchRequest) -> requests.FetchRequest:
        return request


# The fixed-size head of the body, per version range: (replica_id,) max_wait, min_bytes,
# max_bytes, isolation_level (, session_id, session_epoch).
_HEAD_V4 = struct.Struct(">iiiib")
_HEAD_V7 = struct.Struct(">iiiibii")
_HEAD_V15 = struct.Struct(">iiibii")
# A partition's fixed-size fields, per version range.
_PARTITION_V4 = struct.Struct(">iqi")  # partition, fetch_offset, partition_max_bytes
_PARTITION_V5 = struct.Struct(">iqqi")  # + log_start_offset
_PARTITION_V9 = struct.Struct(">iiqqi")  # + current_leader_epoch
_PARTITION_V12 = struct.Struct(">iiqiqiB")  # + last_fetched_epoch; the tagged-field count


def _layout(version: int) -> tuple[struct.Struct, int, int]:
    """The head's layout; a partition's bytes (at least, in flexible versions: its tagged
    fields may add some); a topic's least bytes (its id or name's length, its partitions'
    count, its tagged fields)."""
    if version >= FIRST_REPLICA_STATE:
        head = _HEAD_V15
    elif version >= FIRST_SESSION:
        head = _HEAD_V7
    else:
        head = _HEAD_V4
    if version >= FIRST_FLEXIBLE:
        partition = _PARTITION_V12
    elif version >= FIRST_CURRENT_LEADER_EPOCH:
        partition = _PARTITION_V9
    elif version >= FIRST_LOG_START_OFFSET:
        partition = _PARTITION_V5
    else:
        partition = _PARTITION_V4
    topic = 2 + 4
    if version >= FIRST_FLEXIBLE:
        topic = (16 if version >= FIRST_TOPIC_ID else 1) + 1 + 1
    return head, partition.size, topic


_LAYOUTS = {version: _layout(version) for version in range(FIRST_VERSION, LAST_VERSION + 1)}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_UUID = struct.Struct(">QQ")
_REPLICA_STATE = struct.Struct(">iq")

# max_wait as kio reads it, a timedelta; a fetcher sends the same one in every request,
# and looking it up costs a tenth of building it.
_WAITS: dict[int, datetime.timedelta] = {}
_WAITS_KEPT = 256


def _wait(ms: int) -> datetime.timedelta:
    found = _WAITS.get(ms)
    if found is None:
        if len(_WAITS) >= _WAITS_KEPT:
            _WAITS.clear()
        found = _WAITS[ms] = datetime.timedelta(milliseconds=ms)
    return found


# Topic (and directory) ids as UUIDs, by their 128-bit value: a fetcher names the same few
# topics in every request, and building a UUID costs more than the rest of its topic's
# decoding.
_UUIDS: dict[int, uuid.UUID] = {}
_UUIDS_KEPT = 4096


def _uuid(high: int, low: int) -> uuid.UUID | None:
    value = high << 64 | low
    found = _UUIDS.get(value)
    if found is None:
        if not value:
            return None  # Kafka's ZERO_UUID, "no topic id", as kio reads it
        if len(_UUIDS) >= _UUIDS_KEPT:
            _UUIDS.clear()
        found = _UUIDS[value] = uuid.UUID(int=value)
    return found


def _null_in(name: str) -> MalformedRequest:
    return MalformedRequest(f"non-nullable field {name} was serialized as null")


def _too_many(count: int, left: int) -> MalformedRequest:
    # "array of N elements" as request_walk.check_lengths words it.
    return MalformedRequest(f"array of {count} elements in the {left} bytes left of the request")


def _over_budget(max_elements: int) -> MalformedRequest:
    return MalformedRequest(f"more than {max_elements} array elements in one request")


def decode_fetch_request(
    version: int, buf: bytes | memoryview, offset: int, max_elements: int = 1_000_000
) -> FetchRequest:
    """Decode a Fetch body of version 4 or above; at most `max_elements` topics,
    partitions and forgotten partitions in all. The walk is decode_fetch_request_py's,
    in C where the extension is built (about 2 us for a consumer's one-partition
    request, against 5-7 us in Python)."""
    return _decode_body(version, buf, offset, max_elements)


def decode_fetch_request_py(
    version: int, buf: bytes | memoryview, offset: int, max_elements: int = 1_000_000
) -> FetchRequest:
    """decode_fetch_request in Python: the reference the C walk follows."""
    try:
        return _decode(version, buf, offset, max_elements)
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise MalformedRequest(f"fetch request ends inside a field ({exc})") from None


def _decode(version: int, buf: bytes | memoryview, pos: int, max_elements: int) -> FetchRequest:
    if not isinstance(buf, bytes):
        # A copy of the body (tens of bytes for a consumer, a few per partition for a
        # follower) is cheaper than the view that slicing a memoryview makes per name.
        buf = bytes(buf[pos:])
        pos = 0
    end = len(buf)
    flexible = version >= FIRST_FLEXIBLE
    by_id = version >= FIRST_TOPIC_ID
    budget = max_elements

    head, partition_size, topic_size = _LAYOUTS[version]
    if version >= FIRST_REPLICA_STATE:
        max_wait, min_bytes, max_bytes, isolation, session_id, session_epoch = head.unpack_from(
            buf, pos
        )
        replica_id = -1
    elif version >= FIRST_SESSION:
        (replica_id, max_wait, min_bytes, max_bytes, isolation, session_id, session_epoch) = (
            head.unpack_from(buf, pos)
        )
    else:
        replica_id, max_wait, min_bytes, max_bytes, isolation = head.unpack_from(buf, pos)
        session_id, session_epoch = 0, -1
    pos += head.size
    with_directory_id = version >= FIRST_REPLICA_DIRECTORY_ID
    with_high_watermark = version >= FIRST_HIGH_WATERMARK

    # -- topics
    count, pos = _count(buf, pos, flexible)
    budget = _within(count, topic_size, end - pos, budget, max_elements, "FetchRequest.topics")
    topics: list[FetchTopic] = []
    for _ in range(count):
        name, topic_id, pos = _topic(buf, pos, end, by_id, flexible, "FetchTopic.topic")
        count, pos = _count(buf, pos, flexible)
        budget = _within(
            count, partition_size, end - pos, budget, max_elements, "FetchTopic.partitions"
        )
        if flexible:
            partitions = []
            for _ in range(count):
                partition, leader_epoch, fetch_offset, fetched_epoch, log_start, most, tagged = (
                    _PARTITION_V12.unpack_from(buf, pos)
                )
                pos += 33
                directory_id = None
                high_watermark = NO_HIGH_WATERMARK
                if tagged:
                    tags, pos = _tags(buf, pos - 1, end)
                    for tag, start, size in tags:
                        if tag == 0 and with_directory_id:
                            if size != 16:
                                raise _unfilled(tag, size)
                            directory_id = _uuid(*_UUID.unpack_from(buf, start))
                        elif tag == 1 and with_high_watermark:
                            if size != 8:
                                raise _unfilled(tag, size)
                            (high_watermark,) = _I64.unpack_from(buf, start)
                partitions.append(
                    FetchPartition(
                        partition,
                        fetch_offset,
                        most,
                        leader_epoch,
                        fetched_epoch,
                        log_start,
                        directory_id,
                        high_watermark,
                    )
                )
        else:  # fixed-size partitions, one after the other
            chunk = buf[pos : pos + count * partition_size]
            pos += count * partition_size
            if version >= FIRST_CURRENT_LEADER_EPOCH:
                partitions = [
                    FetchPartition(p, offset, most, epoch, -1, log_start, None, NO_HIGH_WATERMARK)
                    for p, epoch, offset, log_start, most in _PARTITION_V9.iter_unpack(chunk)
                ]
            elif version >= FIRST_LOG_START_OFFSET:
                partitions = [
                    FetchPartition(p, offset, most, -1, -1, log_start, None, NO_HIGH_WATERMARK)
                    for p, offset, log_start, most in _PARTITION_V5.iter_unpack(chunk)
                ]
            else:
                partitions = [
                    FetchPartition(p, offset, most, -1, -1, -1, None, NO_HIGH_WATERMARK)
                    for p, offset, most in _PARTITION_V4.iter_unpack(chunk)
                ]
        topics.append(FetchTopic(name, topic_id, tuple(partitions)))
        if flexible:
            pos = _skip_tags(buf, pos, end)

    # -- forgotten topics
    forgotten: list[ForgottenTopic] = []
    if version >= FIRST_SESSION:
        count, pos = _count(buf, pos, flexible)
        budget = _within(
            count, topic_size, end - pos, budget, max_elements, "FetchRequest.forgotten_topics_data"
        )
        for _ in range(count):
            name, topic_id, pos = _topic(buf, pos, end, by_id, flexible, "ForgottenTopic.topic")
            count, pos = _count(buf, pos, flexible)
            budget = _within(count, 4, end - pos, budget, max_elements, "ForgottenTopic.partitions")
            indexes = struct.unpack_from(f">{count}i", buf, pos)
            pos += 4 * count
            forgotten.append(ForgottenTopic(name, topic_id, indexes))
            if flexible:
                pos = _skip_tags(buf, pos, end)

    rack_id = ""
    if version >= FIRST_RACK_ID:
        rack, pos = _string(buf, pos, end, flexible, "FetchRequest.rack_id")
        if rack is None:
            raise _null_in("FetchRequest.rack_id")
        rack_id = rack

    # -- the request's tagged fields
    cluster_id = None
    replica_state = NO_REPLICA_STATE
    if flexible and buf[pos] != 0:
        for tag, start, size in _tags(buf, pos, end)[0]:
            if tag == 0:
                cluster_id, stop = _string(buf, start, end, True, "FetchRequest.cluster_id")
            elif tag == 1 and version >= FIRST_REPLICA_STATE:
                if start + 12 > end:
                    raise MalformedRequest("fetch request ends inside its replica state")
                replica_state = ReplicaState(*_REPLICA_STATE.unpack_from(buf, start))
                stop = _skip_tags(buf, start + 12, end)
            else:
                stop = start + size
            if stop != start + size:
                raise _unfilled(tag, size)

    return FetchRequest(
        replica_id,
        _wait(max_wait),
        min_bytes,
        max_bytes,
        isolation,
        session_id,
        session_epoch,
        tuple(topics),
        tuple(forgotten),
        rack_id,
        cluster_id,
        replica_state,
    )


def _count(buf: bytes | memoryview, pos: int, flexible: bool) -> tuple[int, int]:
    """An array's element count (-1: null) and the position after it."""
    if flexible:
        count = buf[pos]
        if count < 0x80:
            return count - 1, pos + 1
        count, pos = read_uvarint(buf, pos)
        return count - 1, pos
    return _I32.unpack_from(buf, pos)[0], pos + 4


def _within(count: int, least: int, left: int, budget: int, max_elements: int, name: str) -> int:
    """Check an array's count before anything is built: not null, no more elements of at
    least `least` bytes than the `left` bytes hold, within the request's element budget;
    the budget that remains."""
    if count < 0:
        raise _null_in(name)
    if count * least > left:
        raise _too_many(count, left)
    budget -= count
    if budget < 0:
        raise _over_budget(max_elements)
    return budget


def _topic(
    buf: bytes | memoryview, pos: int, end: int, by_id: bool, flexible: bool, field: str
) -> tuple[str, uuid.UUID | None, int]:
    """A topic as a request names it: by id from v13 (its name ""), else by a name that
    may not be null; and the position after it."""
    if by_id:
        if pos + 16 > end:
            raise MalformedRequest("fetch request ends inside a topic id")
        return "", _uuid(*_UUID.unpack_from(buf, pos)), pos + 16
    name, pos = _string(buf, pos, end, flexible, field)
    if name is None:
        raise _null_in(field)
    return name, None, pos


def _string(
    buf: bytes | memoryview, pos: int, end: int, flexible: bool, name: str
) -> tuple[str | None, int]:
    """A string (None for a null) and the position after it."""
    if flexible:
        size, pos = read_uvarint(buf, pos)
        size -= 1
    else:
        (size,) = _I16.unpack_from(buf, pos)
        pos += 2
    if size < 0:
        return None, pos
    if pos + size > end:
        raise MalformedRequest(f"{name} of {size} bytes in {end - pos}")
    return str(buf[pos : pos + size], "utf-8"), pos + size


def _tags(buf: bytes | memoryview, pos: int, end: int) -> tuple[list[tuple[int, int, int]], int]:
    """The (tag, start, size) of each field of the tagged-field section at `pos`, every
    size checked against the bytes left, and the position after the section."""
    count, pos = read_uvarint(buf, pos)
    if count * 2 > end - pos:
        raise MalformedRequest(f"{count} tagged fields in {end - pos} bytes")
    found = []
    for _ in range(count):
        tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        if pos + size > end:
            raise MalformedRequest("tagged fields run past the end of the request")
        found.append((tag, pos, size))
        pos += size
    return found, pos


def _skip_tags(buf: bytes | memoryview, pos: int, end: int) -> int:
    """The position after the tagged-field section at `pos` (none of its tags known)."""
    if buf[pos] == 0:
        return pos + 1
    return _tags(buf, pos, end)[1]


def _unfilled(tag: int, size: int) -> MalformedRequest:
    return MalformedRequest(f"tagged field {tag} does not fill its {size} bytes")


_decode_body: Callable[[int, bytes | memoryview, int, int], FetchRequest]
try:
    from kbroker.protocol import _requestread
except ImportError:  # the extension is not built: the same walk, in Python
    _decode_body = decode_fetch_request_py
else:
    _requestread.bind_fetch(
        FetchPartition,
        FetchTopic,
        ForgottenTopic,
        ReplicaState,
        FetchRequest,
        MalformedRequest,
        NO_REPLICA_STATE,
        _wait,
        _uuid,
        NO_HIGH_WATERMARK,
    )
    _decode_body = _requestread.decode_fetch
