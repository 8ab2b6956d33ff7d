"""The hand-written Fetch decoder reads what kio reads, for every version it serves, and
refuses what is malformed with MalformedRequest alone.

The reference is the way every other request is decoded: request_walk.check_lengths, the
edits that take out unknown tagged fields, then kio's reader. Requests come from kio's
writer (messages.build, as the replica fetcher and the admin client build theirs) and
from `encoded` below, which writes any field, any tagged field (unknown ones too) and
any count, true or lying.

Every test runs twice: through the C walk the broker uses and through
decode_fetch_request_py, the Python it follows (test_fetch_request_walks.py checks that
the two agree on cut and flipped bytes).
"""

from __future__ import annotations

import dataclasses
import datetime
import struct
import time
import typing
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from test_header import uvarint

from kbroker.handlers.registry import APIS
from kbroker.protocol import (
    _requestread,
    entity_build,
    fetch_request_decode,
    messages,
    request_walk,
)
from kbroker.protocol.fetch_request import fetch_partition, in_session, sessionless_fetch
from kbroker.protocol.fetch_request_decode import decode_fetch_request, decode_fetch_request_py
from kbroker.protocol.header import MalformedRequest

FETCH = 1
VERSIONS = range(fetch_request_decode.FIRST_VERSION, APIS[FETCH].max_version + 1)
TOPIC_ID, OTHER_ID, DIRECTORY_ID = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
ZERO_ID = uuid.UUID(int=0)


@pytest.fixture(autouse=True, params=["c", "python"])
def walk(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """decode_fetch_request through the C walk, or through decode_fetch_request_py."""
    if request.param == "python":
        monkeypatch.setattr(fetch_request_decode, "_decode_body", decode_fetch_request_py)
    else:
        assert fetch_request_decode._decode_body is _requestread.decode_fetch
    return str(request.param)


def kio_decode(version: int, data: bytes) -> Any:
    """The request as decode_request read it before Fetch had its own decoder."""
    edits = request_walk.check_lengths(FETCH, version, data, 0)
    if edits:
        data = request_walk.edited(data, edits)
    messages.request_class(FETCH, version)  # the Kafka defaults of the fields it lacks
    value, _size = messages.request_reader(FETCH, version)(data, 0)
    return value


PARTITION_FIELDS = (
    "partition",
    "fetch_offset",
    "partition_max_bytes",
    "current_leader_epoch",
    "last_fetched_epoch",
    "log_start_offset",
    "replica_directory_id",
    "high_watermark",
)
REQUEST_FIELDS = (
    "replica_id",
    "max_wait",
    "min_bytes",
    "max_bytes",
    "isolation_level",
    "session_id",
    "session_epoch",
    "rack_id",
    "cluster_id",
)


def view(request: Any) -> Any:
    """Every field a handler reads, with its type: both decoders must agree on these."""

    def typed(value: Any) -> Any:
        return (type(value).__name__, value)

    return (
        [typed(getattr(request, name)) for name in REQUEST_FIELDS],
        typed(request.replica_state.replica_id),
        typed(request.replica_state.replica_epoch),
        type(request.topics).__name__,
        [
            (
                typed(t.topic),
                typed(t.topic_id),
                type(t.partitions).__name__,
                [[typed(getattr(p, name)) for name in PARTITION_FIELDS] for p in t.partitions],
            )
            for t in request.topics
        ],
        type(request.forgotten_topics_data).__name__,
        [
            (typed(t.topic), typed(t.topic_id), typed(t.partitions))
            for t in request.forgotten_topics_data
        ],
    )


def test_the_view_covers_every_field_of_every_served_version() -> None:
    names: set[str] = set()

    def gather(cls: type) -> None:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            names.add(f.name)
            nested, _ = entity_build.nested_entity(hints[f.name])
            if nested is not None:
                gather(nested)

    for version in VERSIONS:
        gather(messages.request_class(FETCH, version))
    for cls in (
        fetch_request_decode.FetchRequest,
        fetch_request_decode.FetchTopic,
        fetch_request_decode.FetchPartition,
        fetch_request_decode.ForgottenTopic,
        fetch_request_decode.ReplicaState,
    ):
        names |= {f.name for f in dataclasses.fields(cls)}
    read = {*PARTITION_FIELDS, *REQUEST_FIELDS, "replica_state", "replica_epoch", "topics"}
    read |= {"forgotten_topics_data", "topic", "topic_id", "partitions"}
    assert names <= read


# -- writing requests ------------------------------------------------------------------


@dataclasses.dataclass
class Shape:
    """What `encoded` writes, lies and extra tagged fields included."""

    topics: list[dict[str, Any]]
    forgotten: list[dict[str, Any]]
    replica_id: int = -1
    max_wait: int = 500
    min_bytes: int = 1
    max_bytes: int = 50 << 20
    isolation_level: int = 1
    session_id: int = 0
    session_epoch: int = -1
    rack_id: str | None = "rack-a"
    cluster_id: str | None = None
    replica_state: tuple[int, int] | None = None
    top_tags: list[tuple[int, bytes]] = dataclasses.field(default_factory=list)
    replica_state_tags: list[tuple[int, bytes]] = dataclasses.field(default_factory=list)
    topics_count: int | None = None  # a lie, in place of len(topics)
    forgotten_count: int | None = None


def _tags(fields: list[tuple[int, bytes]]) -> bytes:
    return uvarint(len(fields)) + b"".join(uvarint(t) + uvarint(len(v)) + v for t, v in fields)


def _string(text: str | None, flexible: bool) -> bytes:
    if text is None:
        return b"\x00" if flexible else struct.pack(">h", -1)
    data = text.encode()
    return (uvarint(len(data) + 1) if flexible else struct.pack(">h", len(data))) + data


def _count(n: int, flexible: bool) -> bytes:
    return uvarint(n + 1) if flexible else struct.pack(">i", n)


def encoded(version: int, shape: Shape) -> bytes:
    """A Fetch body of `version`, written field by field from Kafka's FetchRequest.json."""
    flexible = version >= 12
    out = bytearray()
    if version < 15:
        out += struct.pack(">i", shape.replica_id)
    out += struct.pack(">iiib", shape.max_wait, shape.min_bytes, shape.max_bytes, 0)
    out[-1] = shape.isolation_level & 0xFF
    if version >= 7:
        out += struct.pack(">ii", shape.session_id, shape.session_epoch)

    def topic_key(t: dict[str, Any]) -> bytes:
        if version >= 13:
            return (t.get("topic_id") or ZERO_ID).bytes
        return _string(t.get("topic"), flexible)

    count = len(shape.topics) if shape.topics_count is None else shape.topics_count
    out += _count(count, flexible)
    for t in shape.topics:
        out += topic_key(t)
        partitions = t["partitions"]
        out += _count(t.get("count", len(partitions)), flexible)
        for p in partitions:
            out += struct.pack(">i", p["partition"])
            if version >= 9:
                out += struct.pack(">i", p["current_leader_epoch"])
            out += struct.pack(">q", p["fetch_offset"])
            if version >= 12:
                out += struct.pack(">i", p["last_fetched_epoch"])
            if version >= 5:
                out += struct.pack(">q", p["log_start_offset"])
            out += struct.pack(">i", p["partition_max_bytes"])
            if flexible:
                out += _tags(p.get("tags", []))
        if flexible:
            out += _tags(t.get("tags", []))
    if version >= 7:
        count = len(shape.forgotten) if shape.forgotten_count is None else shape.forgotten_count
        out += _count(count, flexible)
        for t in shape.forgotten:
            out += topic_key(t)
            out += _count(t.get("count", len(t["partitions"])), flexible)
            out += b"".join(struct.pack(">i", p) for p in t["partitions"])
            if flexible:
                out += _tags(t.get("tags", []))
    if version >= 11:
        out += _string(shape.rack_id, flexible)
    if flexible:
        tags = []
        if shape.cluster_id is not None:
            tags.append((0, _string(shape.cluster_id, True)))
        if shape.replica_state is not None:
            state = struct.pack(">iq", *shape.replica_state) + _tags(shape.replica_state_tags)
            tags.append((1, state))
        out += _tags(sorted(tags + shape.top_tags))
    return bytes(out)


def partition(index: int, **tags: Any) -> dict[str, Any]:
    entry = fetch_partition(
        index,
        1000 + index,
        (1 << 20) + index,
        current_leader_epoch=5 + index,
        last_fetched_epoch=4 + index,
        log_start_offset=10 + index,
    )
    entry_tags = []
    if "directory_id" in tags:
        entry_tags.append((0, tags["directory_id"].bytes))
    if "high_watermark" in tags:
        entry_tags.append((1, struct.pack(">q", tags["high_watermark"])))
    entry_tags += tags.get("unknown", [])
    return {**entry, "tags": sorted(entry_tags)}


def varied() -> Shape:
    """Every field set, several topics and partitions, known and unknown tags at every
    level (tags a version does not define are unknown to it)."""
    return Shape(
        topics=[
            {
                "topic": "orders",
                "topic_id": TOPIC_ID,
                "partitions": [
                    partition(0, directory_id=DIRECTORY_ID, high_watermark=77),
                    partition(3, unknown=[(5, b"\x01\x02")]),
                    partition(7, high_watermark=-1),
                ],
                "tags": [(3, b"x")],
            },
            {"topic": "zählung", "topic_id": OTHER_ID, "partitions": [partition(1)]},
            {"topic": "", "topic_id": None, "partitions": []},
        ],
        forgotten=[
            {"topic": "gone", "topic_id": OTHER_ID, "partitions": [2, 4, 6], "tags": [(2, b"")]},
            {"topic": "none", "topic_id": TOPIC_ID, "partitions": []},
        ],
        replica_id=3,
        max_wait=-5,
        min_bytes=7,
        max_bytes=123456,
        isolation_level=1,
        session_id=99,
        session_epoch=12,
        rack_id="rack-ü",
        cluster_id="cluster-x",
        replica_state=(4, 2**40),
        top_tags=[(7, b"\xab\xcd"), (200, b"")],
        replica_state_tags=[(3, b"\xee")],
    )


# -- the decoders agree -----------------------------------------------------------------


def ours(version: int, data: bytes) -> Any:
    return messages.decode_request(FETCH, version, data, 0)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_field_and_tag_decodes_as_kio_decodes_it(version: int) -> None:
    data = encoded(version, varied())
    request = ours(version, data)
    assert isinstance(request, fetch_request_decode.FetchRequest)
    assert view(request) == view(kio_decode(version, data))
    # and what the request said, not merely what kio says
    assert request.max_wait == datetime.timedelta(milliseconds=-5)
    first = request.topics[0].partitions[0]
    assert (first.partition, first.fetch_offset, first.partition_max_bytes) == (0, 1000, 1 << 20)
    if version >= 13:
        assert [t.topic_id for t in request.topics] == [TOPIC_ID, OTHER_ID, None]
    else:
        assert [t.topic for t in request.topics] == ["orders", "zählung", ""]
    if version >= 7:
        assert [t.partitions for t in request.forgotten_topics_data] == [(2, 4, 6), ()]
    if version >= 15:
        assert (request.replica_id, request.replica_state.replica_epoch) == (-1, 2**40)
    if version >= 17:
        assert first.replica_directory_id == DIRECTORY_ID
    if version >= 18:
        assert [p.high_watermark for p in request.topics[0].partitions] == [77, 2**63 - 1, -1]


@pytest.mark.parametrize("version", VERSIONS)
def test_the_fewest_fields_decode_as_kio_decodes_them(version: int) -> None:
    data = encoded(version, Shape(topics=[], forgotten=[], rack_id=""))
    assert view(ours(version, data)) == view(kio_decode(version, data))


def _kio_built(version: int) -> list[bytes]:
    """Fetches as kbroker's own clients build them (messages.build of the fetch_request
    helpers): a consumer's, a follower's in a session, with forgotten topics."""
    cls = load_request_schema(FETCH, version)
    topics = [
        {
            "topic": "t1",
            "topic_id": TOPIC_ID,
            "partitions": [
                fetch_partition(0, 5, 1000),
                fetch_partition(2, 9, 10, log_start_offset=3),
            ],
        },
        {"topic": "t2", "topic_id": OTHER_ID, "partitions": [fetch_partition(1, 0, 1 << 20)]},
    ]
    consumer = sessionless_fetch(topics, max_wait=500, min_bytes=1, max_bytes=1 << 26)
    follower = in_session(
        sessionless_fetch(
            topics,
            max_wait=datetime.timedelta(milliseconds=250),
            min_bytes=1,
            max_bytes=1 << 20,
            isolation_level=0,
            replica_id=2,
            replica_state=version >= 15,
        ),
        7,
        3,
        [{"topic": "t3", "topic_id": OTHER_ID, "partitions": [0, 1]}],
    )
    follower["rack_id"] = "r2"
    follower["cluster_id"] = "kbroker-cluster"
    return [messages.encode(messages.build(cls, fields)) for fields in (consumer, follower)]


@pytest.mark.parametrize("version", VERSIONS)
def test_requests_kio_writes_decode_as_kio_decodes_them(version: int) -> None:
    for data in _kio_built(version):
        assert view(ours(version, data)) == view(kio_decode(version, data))


@pytest.mark.parametrize("version", VERSIONS)
def test_the_test_writer_writes_what_kio_writes(version: int) -> None:
    # `encoded` without unknown tags is byte for byte kio's encoding of the same request.
    shape = varied()
    shape.top_tags = shape.replica_state_tags = []
    if version < 15:
        shape.replica_state = None
    for t in shape.topics + shape.forgotten:
        t["tags"] = []
    for p in shape.topics[0]["partitions"]:
        p["tags"] = [(tag, v) for tag, v in p["tags"] if tag < 2 and version >= 17 + tag]
    data = encoded(version, shape)
    assert messages.encode(kio_decode(version, data)) == data


@pytest.mark.parametrize("version", VERSIONS)
def test_bytes_after_the_body_are_ignored(version: int) -> None:
    data = encoded(version, varied())
    assert view(ours(version, data + b"\x05\xff")) == view(ours(version, data))


def test_old_versions_stay_with_the_legacy_decoder() -> None:
    body = struct.pack(">iii", -1, 100, 1) + struct.pack(">i", 1) + _string("t", False)
    body += struct.pack(">i", 1) + struct.pack(">iqi", 0, 5, 100)
    request = messages.decode_request(FETCH, 0, body, 0)
    assert not isinstance(request, fetch_request_decode.FetchRequest)
    assert (request.topics[0].topic, request.topics[0].partitions[0].fetch_offset) == ("t", 5)


def test_fetch_is_flexible_from_v12() -> None:
    assert [messages.is_flexible(FETCH, v) for v in range(19)] == [v >= 12 for v in range(19)]


FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.mark.parametrize("version", [4, 7, 11, 12, 13, 15, 17, 18])
def test_mutated_requests_decode_alike_or_are_malformed(version: int) -> None:
    """A request with bytes overwritten, inserted or cut: MalformedRequest and no other
    exception, and whatever kio reads (after the length walk) this decoder reads alike."""
    valid = encoded(version, varied())

    @FUZZ
    @given(st.data())
    def mutated(data: st.DataObject) -> None:
        body = bytearray(valid)
        for _ in range(data.draw(st.integers(1, 3))):
            at = data.draw(st.integers(0, len(body)))
            patch = data.draw(st.binary(min_size=1, max_size=5))
            if data.draw(st.booleans()):
                body[at:at] = patch
            else:
                body[at : at + len(patch)] = patch
        try:
            mine = view(ours(version, bytes(body)))
        except MalformedRequest:
            mine = None
        try:
            theirs = view(kio_decode(version, bytes(body)))
        except Exception:
            theirs = None
        if theirs is not None:
            assert mine == theirs

    mutated()


# -- malformed requests -------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_truncation_at_every_byte_is_malformed(version: int) -> None:
    data = encoded(version, varied())
    for cut in range(len(data)):
        with pytest.raises(MalformedRequest):
            ours(version, data[:cut])


LIES = [2**31 - 1, 2**20, 4, -2, -(2**31)]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("lie", LIES)
def test_lying_array_counts_are_malformed(version: int, lie: int) -> None:
    flexible = version >= 12
    if flexible and lie < 0:
        lie = 2**32 - 1 + lie  # a varint's 32 bits: the count Kafka reads as negative
    for where in ("topics", "partitions", "forgotten", "forgotten partitions"):
        shape = varied()
        if where == "topics":
            shape.topics_count = lie
        elif where == "partitions":
            shape.topics[1]["count"] = lie
        elif version < 7:
            continue
        elif where == "forgotten":
            shape.forgotten_count = lie
        else:
            shape.forgotten[0]["count"] = lie
        with pytest.raises(MalformedRequest):
            ours(version, encoded(version, shape))


@pytest.mark.parametrize("version", VERSIONS)
def test_a_count_beyond_the_bytes_is_refused_before_anything_is_built(version: int) -> None:
    shape = varied()
    shape.topics_count = 2**31 - 2
    with pytest.raises(MalformedRequest, match=f"array of {2**31 - 2} elements"):
        ours(version, encoded(version, shape))


@pytest.mark.parametrize("version", VERSIONS)
def test_null_where_the_schema_forbids_it_is_malformed(version: int) -> None:
    nulls = {"topics": -1, "partitions": -1, "topic name": None, "rack_id": None}
    if version >= 7:
        nulls |= {"forgotten": -1, "forgotten partitions": -1, "forgotten name": None}
    for where in nulls:
        shape = varied()
        if where == "topics":
            shape.topics_count = -1
        elif where == "partitions":
            shape.topics[0]["count"] = -1
        elif where == "topic name":
            if version >= 13:
                continue
            shape.topics[1]["topic"] = None
        elif where == "rack_id":
            if version < 11:
                continue
            shape.rack_id = None
        elif where == "forgotten":
            shape.forgotten_count = -1
        elif where == "forgotten partitions":
            shape.forgotten[1]["count"] = -1
        else:
            if version >= 13:
                continue
            shape.forgotten[0]["topic"] = None
        with pytest.raises(MalformedRequest, match="non-nullable"):
            ours(version, encoded(version, shape))


@pytest.mark.parametrize("version", range(12, APIS[FETCH].max_version + 1))
def test_a_null_cluster_id_is_no_cluster_id(version: int) -> None:
    shape = varied()
    shape.cluster_id = None
    shape.top_tags = [(0, b"\x00")]  # tag 0 present, holding a null string
    assert ours(version, encoded(version, shape)).cluster_id is None


@pytest.mark.parametrize("version", [12, 15, 17, 18])
def test_a_known_tag_that_does_not_fill_its_size_is_malformed(version: int) -> None:
    spare = [[(0, b"\x02c\x00")]]  # a cluster id with a byte to spare
    if version >= 15:
        spare.append([(1, struct.pack(">iq", 1, 2) + b"\x00\x00")])  # a replica state too
    for known in spare:
        shape = varied()
        shape.cluster_id = shape.replica_state = None
        shape.top_tags = known
        with pytest.raises(MalformedRequest, match="does not fill"):
            ours(version, encoded(version, shape))
    if version >= 17:
        shape = varied()
        shape.topics[1]["partitions"][0]["tags"] = [(0, bytes(15))]
        with pytest.raises(MalformedRequest, match="does not fill"):
            ours(version, encoded(version, shape))


@pytest.mark.parametrize("version", [12, 16, 18])
def test_tagged_fields_past_the_end_are_malformed(version: int) -> None:
    data = encoded(version, Shape(topics=[], forgotten=[], rack_id=""))
    for section in (uvarint(1) + uvarint(9) + uvarint(5) + b"ab", uvarint(200) + b"\x01\x00"):
        with pytest.raises(MalformedRequest):
            ours(version, data[:-1] + section)


@pytest.mark.parametrize("version", [4, 12, 13])
def test_elements_are_bounded_as_the_length_walk_bounds_them(
    version: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = encoded(version, varied())  # 3 topics, 4 partitions (+ 2 forgotten, 3 indexes)
    elements = 7 + (5 if version >= 7 else 0)
    monkeypatch.setattr(request_walk, "MAX_REQUEST_ELEMENTS", elements)
    assert len(ours(version, data).topics) == 3
    request_walk.check_lengths(FETCH, version, data, 0)
    monkeypatch.setattr(request_walk, "MAX_REQUEST_ELEMENTS", elements - 1)
    with pytest.raises(MalformedRequest, match=f"more than {elements - 1} array elements"):
        ours(version, data)
    with pytest.raises(MalformedRequest, match="array elements"):
        request_walk.check_lengths(FETCH, version, data, 0)


def test_invalid_utf8_in_a_topic_name_is_malformed() -> None:
    shape = varied()
    data = encoded(11, shape).replace(b"orders", b"\xffrders")
    with pytest.raises(MalformedRequest):
        ours(11, data)


def test_two_million_partitions_are_refused_before_any_is_built() -> None:
    head = encoded(11, Shape(topics=[], forgotten=[]))[:25]
    body = head + struct.pack(">i", 1) + _string("t", False) + struct.pack(">i", 2_000_000)
    body += struct.pack(">iiqqi", 0, -1, 0, -1, 100) * 2_000_000
    began = time.monotonic()
    with pytest.raises(MalformedRequest, match="more than 1000000 array elements"):
        decode_fetch_request(11, body, 0)
    assert time.monotonic() - began < 0.1


def test_the_decoder_reads_every_version_the_broker_serves() -> None:
    assert APIS[FETCH].max_version == fetch_request_decode.LAST_VERSION
