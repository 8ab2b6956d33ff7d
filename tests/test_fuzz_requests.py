"""Request bodies through messages.decode_request, for every API version kio knows.

Valid requests round-trip; random and mutated bytes raise an ordinary exception (the
connection then closes) and never abort, hang or allocate for a count the bytes cannot
back. The length walk in front of kio rejects a request only when kio could not have
decoded it either.

The hostile-count cases run in a child process: without the walk, kio's allocation for
them aborts the interpreter, and a child's death fails one test instead of the session.
"""

from __future__ import annotations

import dataclasses
import datetime
import faulthandler
import functools
import os
import re
import struct
import subprocess
import sys
import time
import types
import typing
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    is_optional,
)
from test_fetch_request_decode import view as fetch_view
from test_header import uvarint

from compat_tests.null_requests import variants
from kbroker.protocol import legacy_messages, messages, request_walk
from kbroker.protocol.header import MalformedRequest

pytestmark = pytest.mark.slow  # make test-fast leaves these out

ALL_VERSIONS = [
    (key, version) for key in sorted(messages.API_NAMES) for version in messages.known_versions(key)
]
IDS = [f"{messages.API_NAMES[k]}-v{v}" for k, v in ALL_VERSIONS]
SLOW_DECODE_S = 1.0

FUZZ = settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)


# -- strategies for valid request entities ---------------------------------------------


def _ints(bits: int, signed: bool = True) -> st.SearchStrategy[int]:
    if signed:
        return st.integers(-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    return st.integers(0, (1 << bits) - 1)


_PRIMITIVES: dict[str, st.SearchStrategy[Any]] = {
    "int8": _ints(8),
    "int16": _ints(16),
    "int32": _ints(32),
    "int64": _ints(64),
    "uint8": _ints(8, False),
    "uint16": _ints(16, False),
    "uint32": _ints(32, False),
    "uint64": _ints(64, False),
    "float64": st.floats(allow_nan=False),
    "bool": st.booleans(),
    "string": st.text(max_size=12),
    "bytes": st.binary(max_size=12),
    "records": st.binary(max_size=40),
    "uuid": st.uuids(),
    "error_code": st.sampled_from(list(ErrorCode)),
    "timedelta_i32": _ints(32).map(lambda ms: datetime.timedelta(milliseconds=ms)),
    "timedelta_i64": st.integers(-(2**40), 2**40).map(
        lambda ms: datetime.timedelta(milliseconds=ms)
    ),
}


def _nullable(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in (
        typing.get_args(hint)
    )


@functools.cache
def entities(cls: type) -> st.SearchStrategy[Any]:
    """Any instance of a kio request entity, nested entities and arrays included."""
    kwargs: dict[str, st.SearchStrategy[Any]] = {}
    for f in dataclasses.fields(cls):
        kind = classify_field(f)
        is_array = isinstance(kind, EntityTupleField | PrimitiveTupleField)
        if isinstance(kind, EntityField | EntityTupleField):
            inner = st.deferred(lambda t=kind.type_: entities(t))
        else:
            inner = _PRIMITIVES[f.metadata["kafka_type"]]
            if is_array and _nullable(typing.get_args(f.type)[0]):
                inner = st.none() | inner
        if is_array:
            inner = st.lists(inner, max_size=3).map(tuple)
        if _nullable(f.type) if is_array else is_optional(f):
            inner = st.none() | inner
        kwargs[f.name] = inner
    return st.builds(cls, **kwargs)


def encoded_requests(key: int, version: int) -> st.SearchStrategy[bytes]:
    return entities(load_request_schema(key, version)).map(messages.encode)


# -- hostile bytes -----------------------------------------------------------------------

_LOUD = [b"\xff", b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff\x0f", b"\x80", b"\x00", b"\xfe"]


@st.composite
def mutated(draw: st.DrawFn, base: st.SearchStrategy[bytes]) -> bytes:
    """A valid encoding with a few bytes overwritten, inserted or cut off."""
    data = bytearray(draw(base))
    for _ in range(draw(st.integers(1, 4))):
        pos = draw(st.integers(0, len(data)))
        action = draw(st.sampled_from(["overwrite", "insert", "truncate", "flip"]))
        if action == "truncate":
            del data[pos:]
        elif action == "flip" and pos < len(data):
            data[pos] ^= 1 << draw(st.integers(0, 7))
        else:
            loud = draw(st.sampled_from(_LOUD) | st.binary(min_size=1, max_size=5))
            if action == "insert":
                data[pos:pos] = loud
            else:
                data[pos : pos + len(loud)] = loud
    return bytes(data)


def decode_outcome(key: int, version: int, data: bytes) -> Exception | None:
    """Decode; return the exception if any. Anything not an Exception propagates and fails."""
    began = time.monotonic()
    try:
        messages.decode_request(key, version, data, 0)
        outcome = None
    except Exception as exc:
        outcome = exc
    assert time.monotonic() - began < SLOW_DECODE_S
    return outcome


_ARRAY_REJECTION = re.compile(r"array of (\d+) elements")


def kio_also_fails(key: int, version: int, data: bytes, rejection: MalformedRequest) -> None:
    """A walk rejection for a modest count: kio's own decoding must fail too.

    The walk stops at the first array it rejects; kio, whose reads agree up to there,
    goes on into that array's elements, where a nested count can ask it to reserve more
    memory than the machine has, and its native decoder then aborts the process (the
    reason the broker walks every request before kio sees it). So kio decodes in a
    forked child: an exception or that abort both count as failing, and only a decode
    that succeeds is a wrong rejection.
    """
    found = _ARRAY_REJECTION.search(str(rejection))
    if found is None or int(found.group(1)) > 1 << 20:
        return
    assert _kio_outcome_in_child(key, version, data) != "decoded", (
        f"kio decodes what the walk rejected ({rejection}): {data.hex()}"
    )


def _kio_outcome_in_child(key: int, version: int, data: bytes) -> str:
    """'raised', 'aborted' or 'decoded': kio's own reader on `data`, in a forked child."""
    pid = os.fork()
    if pid == 0:  # the child: no pytest machinery, just the decode and an exit code
        code = 2
        try:
            # kio's allocation-failure message and the abort's traceback (faulthandler
            # writes to its own copy of stderr) are expected noise here.
            faulthandler.disable()
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)
            messages.request_reader(key, version)(data, 0)
            code = 1
        except BaseException:
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return "aborted"
    return {0: "raised", 1: "decoded"}.get(os.WEXITSTATUS(status), "aborted")


# -- properties over every API version ------------------------------------------------


@pytest.mark.parametrize(("key", "version"), ALL_VERSIONS, ids=IDS)
def test_valid_requests_round_trip(key: int, version: int) -> None:
    @FUZZ
    @given(entities(load_request_schema(key, version)))
    def round_trip(entity: Any) -> None:
        data = messages.encode(entity)
        request_walk.check_lengths(key, version, data, 0)
        decoded = messages.decode_request(key, version, data, 0)
        assert _comparable(key, decoded) == _comparable(key, entity)

    round_trip()


def _comparable(key: int, request: Any) -> Any:
    """Produce and Fetch have their own decoders with their own types: compare what they
    carry."""
    if key == 1:
        for version in messages.known_versions(key):
            messages.request_class(key, version)  # kio's classes read the absent fields
        return fetch_view(request)
    if key != 0:
        return request
    timeout = getattr(request, "timeout_ms", None)
    if timeout is None:
        timeout = round(request.timeout.total_seconds() * 1000)
    return (
        request.transactional_id,
        request.acks,
        timeout,
        [
            (
                getattr(t, "name", None),
                getattr(t, "topic_id", None),
                [
                    (p.index, None if p.records is None else bytes(p.records))
                    for p in t.partition_data
                ],
            )
            for t in request.topic_data
        ],
    )


@pytest.mark.parametrize(("key", "version"), ALL_VERSIONS, ids=IDS)
def test_random_bytes_only_raise_exceptions(key: int, version: int) -> None:
    @FUZZ
    @given(st.binary(max_size=200))
    def random_body(data: bytes) -> None:
        decode_outcome(key, version, data)

    random_body()


@pytest.mark.parametrize(("key", "version"), ALL_VERSIONS, ids=IDS)
def test_mutated_requests_only_raise_exceptions(key: int, version: int) -> None:
    @FUZZ
    @given(mutated(encoded_requests(key, version)))
    def mutated_body(data: bytes) -> None:
        outcome = decode_outcome(key, version, data)
        if isinstance(outcome, MalformedRequest):
            kio_also_fails(key, version, data, outcome)

    mutated_body()


def _walked(skip: Any, key: int, version: int, data: bytes) -> Any:
    """Where a walk of the request ends and its edits, or the error it raised."""
    state = request_walk.WalkState(request_walk.MAX_REQUEST_ELEMENTS)
    try:
        return skip(data, 0, len(data), state), state.edits
    except (struct.error, IndexError):
        return "ends inside a field"
    except MalformedRequest as exc:
        return f"MalformedRequest: {exc}"


@pytest.mark.parametrize(("key", "version"), ALL_VERSIONS, ids=IDS)
def test_the_generated_walk_is_the_closures_walk(key: int, version: int) -> None:
    """check_lengths runs a generated function per schema; the closures it was written
    from step field by field. On valid, mutated and random bytes both end at the same
    place with the same edits, or refuse with the same error."""
    closures = request_walk.entity_walk(load_request_schema(key, version), False).skip
    generated = request_walk.request_skip(key, version)
    assert generated is not closures

    @FUZZ
    @given(
        st.one_of(
            encoded_requests(key, version),
            mutated(encoded_requests(key, version)),
            st.binary(max_size=120),
        )
    )
    def same_walk(data: bytes) -> None:
        assert _walked(generated, key, version, data) == _walked(closures, key, version, data)

    same_walk()


# -- hostile counts, one by one ---------------------------------------------------------


def _decode_in_child(key: int, version: int, data: bytes) -> str:
    """Decode in a fresh interpreter; return the exception's class name, or 'ok'."""
    code = (
        "import sys\n"
        "from kbroker.protocol import messages\n"
        "try:\n"
        f"    messages.decode_request({key}, {version}, bytes.fromhex(sys.argv[1]), 0)\n"
        "    print('ok')\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, data.hex()], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, f"decoder process died ({done.returncode}): {done.stderr[-400:]}"
    return done.stdout.strip()


FETCH_V12_HEAD = struct.pack(">iiiibii", -1, 500, 1, 1 << 20, 0, 0, -1)


def test_fetch_topics_count_of_35_bits_is_refused() -> None:
    # The body that first aborted the broker: topics count a8 c8 81 90 5c (~24.7e9).
    body = FETCH_V12_HEAD + bytes.fromhex("a8c881905c") + b"\0" * 40
    assert _decode_in_child(1, 12, body).startswith("MalformedRequest array of 24729642023")


def test_produce_legacy_topic_count_near_2_31_is_refused() -> None:
    body = struct.pack(">hhii", -1, 1, 30000, 2**31 - 1) + b"\0" * 16
    assert _decode_in_child(0, 3, body).startswith("MalformedRequest array of 2147483647")


def test_nested_partition_count_is_refused() -> None:
    topic = b"\x02t" + uvarint(2**35 - 1)  # compact name "t", then the partitions count
    body = b"\0" + struct.pack(">hi", 1, 30000) + uvarint(2) + topic + b"\0" * 8
    assert _decode_in_child(0, 9, body).startswith("MalformedRequest array of")


def test_metadata_topics_count_just_above_what_the_bytes_hold_is_refused() -> None:
    # Each v12 topic takes at least 18 bytes (uuid, name, tags): 3 cannot fit in 40.
    body = uvarint(3 + 1) + b"\0" * 40
    assert _decode_in_child(3, 12, body).startswith("MalformedRequest array of 3 elements")


def test_array_inside_a_tagged_field_is_refused() -> None:
    fixed = struct.pack(">iqq??", 1, 1, 0, False, False)
    tagged = uvarint(1) + uvarint(0) + uvarint(5) + uvarint(2**35 - 1)
    assert _decode_in_child(63, 1, fixed + tagged).startswith("MalformedRequest array of")


def test_counts_the_bytes_can_hold_still_decode() -> None:
    # 2 topics in Metadata v12: exactly two 18-byte entries.
    topic = b"\x11" * 16 + b"\x00" + b"\x00"
    body = uvarint(3) + topic * 2 + b"\x01\x00\x00"
    request = messages.decode_request(3, 12, body, 0)
    assert len(request.topics) == 2


def test_librdkafka_all_topics_metadata_with_a_four_byte_null_count_decodes() -> None:
    # librdkafka 2.x writes the null topics count of Metadata v9+ as 4 bytes, not a
    # 1-byte varint (librdkafka issue 5049); Kafka reads the body and ignores the rest.
    body = bytes.fromhex("00000000010000")
    request = messages.decode_request(3, 13, body, 0)
    assert request.topics is None


def _produce_v9(topics: int, partitions: int) -> bytes:
    partition = struct.pack(">i", 0) + b"\x00\x00"  # index, null records, no tags
    topic = b"\x02t" + uvarint(partitions + 1) + partition * partitions + b"\x00"
    return b"\x00" + struct.pack(">hi", 1, 1000) + uvarint(topics + 1) + topic * topics + b"\x00"


def test_elements_up_to_the_request_cap_decode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(request_walk, "MAX_REQUEST_ELEMENTS", 2 + 2 * 50)
    request = messages.decode_request(0, 9, _produce_v9(2, 50), 0)
    assert sum(len(t.partition_data) for t in request.topic_data) == 100


def test_elements_beyond_the_request_cap_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(request_walk, "MAX_REQUEST_ELEMENTS", 2 + 2 * 50 - 1)
    with pytest.raises(MalformedRequest, match="more than 101 array elements"):
        messages.decode_request(0, 9, _produce_v9(2, 50), 0)


def test_two_million_tiny_partitions_are_refused_at_once() -> None:
    began = time.monotonic()
    with pytest.raises(MalformedRequest, match="array elements in one request"):
        request_walk.check_lengths(0, 9, _produce_v9(1, 2_000_000), 0)
    assert time.monotonic() - began < SLOW_DECODE_S


# -- nulls and lengths where the schema forbids them -----------------------------------


@pytest.mark.parametrize(("key", "version"), ALL_VERSIONS, ids=IDS)
def test_null_where_the_schema_forbids_it_is_a_malformed_request(key: int, version: int) -> None:
    """Kafka fails a request carrying a null in a non-nullable string, bytes or array
    field; a handler must never see None there. A nullable one set to null decodes."""
    checked = 0
    for variant in variants(key, version):
        if variant.mutation != "null":
            continue
        outcome = decode_outcome(key, version, variant.data)
        if variant.nullable:
            assert outcome is None, (variant.path, outcome)
        else:
            assert isinstance(outcome, MalformedRequest), (variant.path, outcome)
            assert "non-nullable" in str(outcome)
        checked += 1
    assert checked > 0 or not list(variants(key, version))


@pytest.mark.parametrize(("key", "version"), ALL_VERSIONS, ids=IDS)
def test_a_length_past_the_end_is_refused(key: int, version: int) -> None:
    for variant in variants(key, version):
        if variant.mutation == "overrun":
            assert decode_outcome(key, version, variant.data) is not None, variant.path


# -- the versions kio has no schema for (protocol.legacy_messages) ----------------------

LEGACY_VERSIONS = sorted(legacy_messages.LEGACY)
LEGACY_IDS = [f"{messages.API_NAMES[k]}-v{v}" for k, v in LEGACY_VERSIONS]


def _sample(kind: object, version: int, seed: int) -> object:
    """A value of every field of a layout, different per field, arrays of two."""
    if isinstance(kind, tuple) and kind and kind[0] in ("array", "narray"):
        return [_sample(kind[1], version, seed + i) for i in range(2)]
    if isinstance(kind, tuple):
        return {
            name: _sample(k, version, seed * 7 + i)
            for i, (name, k) in enumerate(legacy_messages._fields(kind, version))
        }
    if kind == "bool":
        return seed % 2 == 1
    return f"s{seed}" if kind in ("string", "nstring") else seed % 100


@pytest.mark.parametrize(("key", "version"), LEGACY_VERSIONS, ids=LEGACY_IDS)
def test_legacy_requests_decode_into_the_oldest_kio_shape(key: int, version: int) -> None:
    layout = legacy_messages.LEGACY[(key, version)][0]
    sample = _sample(layout, version, 1)
    data = legacy_messages.write(layout, version, sample)
    decoded = messages.decode_request(key, version, data, 0)
    assert decoded.__version__ == messages.known_versions(key).start
    assert legacy_messages.read(layout, version, data, 0, 1000) == sample
    for cut in range(len(data)):  # every truncation is a malformed request
        assert isinstance(decode_outcome(key, version, data[:cut]), MalformedRequest)


@pytest.mark.parametrize(("key", "version"), LEGACY_VERSIONS, ids=LEGACY_IDS)
def test_legacy_random_bytes_only_raise_exceptions(key: int, version: int) -> None:
    layout = legacy_messages.LEGACY[(key, version)][0]
    valid = legacy_messages.write(layout, version, _sample(layout, version, 3))

    @FUZZ
    @given(
        st.binary(max_size=200), st.integers(0, len(valid) - 1), st.binary(min_size=1, max_size=4)
    )
    def random_body(data: bytes, at: int, patch: bytes) -> None:
        decode_outcome(key, version, data)
        decode_outcome(key, version, valid[:at] + patch + valid[at + len(patch) :])

    random_body()


def test_a_legacy_array_count_beyond_the_bytes_is_refused() -> None:
    body = struct.pack(">h", 1) + b"g" + struct.pack(">i", 1 << 30)
    outcome = decode_outcome(OFFSET_FETCH_KEY, 0, body)
    assert isinstance(outcome, MalformedRequest) and "cannot fit" in str(outcome)


OFFSET_FETCH_KEY = 9
