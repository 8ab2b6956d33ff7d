"""Log compaction on real partition logs: latest value per key, offsets kept, tombstones,
compaction lags, dirty ratio, compressed batches, producers' last batches, concurrent
reads and the crash-safe swap."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from compat_tests.poisoned_batches import with_section
from compat_tests.waiting import eventually_async
from kbroker.protocol.batch import (
    DELETE_HORIZON_MASK,
    InvalidRecordsError,
    Record,
    decode_records,
    encode_batch,
    validate_batches,
)
from kbroker.protocol.compression import GZIP, LZ4, SNAPPY, ZSTD, compress, decompress
from kbroker.storage.checkpoint import CHECKPOINT_FILE
from kbroker.storage.cleaner import (
    CleanerConfig,
    LogCleaner,
    assess,
    read_cleaner_checkpoint,
)
from kbroker.storage.compaction import CompactionSettings
from kbroker.storage.config import LogConfig
from kbroker.storage.log import PartitionLog
from kbroker.storage.producer_state import CLIENT, COORDINATOR
from kbroker.storage.segment import scan_batches

T0 = 1_700_000_000_000
COMPACT = LogConfig(cleanup_policy="compact", segment_bytes=64 * 1024)


def open_log(path: Path, config: LogConfig = COMPACT) -> PartitionLog:
    return PartitionLog.open(path / "topic-0", config, T0)


def append(
    plog: PartitionLog, records: list[Record], codec: int = 0, origin: int = CLIENT, **kw
) -> None:
    compressor = (lambda data: compress(codec, data)) if codec else None
    batch = encode_batch(
        records, records[0].timestamp or T0, compression=codec, compress=compressor, **kw
    )
    plog.append(batch, 0, T0, origin)
    plog.high_watermark = plog.log_end_offset


def write_updates(
    plog: PartitionLog, updates: int, keys: int, per_batch: int = 100, codec: int = 0
):
    """Update i sets key (i % keys) to value b"v<i>"; returns {key: (offset, value)} latest."""
    latest: dict[bytes, tuple[int, bytes]] = {}
    for start in range(0, updates, per_batch):
        records = []
        for i in range(start, min(start + per_batch, updates)):
            key = b"key-%d" % (i % keys)
            records.append(Record(key, b"v%d" % i, T0 + i))
            latest[key] = (plog.log_end_offset + len(records) - 1, b"v%d" % i)
        append(plog, records, codec)
    return latest


def read_all(plog: PartitionLog) -> list[Record]:
    """Every record from the log start, decoded, in offset order."""
    out: list[Record] = []
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:
        region = plog.read(offset, 1 << 20)
        if region is None:
            break
        with region:
            data = region.read()
        for h in validate_batches(data, 1 << 30, check_record_count=False):
            out += decode_records(data, h.position, decompress)
            offset = h.base_offset + h.last_offset_delta + 1
    return out


def cleaner(settings: CompactionSettings | None = None, **config) -> LogCleaner:
    return LogCleaner(
        lambda: [], CleanerConfig(**config), lambda plog: settings or CompactionSettings()
    )


def latest_by_key(records: list[Record]) -> dict[bytes | None, tuple[int, bytes | None]]:
    out: dict[bytes | None, tuple[int, bytes | None]] = {}
    for r in records:
        out[r.key] = (r.offset, r.value)
    return out


# -- the basic promise ------------------------------------------------------------------------


@pytest.mark.slow
def test_hundred_thousand_updates_over_thousand_keys_read_back_latest_per_key(tmp_path):
    plog = open_log(tmp_path)
    latest = write_updates(plog, 100_000, 1_000)
    plog.roll(T0)
    segments_before = plog.num_segments
    result = cleaner().clean_now(plog, T0 + 200_000)
    assert result is not None
    records = read_all(plog)
    assert len(records) == 1_000
    assert {r.key: (r.offset, r.value) for r in records} == latest
    assert [r.offset for r in records] == sorted(r.offset for r in records)
    assert plog.num_segments < segments_before
    assert plog.log_end_offset == 100_000
    plog.close()


def test_cleaned_log_survives_reopen(tmp_path):
    plog = open_log(tmp_path)
    latest = write_updates(plog, 5_000, 50)
    plog.roll(T0)
    cleaner().clean_now(plog, T0 + 10_000)
    plog.close()
    plog = open_log(tmp_path)
    assert {r.key: (r.offset, r.value) for r in read_all(plog)} == latest
    plog.close()


def test_records_keep_their_offsets_and_timestamps(tmp_path):
    plog = open_log(tmp_path)
    write_updates(plog, 3_000, 30)
    before = {r.offset: (r.key, r.value, r.timestamp) for r in read_all(plog)}
    plog.roll(T0)
    cleaner().clean_now(plog, T0 + 10_000)
    after = read_all(plog)
    assert after
    for r in after:
        assert before[r.offset] == (r.key, r.value, r.timestamp)
    plog.close()


def test_active_segment_is_never_cleaned(tmp_path):
    plog = open_log(tmp_path, LogConfig(cleanup_policy="compact"))
    write_updates(plog, 1_000, 10)
    assert plog.num_segments == 1
    assert cleaner().clean_now(plog, T0 + 10_000, force=True) is None
    assert len(read_all(plog)) == 1_000
    plog.close()


def test_records_above_the_high_watermark_are_not_cleaned(tmp_path):
    plog = open_log(tmp_path)
    write_updates(plog, 2_000, 10)
    plog.roll(T0)
    hw = plog.log_end_offset
    write_updates(plog, 2_000, 10)
    plog.roll(T0)
    plog._high_watermark = hw  # followers have not caught up with the second half
    cleaner().clean_now(plog, T0 + 10_000, force=True)
    records = read_all(plog)
    above = [r for r in records if r.offset >= hw]
    # Whole segments above the high watermark stay as written.
    assert len(above) >= 2_000 - 200
    assert len({r.key for r in records if r.offset < hw}) == 10
    plog.close()


def test_delete_policy_log_is_not_cleaned(tmp_path):
    plog = open_log(tmp_path, LogConfig(segment_bytes=64 * 1024))
    write_updates(plog, 3_000, 10)
    plog.roll(T0)
    assert cleaner().clean_now(plog, T0 + 10_000, force=True) is None
    assert len(read_all(plog)) == 3_000
    plog.close()


def test_compact_delete_policy_is_cleaned_and_retained(tmp_path):
    config = LogConfig(
        cleanup_policy="compact,delete", segment_bytes=64 * 1024, retention_ms=60_000
    )
    plog = open_log(tmp_path, config)
    latest = write_updates(plog, 3_000, 10)
    plog.roll(T0)
    cleaner().clean_now(plog, T0 + 10_000)
    assert latest_by_key(read_all(plog)) == latest
    plog.apply_retention(T0 + 3_000 + 60_001)
    assert read_all(plog) == []
    plog.close()


# -- tombstones ---------------------------------------------------------------------------------


def test_tombstones_stay_until_delete_retention_then_vanish(tmp_path):
    plog = open_log(tmp_path)
    write_updates(plog, 2_000, 20)
    append(plog, [Record(b"key-%d" % k, None, T0 + 3_000) for k in range(5)])
    plog.roll(T0)
    settings = CompactionSettings(delete_retention_ms=60_000)
    c = cleaner(settings)
    now = T0 + 10_000
    c.clean_now(plog, now)
    records = read_all(plog)
    tombstones = {r.key for r in records if r.value is None}
    assert tombstones == {b"key-%d" % k for k in range(5)}
    assert len(records) == 20  # one per key: 5 tombstones, 15 values
    # The horizon is stamped in the batch and remembered in the checkpoint.
    assert read_cleaner_checkpoint(str(plog.directory)).earliest_horizon == now + 60_000
    # Before the horizon nothing changes, after it the tombstones go.
    c.clean_now(plog, now + 59_000, force=True)
    assert {r.key for r in read_all(plog) if r.value is None} == tombstones
    target = assess(plog, settings, now + 60_000)
    assert target is not None and target.due and target.cleanable
    c.clean_now(plog, now + 60_000)
    records = read_all(plog)
    assert len(records) == 15
    assert all(r.value is not None for r in records)
    assert read_cleaner_checkpoint(str(plog.directory)).earliest_horizon == -1
    plog.close()


def test_tombstone_horizon_batch_keeps_record_timestamps(tmp_path):
    plog = open_log(tmp_path)
    append(plog, [Record(b"a", b"1", T0), Record(b"b", None, T0 + 5), Record(b"c", b"3", T0 + 9)])
    append(plog, [Record(b"a", b"2", T0 + 20)])
    plog.roll(T0)
    cleaner(CompactionSettings(delete_retention_ms=1_000)).clean_now(plog, T0 + 100, force=True)
    seg = plog.segments[0]
    first = next(scan_batches(seg.file.fd, 0, seg.size))
    assert first.attributes & DELETE_HORIZON_MASK
    assert first.base_timestamp == T0 + 100 + 1_000
    assert first.max_timestamp == T0 + 9
    records = read_all(plog)
    assert [(r.key, r.value, r.timestamp, r.offset) for r in records] == [
        (b"b", None, T0 + 5, 1),
        (b"c", b"3", T0 + 9, 2),
        (b"a", b"2", T0 + 20, 3),
    ]
    plog.close()


def test_superseded_tombstone_goes_at_once(tmp_path):
    plog = open_log(tmp_path)
    append(plog, [Record(b"a", b"1", T0)])
    append(plog, [Record(b"a", None, T0 + 1)])
    append(plog, [Record(b"a", b"2", T0 + 2)])
    plog.roll(T0)
    cleaner().clean_now(plog, T0 + 10, force=True)
    assert [(r.key, r.value, r.offset) for r in read_all(plog)] == [(b"a", b"2", 2)]
    plog.close()


# -- when to clean ------------------------------------------------------------------------------


def test_min_compaction_lag_keeps_young_segments_dirty(tmp_path):
    plog = open_log(tmp_path)
    write_updates(plog, 2_000, 10)  # timestamps T0 .. T0+1999
    plog.roll(T0)
    old_end = plog.log_end_offset
    for i in range(2_000):  # a second, young generation
        if i % 100 == 0:
            batch = []
        batch.append(Record(b"key-%d" % (i % 10), b"young%d" % i, T0 + 100_000 + i))
        if len(batch) == 100:
            append(plog, batch)
    plog.roll(T0)
    settings = CompactionSettings(min_compaction_lag_ms=50_000)
    cleaner(settings).clean_now(plog, T0 + 120_000, force=True)
    records = read_all(plog)
    young = [r for r in records if r.offset >= old_end]
    assert len(young) == 2_000  # younger than the lag: untouched
    # The old generation was compacted against itself only.
    assert len([r for r in records if r.offset < old_end]) == 10
    # Once the lag has passed, the young generation supersedes the old one.
    cleaner(settings).clean_now(plog, T0 + 160_000, force=True)
    records = read_all(plog)
    assert len(records) == 10
    assert all(r.value.startswith(b"young") for r in records)
    plog.close()


def test_dirty_ratio_gates_cleaning(tmp_path):
    plog = open_log(tmp_path)
    write_updates(plog, 5_000, 1_000)
    plog.roll(T0)
    settings = CompactionSettings(min_cleanable_ratio=0.5)
    c = cleaner(settings)
    assert c.clean_now(plog, T0 + 10_000) is not None  # all dirty: ratio 1
    assert read_cleaner_checkpoint(str(plog.directory)).first_dirty_offset == 5_000
    # A little new data: far below the ratio.
    write_updates(plog, 200, 1_000)
    plog.roll(T0)
    target = assess(plog, settings, T0 + 10_000)
    assert target is not None and 0 < target.ratio < 0.5
    assert not target.cleanable
    assert c.clean_now(plog, T0 + 10_000) is None
    plog.close()


def test_max_compaction_lag_forces_cleaning_and_rolls_active_segment(tmp_path):
    plog = open_log(tmp_path, LogConfig(cleanup_policy="compact"))
    write_updates(plog, 1_000, 10)
    assert plog.num_segments == 1
    settings = CompactionSettings(min_cleanable_ratio=0.99, max_compaction_lag_ms=60_000)
    assert assess(plog, settings, T0 + 30_000) is None
    target = assess(plog, settings, T0 + 70_000)
    assert plog.num_segments == 2  # the active segment was rolled
    assert target is not None and target.due
    cleaner(settings).clean_now(plog, T0 + 70_000)
    assert len(read_all(plog)) == 10
    plog.close()


def test_checkpoint_advances_and_second_pass_uses_it(tmp_path):
    plog = open_log(tmp_path)
    write_updates(plog, 1_000, 10)
    plog.roll(T0)
    c = cleaner()
    c.clean_now(plog, T0 + 10_000)
    assert read_cleaner_checkpoint(str(plog.directory)).first_dirty_offset == 1_000
    latest = write_updates(plog, 1_000, 10)
    plog.roll(T0)
    target = assess(plog, CompactionSettings(), T0 + 10_000)
    assert target.first_dirty == 1_000 and target.dirty_end == 2_000
    c.clean_now(plog, T0 + 10_000)
    assert latest_by_key(read_all(plog)) == latest
    assert read_cleaner_checkpoint(str(plog.directory)).first_dirty_offset == 2_000
    plog.close()


def test_small_key_map_cleans_in_several_passes(tmp_path):
    plog = open_log(tmp_path)
    latest = write_updates(plog, 6_000, 3_000)
    plog.roll(T0)
    c = cleaner(dedupe_buffer_size=1024 * 128, io_buffer_load_factor=1.0)  # 1024 keys
    first = c.clean_now(plog, T0 + 10_000)
    assert first is not None and first.map_end < 6_000
    for _ in range(10):
        if c.clean_now(plog, T0 + 10_000, force=True) is None:
            break
    assert latest_by_key(read_all(plog)) == latest
    assert len(read_all(plog)) == 3_000
    plog.close()


# -- batch kinds -----------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_compressed_batches_are_recompressed_with_their_codec(tmp_path, codec):
    plog = open_log(tmp_path)
    latest = write_updates(plog, 4_000, 40, codec=codec)
    plog.roll(T0)
    cleaner().clean_now(plog, T0 + 10_000)
    assert latest_by_key(read_all(plog)) == latest
    for seg in plog.segments:
        for h in scan_batches(seg.file.fd, 0, seg.size):
            assert h.compression == codec
    plog.close()


def test_keyless_records_are_dropped_by_the_cleaner(tmp_path):
    plog = open_log(tmp_path, LogConfig(segment_bytes=64 * 1024))  # delete policy: accepted
    append(plog, [Record(None, b"no key", T0), Record(b"k", b"v", T0)])
    plog.roll(T0)
    plog.update_config(COMPACT)
    cleaner().clean_now(plog, T0 + 10, force=True)
    assert [(r.key, r.value) for r in read_all(plog)] == [(b"k", b"v")]
    plog.close()


@pytest.mark.parametrize("codec", [0, GZIP, ZSTD])
def test_keyless_record_is_rejected_by_compacted_log(tmp_path, codec):
    plog = open_log(tmp_path)
    with pytest.raises(InvalidRecordsError) as refused:
        append(plog, [Record(b"k", b"v", T0), Record(None, b"v", T0)], codec)
    assert [index for index, _ in refused.value.record_errors] == [1]
    assert plog.log_end_offset == 0
    append(plog, [Record(b"k", b"v", T0)], codec)
    assert plog.log_end_offset == 1
    plog.close()


def test_transactional_and_control_batches_are_kept_whole(tmp_path):
    plog = open_log(tmp_path)
    append(plog, [Record(b"a", b"plain", T0)])
    append(
        plog,
        [Record(b"a", b"txn-1", T0 + 1), Record(b"a", b"txn-2", T0 + 2)],
        producer_id=7,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )
    marker = Record(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", T0 + 3)
    append(
        plog,
        [marker],
        origin=COORDINATOR,
        producer_id=7,
        producer_epoch=0,
        is_transactional=True,
        is_control=True,
    )
    append(plog, [Record(b"b", b"plain", T0 + 4)])
    plog.roll(T0)
    before = read_all(plog)
    cleaner().clean_now(plog, T0 + 100, force=True)
    after = read_all(plog)
    # Transactional records never supersede, nor are they superseded: nothing goes.
    assert [(r.offset, r.value) for r in after] == [(r.offset, r.value) for r in before]
    plog.close()


def test_last_batch_of_a_producer_stays_as_empty_batch(tmp_path):
    plog = open_log(tmp_path)
    append(plog, [Record(b"a", b"1", T0)], producer_id=42, producer_epoch=3, base_sequence=0)
    append(plog, [Record(b"a", b"2", T0 + 1)], producer_id=42, producer_epoch=3, base_sequence=1)
    append(plog, [Record(b"a", b"3", T0 + 2)])
    plog.roll(T0)
    cleaner().clean_now(plog, T0 + 100, force=True)
    headers = [h for seg in plog.segments for h in scan_batches(seg.file.fd, 0, seg.size)]
    assert [(h.base_offset, h.record_count, h.producer_id, h.base_sequence) for h in headers] == [
        (1, 0, 42, 1),
        (2, 1, -1, -1),
    ]
    assert [(r.key, r.value) for r in read_all(plog)] == [(b"a", b"3")]
    plog.close()
    reopened = open_log(tmp_path)
    assert reopened.producer_state.producers[42].last_sequence == 1
    reopened.close()


def test_cleaned_batches_pass_validation(tmp_path):
    plog = open_log(tmp_path)
    write_updates(plog, 3_000, 30, codec=GZIP)
    plog.roll(T0)
    cleaner().clean_now(plog, T0 + 10_000)
    for seg in plog.segments:
        data = seg.read_bytes(0, seg.size)
        if data:
            validate_batches(data, 1 << 30, check_record_count=False)  # CRCs and lengths
    plog.close()


# -- concurrency and files --------------------------------------------------------------------


def test_slices_taken_before_cleaning_still_read_the_old_bytes(tmp_path):
    plog = open_log(tmp_path)
    write_updates(plog, 3_000, 10)
    plog.roll(T0)
    region = plog.read(0, 1 << 20)
    expected = region.read()
    cleaner().clean_now(plog, T0 + 10_000)
    assert region.read() == expected
    region.release()
    assert len(read_all(plog)) == 10
    plog.close()


def test_no_cleaner_files_are_left_behind(tmp_path):
    plog = open_log(tmp_path)
    write_updates(plog, 3_000, 10)
    plog.roll(T0)
    cleaner().clean_now(plog, T0 + 10_000)
    names = os.listdir(plog.directory)
    assert not [n for n in names if n.endswith((".cleaned", ".swap", ".deleted"))]
    plog.close()


def test_unchanged_log_is_not_rewritten(tmp_path):
    plog = open_log(tmp_path)
    write_updates(plog, 100, 100)  # every key once: nothing to remove
    plog.roll(T0)
    inode = os.stat(plog.segments[0].log_path).st_ino
    result = cleaner().clean_now(plog, T0 + 10_000, force=True)
    assert result is not None and result.groups == []
    assert os.stat(plog.segments[0].log_path).st_ino == inode
    plog.close()


def test_segments_deleted_during_the_pass_are_not_swapped_in(tmp_path):
    plog = open_log(tmp_path)
    write_updates(plog, 3_000, 10)
    plog.roll(T0)
    c = cleaner()
    target = assess(plog, CompactionSettings(), T0 + 10_000)
    plan = c.plan(target, T0 + 10_000)
    from kbroker.storage.compaction import run_plan

    result = run_plan(plan)
    assert result.groups
    plog.truncate_to(1_500)  # a follower truncation meanwhile
    doomed, complete = c.commit(plog, plan, result)
    assert not complete
    assert [r.offset for r in read_all(plog)] == list(range(1_500))
    assert not [n for n in os.listdir(plog.directory) if n.endswith(".cleaned")]
    plog.close()


def test_background_cleaner_compacts_and_stops(tmp_path):
    plog = open_log(tmp_path)
    latest = write_updates(plog, 5_000, 50)
    plog.roll(T0)

    async def main():
        c = LogCleaner(lambda: [plog], CleanerConfig(backoff_ms=10), clock=lambda: T0 + 10_000)
        task = asyncio.ensure_future(c.run())
        await eventually_async(lambda: c.passes, timeout=10, what="a cleaner pass")
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        c.stop()
        return c.passes

    assert asyncio.run(main()) >= 1
    assert latest_by_key(read_all(plog)) == latest
    assert len(read_all(plog)) == 50
    plog.close()


# -- configuration ----------------------------------------------------------------------------


def test_cleaner_config_reads_broker_settings():
    from kbroker.config import load_broker_config

    broker = load_broker_config(
        None, ["log.cleaner.backoff.ms=250", "log.cleaner.dedupe.buffer.size=1048576"], {}
    )
    config = CleanerConfig.from_settings(broker)
    assert config.enabled and config.threads == 1
    assert config.backoff_ms == 250
    assert config.max_map_entries == int(1048576 * 0.9 // 128)


def test_compaction_settings_read_topic_configs_with_broker_defaults():
    from kbroker.config import load_broker_config, topic_config_values

    broker = load_broker_config(None, ["log.cleaner.min.cleanable.ratio=0.25"], {})
    values = topic_config_values(
        {"delete.retention.ms": "1234", "min.compaction.lag.ms": "5"}, broker
    )
    assert CompactionSettings.from_topic_values(values) == CompactionSettings(
        delete_retention_ms=1234,
        min_cleanable_ratio=0.25,
        min_compaction_lag_ms=5,
        max_compaction_lag_ms=2**63 - 1,
    )


def test_io_throttle_slows_the_worker_to_the_configured_rate():
    from kbroker.storage.compaction import IoThrottle

    throttle = IoThrottle(1_000_000)
    started = time.monotonic()
    for _ in range(20):
        throttle(10_000)  # 200 kB at 1 MB/s
    assert 0.15 < time.monotonic() - started < 1.0


def test_a_stored_batch_that_does_not_inflate_is_skipped_by_cleaner_and_recovery(tmp_path):
    """Produce refuses such batches now, but older logs or a replica may hold one: the
    cleaner keeps it as it is (one warning line per pass) and compacts around it, and
    recovery after a crash neither loops nor fails on it."""
    plog = open_log(tmp_path)
    write_updates(plog, 300, 3)
    good = encode_batch([Record(b"key-0", b"x", T0)], T0, compression=GZIP, base_offset=300)
    poisoned = with_section(good, compress(GZIP, b"x")[:10] + b"\xff" * 40)
    plog.append_as_follower(poisoned, T0)
    write_updates(plog, 300, 3)
    plog.high_watermark = plog.log_end_offset
    plog.roll(T0)
    result = cleaner().clean_now(plog, T0 + 1_000)
    assert result is not None and result.unreadable_batches > 0  # counted by each phase
    assert plog.log_end_offset == 601
    plog.close()
    (tmp_path / "topic-0" / CHECKPOINT_FILE).unlink()  # as after a crash: full recovery
    reopened = open_log(tmp_path)
    assert reopened.log_end_offset == 601
    reopened.close()


def test_reconfigure_changes_workers_and_backoff_while_running(monkeypatch):
    """log.cleaner.threads and log.cleaner.backoff.ms as dynamic broker configs: a
    running cleaner starts the workers a raised count asks for and sleeps the new
    backoff."""
    import kbroker.storage.cleaner as cleaner_module

    monkeypatch.setattr(cleaner_module, "RECONFIGURE_CHECK_S", 0.01)
    polls: list[int] = []

    async def scenario() -> None:
        c = LogCleaner(lambda: [], CleanerConfig(threads=1, backoff_ms=60_000))

        async def clean_next() -> bool:
            polls.append(1)
            return False

        c.clean_next = clean_next  # type: ignore[method-assign]
        task = asyncio.ensure_future(c.run())
        await eventually_async(lambda: polls, timeout=5, what="the first worker's poll")
        assert len(polls) == 1  # one worker, asleep for a minute
        c.reconfigure(CleanerConfig(threads=3, backoff_ms=10))
        await eventually_async(
            lambda: len(polls) >= 8, timeout=5, what="polls at the new count and backoff"
        )
        c.stop()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())
