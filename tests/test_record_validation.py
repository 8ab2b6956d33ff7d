"""The records of a client append are walked before anything is stored (as Kafka's
leader does): poisoned batches are refused with Kafka's code, good ones pass, and no
two stored records ever share an offset."""

from __future__ import annotations

import contextlib
import random
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compat_tests.poisoned_batches import (
    CORRUPT_MESSAGE,
    INVALID_RECORD,
    INVALID_TIMESTAMP,
    keyless,
    long_ago,
    poisoned,
    refresh_crc,
    with_header,
    with_section,
)
from kbroker.protocol import record_validation
from kbroker.protocol.batch import (
    CorruptBatchError,
    InvalidRecordsError,
    Record,
    decode_records,
    encode_batch,
    read_header,
    validate_batches,
)
from kbroker.protocol.compression import decompress
from kbroker.protocol.record_validation import (
    InvalidTimestampError,
    RecordPolicy,
    validate_records,
    walk_py,
)
from kbroker.storage.log import LogConfig, PartitionLog

NOW = int(time.time() * 1000)


def code_of(records: bytes, policy: RecordPolicy | None = None) -> int:
    """The Kafka error code a client append of `records` gets (0: accepted)."""
    buf = bytearray(records)
    try:
        validate_records(buf, validate_batches(buf, 1 << 30), NOW, policy or RecordPolicy())
    except InvalidTimestampError:
        return INVALID_TIMESTAMP
    except InvalidRecordsError:
        return INVALID_RECORD
    except CorruptBatchError:
        return CORRUPT_MESSAGE
    return 0


@pytest.mark.parametrize(
    ("name", "records", "code"),
    [(name, r, c) for name, (r, c) in poisoned(NOW).items()],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_poisoned_batch_gets_kafkas_code(name: str, records: bytes, code: int) -> None:
    assert code_of(records) == code, name


def test_the_c_walk_is_built_and_used() -> None:
    # Without it every produced record costs ~3 us of Python; make test builds it.
    assert record_validation.walk is not walk_py


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_good_batches_of_every_codec_pass(codec: int) -> None:
    records = [Record(b"k", b"v" * i, NOW - i, [("h", b"x")]) for i in range(50)]
    batch = encode_batch(records, NOW - 49, compression=codec)
    assert code_of(bytes(batch)) == 0


def test_keyless_record_names_its_index_on_a_compacted_topic() -> None:
    buf = bytearray(keyless(NOW))
    with pytest.raises(InvalidRecordsError) as refused:
        validate_records(buf, validate_batches(buf, 1 << 30), NOW, RecordPolicy(require_keys=True))
    assert [index for index, _ in refused.value.record_errors] == [1]
    assert code_of(keyless(NOW)) == 0  # keys are optional elsewhere


def test_timestamp_before_the_limit_is_refused_only_where_a_limit_is_set() -> None:
    assert code_of(long_ago(NOW)) == 0  # Kafka's default: no limit into the past
    assert code_of(long_ago(NOW), RecordPolicy(timestamp_before_max_ms=86_400_000)) == (
        INVALID_TIMESTAMP
    )


def test_timestamps_are_not_checked_on_log_append_time_topics() -> None:
    future = bytes(encode_batch([b"x"], NOW + 10**12))
    assert code_of(future) == INVALID_TIMESTAMP
    assert code_of(future, RecordPolicy(log_append_time=True)) == 0


def test_every_record_out_of_range_is_named() -> None:
    records = [Record(None, b"v", NOW + (i % 2) * 10**10) for i in range(6)]
    buf = bytearray(encode_batch(records, NOW))
    with pytest.raises(InvalidTimestampError) as refused:
        validate_records(buf, validate_batches(buf, 1 << 30), NOW, RecordPolicy())
    assert [index for index, _ in refused.value.record_errors] == [1, 3, 5]


def test_max_timestamp_below_the_records_is_set_to_their_largest() -> None:
    buf = bytearray(encode_batch([Record(None, b"a", NOW - 5), Record(None, b"b", NOW)], NOW - 5))
    buf[35:43] = (NOW - 10).to_bytes(8, "big", signed=True)
    buf = bytearray(refresh_crc(buf))
    headers = validate_batches(buf, 1 << 30)
    validate_records(buf, headers, NOW, RecordPolicy())
    assert read_header(buf).max_timestamp == NOW == headers[0].max_timestamp
    validate_batches(buf, 1 << 30)  # the CRC was recomputed


# -- the blobs known clear in one C call ---------------------------------------------------


def _clear(records: bytes, policy: RecordPolicy | None = None) -> bool:
    """What validate_records' C check says of `records` with `policy`'s bounds."""
    from kbroker.protocol._recordwalk import all_clear

    policy = policy or RecordPolicy()
    earliest, latest = record_validation.time_bounds(policy, NOW)
    return all_clear(
        bytearray(records), earliest, latest, policy.require_keys, not policy.log_append_time
    )


def test_the_usual_blob_is_known_clear_and_everything_else_takes_the_loop() -> None:
    assert record_validation.all_clear is not record_validation._not_known_clear
    records = [Record(b"k", b"v" * i, NOW - i, [("h", b"x")]) for i in range(50)]
    two = bytes(encode_batch(records, NOW - 49) + encode_batch([b"x"], NOW))
    assert _clear(two)
    assert not _clear(bytes(encode_batch(records, NOW - 49, compression=1)))
    assert not _clear(keyless(NOW), RecordPolicy(require_keys=True))
    assert _clear(keyless(NOW))
    future = bytes(encode_batch([b"x"], NOW + 10**12))
    assert not _clear(future)
    assert _clear(future, RecordPolicy(log_append_time=True))
    stale_max = bytearray(
        encode_batch([Record(None, b"a", NOW - 5), Record(None, b"b", NOW)], NOW - 5)
    )
    stale_max[35:43] = (NOW - 10).to_bytes(8, "big", signed=True)
    assert not _clear(refresh_crc(stale_max))


@pytest.mark.parametrize(
    ("name", "records", "code"),
    [(name, r, c) for name, (r, c) in poisoned(NOW).items() if c],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_no_poisoned_batch_is_known_clear(name: str, records: bytes, code: int) -> None:
    try:
        validate_batches(records, 1 << 30)
    except (CorruptBatchError, InvalidRecordsError):
        return  # refused before the records are walked
    assert not _clear(records), name


def test_a_blob_known_clear_is_one_the_loop_leaves_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Thousands of batches with bytes changed: wherever the C check says clear,
    validate_records' own loop refuses nothing and changes nothing."""
    monkeypatch.setattr(record_validation, "all_clear", record_validation._not_known_clear)
    rng = random.Random(5)
    records = [Record(b"k%d" % i, b"v" * i, NOW - i) for i in range(4)]
    whole = bytes(encode_batch(records, NOW - 3) + encode_batch([Record(None, b"z", NOW)], NOW))
    cleared = 0
    for _ in range(3000):
        data = bytearray(whole)
        for _ in range(rng.randint(1, 2)):
            data[rng.randrange(27, len(data))] = rng.randrange(256)
        buf = bytearray(refresh_crc_all(bytes(data)))
        try:
            headers = validate_batches(buf, 1 << 30)
        except (CorruptBatchError, InvalidRecordsError):
            continue
        policy = RecordPolicy(require_keys=rng.random() < 0.3)
        if not _clear(bytes(buf), policy):
            continue
        cleared += 1
        before = bytes(buf)
        validate_records(buf, headers, NOW, policy)
        assert bytes(buf) == before
    assert cleared > 100


def refresh_crc_all(blob: bytes) -> bytes:
    """Each batch of `blob` with its CRC made right again (its length field as it says)."""
    out, pos = b"", 0
    while pos + 61 <= len(blob):
        size = int.from_bytes(blob[pos + 8 : pos + 12], "big", signed=True) + 12
        if size < 61 or pos + size > len(blob):
            return blob
        out += refresh_crc(bytearray(blob[pos : pos + size]))
        pos += size
    return out + blob[pos:]


# -- the C walk and the Python reference agree ---------------------------------------------


def _outcome(walker, data: bytes, count: int, last: int) -> object:
    try:
        return walker(data, count, last)
    except ValueError as exc:
        return exc.args


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_c_walk_agrees_with_the_reference_on_mutated_sections(data: st.DataObject) -> None:
    count = data.draw(st.integers(1, 5))
    records = [
        Record(
            data.draw(st.one_of(st.none(), st.binary(max_size=4))),
            data.draw(st.binary(max_size=8)),
            NOW + data.draw(st.integers(-(10**6), 10**6)),
            [("h", b"v")] * data.draw(st.integers(0, 2)),
        )
        for _ in range(count)
    ]
    section = bytearray(encode_batch(records, NOW)[61:])
    for _ in range(data.draw(st.integers(0, 3))):
        if section:
            section[data.draw(st.integers(0, len(section) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(section)))
    section = section[:cut] if data.draw(st.booleans()) else section
    claimed = data.draw(st.integers(-1, 6))
    for c in {count, claimed}:
        assert _outcome(record_validation.walk, bytes(section), c, c - 1) == _outcome(
            walk_py, bytes(section), c, c - 1
        )


# -- stored offsets --------------------------------------------------------------------


def _batch_strategy() -> st.SearchStrategy[bytes]:
    """Good batches and batches whose counts or offset deltas lie."""

    @st.composite
    def build(draw: st.DrawFn) -> bytes:
        n = draw(st.integers(1, 4))
        deltas = draw(
            st.one_of(
                st.just(list(range(n))),
                st.lists(st.integers(0, 5), min_size=n, max_size=n),
            )
        )
        records = [Record(b"k", b"v", NOW, offset=d) for d in deltas]
        batch = encode_batch(records, NOW, compression=draw(st.sampled_from([0, 1, 4])))
        lie = draw(st.sampled_from([None, 0, 1, 2, 5]))
        if lie is not None:
            batch = bytearray(with_header(batch, 57, ">i", lie))
            batch = bytearray(with_header(batch, 23, ">i", max(lie - 1, 0)))
        return bytes(batch)

    return build()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@pytest.mark.slow
@given(st.lists(_batch_strategy(), min_size=1, max_size=12))
def test_no_two_stored_records_share_an_offset(tmp_path_factory, batches: list[bytes]) -> None:
    plog = PartitionLog.open(tmp_path_factory.mktemp("log") / "t-0", LogConfig(), NOW)
    try:
        for batch in batches:
            with contextlib.suppress(InvalidRecordsError):
                plog.append(batch, 0, NOW)
        offsets = []
        position = 0
        while position < plog.log_end_offset:
            data = plog.read(position, 1 << 20).read()
            for h in validate_batches(data, 1 << 30, check_record_count=False):
                offsets += [r.offset for r in decode_records(data, h.position, decompress)]
                position = h.next_offset
        assert len(offsets) == len(set(offsets))
        assert offsets == list(range(plog.log_end_offset))
    finally:
        plog.close()


def test_a_producer_id_from_a_block_the_leader_has_not_seen_is_appended(tmp_path) -> None:
    """Ids come in blocks each coordinator reserves through the controller; a leader that
    has not applied the block yet takes the id's first batch, as Kafka does (it checks
    sequences, not where an id came from)."""
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(), NOW)
    try:
        batch = encode_batch([b"x"], NOW, producer_id=2**40, producer_epoch=0, base_sequence=0)
        plog.append(batch, 0, NOW)
        assert plog.log_end_offset == 1
        plog.append(batch, 0, NOW)  # a retry is the duplicate, not a second record
        assert plog.log_end_offset == 1
    finally:
        plog.close()


def test_random_garbage_sections_never_pass() -> None:
    rng = random.Random(5)
    base = encode_batch([b"a", b"b"], NOW)
    for _ in range(200):
        assert code_of(with_section(base, rng.randbytes(rng.randrange(1, 60)))) != 0
