"""PartitionLog: append, read, indexes, rolling, timestamps, deletion and retention."""

import os
from pathlib import Path

import pytest

from kbroker.protocol.batch import (
    BatchTooLargeError,
    CorruptBatchError,
    Record,
    RecordListTooLargeError,
    encode_batch,
    read_header,
    validate_batches,
)
from kbroker.storage import LogConfig, OffsetOutOfRangeError, PartitionLog
from kbroker.storage.log import LogStartMoves

NOW = 1_700_000_000_000


def batch(n=1, ts=NOW, size=10, key=None):
    return encode_batch([(key, b"v" * size) for _ in range(n)], ts)


def open_log(tmp_path, **cfg) -> PartitionLog:
    return PartitionLog.open(tmp_path / "topic-0", LogConfig(**cfg), NOW)


def headers_of(slice_):
    return validate_batches(slice_.read(), 1 << 30, check_record_count=False)


def test_topic_and_partition_come_from_directory_name(tmp_path):
    log = PartitionLog.open(tmp_path / "my-topic.v2-17", LogConfig(), NOW)
    assert (log.topic, log.partition) == ("my-topic.v2", 17)


def test_new_log_is_empty_with_first_segment_file(tmp_path):
    log = open_log(tmp_path)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (0, 0, 0)
    assert (tmp_path / "topic-0" / "00000000000000000000.log").exists()
    assert log.read(0, 100) is None


def test_append_assigns_consecutive_offsets_and_reports_them(tmp_path):
    log = open_log(tmp_path)
    r1 = log.append(batch(3), leader_epoch=4, now_ms=NOW)
    r2 = log.append(batch(2), leader_epoch=4, now_ms=NOW)
    assert (r1.base_offset, r1.last_offset, r1.record_count) == (0, 2, 3)
    assert (r2.base_offset, r2.last_offset) == (3, 4)
    assert r1.log_append_time_ms == -1
    assert log.log_end_offset == 5
    hs = headers_of(log.read(0, 1 << 20))
    assert [h.base_offset for h in hs] == [0, 3]
    assert {h.partition_leader_epoch for h in hs} == {4}


def test_append_of_multi_batch_blob_assigns_each_batch(tmp_path):
    log = open_log(tmp_path)
    r = log.append(batch(2) + batch(5), 0, NOW)
    assert (r.base_offset, r.last_offset, r.record_count) == (0, 6, 7)
    assert [h.base_offset for h in headers_of(log.read(0, 1 << 20))] == [0, 2]


def test_append_accepts_bytes_input(tmp_path):
    log = open_log(tmp_path)
    log.append(bytes(batch(1)), 0, NOW)
    assert log.log_end_offset == 1


def test_corrupt_append_writes_nothing(tmp_path):
    log = open_log(tmp_path)
    good = batch(1)
    bad = batch(1)
    bad[-1] ^= 1
    with pytest.raises(CorruptBatchError):
        log.append(good + bad, 0, NOW)
    assert log.log_end_offset == 0
    assert log.size_bytes() == 0


def test_batch_above_max_message_bytes_is_rejected(tmp_path):
    log = open_log(tmp_path, max_message_bytes=200)
    with pytest.raises(BatchTooLargeError):
        log.append(batch(1, size=500), 0, NOW)
    log.append(batch(1, size=10), 0, NOW)
    assert log.log_end_offset == 1


def test_log_append_time_topic_stamps_batches(tmp_path):
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    r = log.append(batch(2, ts=5), 0, NOW + 7)
    assert r.log_append_time_ms == NOW + 7
    assert r.max_timestamp == NOW + 7
    (h,) = headers_of(log.read(0, 1 << 20))  # CRC still valid
    assert h.timestamp_type == 1 and h.max_timestamp == NOW + 7


def test_read_starts_at_batch_containing_offset(tmp_path):
    log = open_log(tmp_path)
    for _ in range(5):
        log.append(batch(10), 0, NOW)
    hs = headers_of(log.read(23, 1 << 20))
    assert hs[0].base_offset == 20
    assert hs[-1].last_offset == 49


def test_read_at_log_end_returns_none_and_beyond_raises(tmp_path):
    log = open_log(tmp_path)
    log.append(batch(3), 0, NOW)
    assert log.read(3, 100) is None
    with pytest.raises(OffsetOutOfRangeError):
        log.read(4, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)


def test_read_covers_whole_batches_within_max_bytes(tmp_path):
    log = open_log(tmp_path)
    sizes = [len(log.append(batch(1, size=100), 0, NOW).batches) for _ in range(10)]
    one = len(batch(1, size=100))
    assert sizes == [1] * 10
    s = log.read(0, one * 3 + one // 2)
    assert s.length == one * 3
    assert len(headers_of(s)) == 3


def test_read_returns_one_whole_batch_larger_than_max_bytes(tmp_path):
    """KIP-74: the first batch is returned whole even above max_bytes."""
    log = open_log(tmp_path)
    log.append(batch(1, size=5000), 0, NOW)
    log.append(batch(1, size=10), 0, NOW)
    s = log.read(0, 100)
    assert s.length == len(batch(1, size=5000))
    assert [h.base_offset for h in headers_of(s)] == [0]


def test_read_stops_before_upper_bound(tmp_path):
    log = open_log(tmp_path)
    for _ in range(4):
        log.append(batch(5), 0, NOW)
    hs = headers_of(log.read(0, 1 << 20, upper_bound=12))
    assert [h.base_offset for h in hs] == [0, 5]  # batch 10-14 holds the bound
    assert log.read(10, 1 << 20, upper_bound=12) is None
    assert log.read(12, 1 << 20, upper_bound=12) is None
    assert headers_of(log.read(0, 1 << 20, upper_bound=20))[-1].last_offset == 19


def test_read_never_crosses_a_segment(tmp_path):
    log = open_log(tmp_path, segment_bytes=1000)
    for _ in range(20):
        log.append(batch(1, size=200), 0, NOW)
    assert log.num_segments > 2
    s = log.read(0, 1 << 20)
    hs = headers_of(s)
    assert hs[-1].next_offset == log.segments[1].base_offset
    s2 = log.read(hs[-1].next_offset, 1 << 20)
    assert headers_of(s2)[0].base_offset == hs[-1].next_offset


def test_roll_by_size(tmp_path):
    log = open_log(tmp_path, segment_bytes=1000)
    one = len(batch(1, size=200))
    for _ in range(10):
        log.append(batch(1, size=200), 0, NOW)
    per_segment = 1000 // one
    assert [s.base_offset for s in log.segments] == list(range(0, 10, per_segment))
    assert all(s.size <= 1000 for s in log.segments)


def test_an_append_larger_than_a_segment_is_refused_and_writes_nothing(tmp_path):
    """Kafka's RecordBatchTooLargeException: no segment could hold it."""
    log = open_log(tmp_path, segment_bytes=500)
    log.append(batch(1, size=10), 0, NOW)
    with pytest.raises(RecordListTooLargeError, match="exceeds the segment size of 500"):
        log.append(batch(1, size=2000), 0, NOW)
    assert (log.log_end_offset, log.num_segments) == (1, 1)


def test_the_segment_size_bounds_an_append_as_stored_after_recompression(tmp_path):
    """Kafka compares the batch it will store (recompressed to the topic's codec)."""
    log = open_log(tmp_path, segment_bytes=1000, compression_type="gzip")
    log.append(batch(1, size=5000), 0, NOW)  # 5 KB sent, a hundred bytes or so stored
    assert log.log_end_offset == 1


def test_an_append_larger_than_the_space_left_rolls_first(tmp_path):
    log = open_log(tmp_path, segment_bytes=500)
    log.append(batch(1, size=10), 0, NOW)
    log.append(batch(1, size=400), 0, NOW)
    assert [s.base_offset for s in log.segments] == [0, 1]


def test_roll_by_time_uses_batch_timestamps(tmp_path):
    log = open_log(tmp_path, segment_ms=1000)
    log.append(batch(1, ts=NOW), 0, NOW)
    log.append(batch(1, ts=NOW + 1000), 0, NOW)
    assert log.num_segments == 1
    log.append(batch(1, ts=NOW + 1001), 0, NOW)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_roll_by_time_uses_wall_clock_without_timestamps(tmp_path):
    log = open_log(tmp_path, segment_ms=1000)
    log.append(batch(1, ts=-1), 0, NOW)
    log.append(batch(1, ts=-1), 0, NOW + 500)
    assert log.num_segments == 1
    log.append(batch(1, ts=-1), 0, NOW + 1001)
    assert log.num_segments == 2


def test_offset_index_gets_entry_per_interval_and_lookup_finds_batch(tmp_path):
    log = open_log(tmp_path, index_interval_bytes=1000)
    one = len(batch(1, size=100))
    for _ in range(100):
        log.append(batch(1, size=100), 0, NOW)
    index = log.active_segment.index
    assert len(index) == pytest.approx(100 * one / (1000 + one), abs=2)
    for target in (0, 1, 37, 99):
        off, pos = index.lookup(target)
        assert off <= target
        assert read_header(log.active_segment.read_bytes(pos, 61)).base_offset == off
        assert log.active_segment.find(target).base_offset == target


def test_index_file_is_persisted_on_close(tmp_path):
    log = open_log(tmp_path, index_interval_bytes=100)
    for _ in range(50):
        log.append(batch(1, size=100), 0, NOW)
    entries = len(log.active_segment.index)
    log.close()
    assert os.path.getsize(tmp_path / "topic-0" / "00000000000000000000.index") == entries * 8


def test_offset_for_timestamp_finds_first_record_at_or_after(tmp_path):
    log = open_log(tmp_path, index_interval_bytes=200, segment_bytes=2000)
    for i in range(60):
        log.append(batch(2, ts=NOW + 10 * i), 0, NOW)
    assert log.num_segments > 2
    assert log.offset_for_timestamp(NOW) == (0, NOW)
    assert log.offset_for_timestamp(NOW + 95) == (20, NOW + 100)
    assert log.offset_for_timestamp(NOW + 100) == (20, NOW + 100)
    assert log.offset_for_timestamp(NOW + 10 * 59) == (118, NOW + 590)
    assert log.offset_for_timestamp(NOW + 10 * 59 + 1) is None


def test_offset_for_timestamp_resolves_record_within_batch(tmp_path):
    log = open_log(tmp_path)
    recs = [Record(None, b"a", NOW + 1), Record(None, b"b", NOW + 5), Record(None, b"c", NOW + 9)]
    log.append(encode_batch(recs, NOW + 1), 0, NOW)
    assert log.offset_for_timestamp(NOW + 4) == (1, NOW + 5)


def test_offset_for_timestamp_handles_out_of_order_timestamps(tmp_path):
    log = open_log(tmp_path, index_interval_bytes=50)
    for ts in (100, 300, 200, 400, 250):
        log.append(batch(1, ts=NOW + ts), 0, NOW)
    assert log.offset_for_timestamp(NOW + 250) == (1, NOW + 300)
    assert log.offset_for_timestamp(NOW + 350) == (3, NOW + 400)


def test_max_timestamp_reports_record_with_largest_timestamp(tmp_path):
    log = open_log(tmp_path, segment_bytes=300)
    assert log.max_timestamp() == (-1, -1)
    for ts in (100, 900, 300):
        log.append(batch(1, ts=NOW + ts), 0, NOW)
    recs = [Record(None, b"a", NOW + 10), Record(None, b"b", NOW + 950), Record(None, b"c", NOW)]
    log.append(encode_batch(recs, NOW), 0, NOW)
    assert log.max_timestamp() == (NOW + 950, 4)


def test_delete_records_moves_log_start_and_drops_whole_segments(tmp_path):
    log = open_log(tmp_path, segment_bytes=500)
    for _ in range(20):
        log.append(batch(2, size=50), 0, NOW)
    log.high_watermark = log.log_end_offset
    bases = [s.base_offset for s in log.segments]
    target = bases[2] + 1
    assert log.delete_records_before(target) == target
    assert log.log_start_offset == target
    assert log.segments[0].base_offset == bases[2]
    assert not (tmp_path / "topic-0" / f"{bases[0]:020d}.log").exists()
    with pytest.raises(OffsetOutOfRangeError):
        log.read(target - 1, 100)
    assert headers_of(log.read(target, 100))[0].base_offset == target - 1


def test_delete_records_beyond_high_watermark_is_rejected(tmp_path):
    log = open_log(tmp_path)
    log.append(batch(5), 0, NOW)
    log.high_watermark = 3
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(4)
    assert log.delete_records_before(-1) == 3


def test_log_start_offset_survives_reopen(tmp_path):
    log = open_log(tmp_path)
    log.append(batch(5), 0, NOW)
    log.high_watermark = 5
    log.delete_records_before(3)
    log.close()
    assert open_log(tmp_path).log_start_offset == 3


def test_high_watermark_never_moves_backwards_or_past_log_end(tmp_path):
    log = open_log(tmp_path)
    log.append(batch(5), 0, NOW)
    log.high_watermark = 3
    log.high_watermark = 2
    assert log.high_watermark == 3
    log.high_watermark = 99
    assert log.high_watermark == 5


def test_retention_by_time_deletes_old_segments_only(tmp_path):
    log = open_log(tmp_path, segment_bytes=400, retention_ms=1000)
    for i in range(10):
        log.append(batch(1, ts=NOW + 100 * i, size=150), 0, NOW)
    log.high_watermark = log.log_end_offset
    before = log.size_bytes()
    # now = NOW + 1550: segments whose largest timestamp is below NOW + 550 are expired.
    freed = log.apply_retention(NOW + 1550)
    assert freed > 0 and log.size_bytes() == before - freed
    assert all(s.max_timestamp >= NOW + 550 for s in log.segments)
    assert log.log_start_offset == log.segments[0].base_offset
    assert log.segments[0].base_offset > 0


def test_retention_by_time_rolls_and_deletes_expired_active_segment(tmp_path):
    log = open_log(tmp_path, retention_ms=1000)
    log.append(batch(3, ts=NOW), 0, NOW)
    log.high_watermark = 3
    assert log.apply_retention(NOW + 5000) > 0
    assert log.num_segments == 1
    assert log.active_segment.base_offset == 3
    assert (log.log_start_offset, log.log_end_offset) == (3, 3)
    log.append(batch(1), 0, NOW)
    assert log.log_end_offset == 4


def test_retention_keeps_data_above_high_watermark(tmp_path):
    log = open_log(tmp_path, segment_bytes=400, retention_ms=1000)
    for _ in range(10):
        log.append(batch(1, ts=NOW, size=150), 0, NOW)
    log.high_watermark = 0
    assert log.apply_retention(NOW + 10_000) == 0
    log.high_watermark = log.segments[2].base_offset
    log.apply_retention(NOW + 10_000)
    assert log.segments[0].base_offset == log.high_watermark


def test_retention_by_bytes_keeps_log_within_limit(tmp_path):
    log = open_log(tmp_path, segment_bytes=400, retention_bytes=1000, retention_ms=-1)
    for _ in range(20):
        log.append(batch(1, size=150), 0, NOW)
    log.high_watermark = log.log_end_offset
    before = log.size_bytes()
    freed = log.apply_retention(NOW)
    # Kafka deletes oldest segments while the log stays at or above retention.bytes.
    assert freed > 0 and log.size_bytes() == before - freed
    assert log.size_bytes() >= 1000
    assert log.size_bytes() - log.segments[0].size < 1000


@pytest.mark.parametrize("policy", ["compact", ""])
def test_a_policy_without_delete_skips_time_and_size_retention(tmp_path, policy):
    """compact alone, or an empty cleanup.policy (Kafka 4: neither retention nor
    compaction), keeps every segment however old or large the log."""
    log = open_log(
        tmp_path, segment_bytes=400, retention_ms=10, retention_bytes=100, cleanup_policy=policy
    )
    for _ in range(10):
        log.append(batch(1, size=150, key=b"k"), 0, NOW)
    log.high_watermark = log.log_end_offset
    assert log.apply_retention(NOW + 10**9) == 0
    assert (log.config.deletes, log.config.compacts) == (False, policy == "compact")


def test_slice_of_deleted_segment_stays_readable_until_released(tmp_path):
    log = open_log(tmp_path, segment_bytes=400, retention_ms=1000)
    for _ in range(6):
        log.append(batch(1, size=150), 0, NOW)
    log.high_watermark = log.log_end_offset
    s = log.read(0, 1 << 20)
    expected = s.read()
    f = s.file
    log.apply_retention(NOW + 10**6)
    assert not (tmp_path / "topic-0" / "00000000000000000000.log").exists()
    assert not f.closed
    assert os.pread(f.fileno(), s.length, s.position) == expected
    s.release()
    assert f.closed


def test_dropping_last_reference_to_slice_releases_file(tmp_path):
    log = open_log(tmp_path, segment_bytes=400, retention_ms=1000)
    for _ in range(6):
        log.append(batch(1, size=150), 0, NOW)
    log.high_watermark = log.log_end_offset
    s = log.read(0, 1 << 20)
    f = s.file
    log.apply_retention(NOW + 10**6)
    del s
    assert f.closed


def test_update_config_changes_roll_size(tmp_path):
    log = open_log(tmp_path)
    log.append(batch(1, size=300), 0, NOW)
    log.update_config(LogConfig(segment_bytes=400))  # two 370-byte batches no longer fit
    log.append(batch(1, size=300), 0, NOW)
    assert log.num_segments == 2


def test_needs_flush_follows_message_and_time_policy(tmp_path):
    log = open_log(tmp_path, flush_interval_messages=3, flush_interval_ms=1000)
    assert not log.needs_flush(NOW)
    log.append(batch(2), 0, NOW)
    assert not log.needs_flush(NOW)
    assert log.needs_flush(NOW + 1000)
    log.append(batch(1), 0, NOW)
    assert log.needs_flush(NOW)
    log.flush()
    assert not log.needs_flush(NOW)
    assert log.flushed_offset == 3


def test_rolled_segment_awaits_background_flush(tmp_path):
    log = open_log(tmp_path, segment_bytes=400)
    log.append(batch(1, size=250), 0, NOW)
    log.flush()
    log.append(batch(1, size=250), 0, NOW)
    assert log.num_segments == 2
    assert log.needs_flush(NOW)
    log.flush()
    assert not log.needs_flush(NOW)


def test_an_acknowledgement_fsync_covers_only_segments_from_the_recovery_point(tmp_path):
    log = open_log(tmp_path, segment_bytes=400)
    for _ in range(20):
        log.append(batch(1, size=250), 0, NOW)
    job = log.prepare_flush(data_only=True)
    job.run()
    log.complete_flush(job)
    assert log.num_segments == 20
    log.append(batch(1, size=250), 0, NOW)  # rolls to a 21st segment
    job = log.prepare_flush(data_only=True)
    assert [s.base_offset for s in job.segments] == [20]


def test_truncate_to_removes_tail_and_appends_continue(tmp_path):
    log = open_log(tmp_path, segment_bytes=400)
    for _ in range(10):
        log.append(batch(2, size=100), 0, NOW)
    log.high_watermark = 20
    log.truncate_to(7)
    assert log.log_end_offset == 6  # the batch holding 7 starts at 6
    assert log.high_watermark == 6
    assert headers_of(log.read(0, 1 << 20, 6))[-1].last_offset <= 5
    r = log.append(batch(1), 0, NOW)
    assert r.base_offset == 6


def test_delete_removes_directory(tmp_path):
    log = open_log(tmp_path)
    log.append(batch(1), 0, NOW)
    log.delete()
    assert not (tmp_path / "topic-0").exists()


def test_closed_log_rejects_use(tmp_path):
    log = open_log(tmp_path)
    log.close()
    with pytest.raises(Exception, match="closed"):
        log.append(batch(1), 0, NOW)


def test_directory_without_partition_suffix_is_rejected(tmp_path):
    with pytest.raises(Exception, match="topic"):
        PartitionLog.open(Path(tmp_path / "nopartition"), LogConfig(), NOW)


def test_a_writable_view_is_appended_in_place_without_a_copy(tmp_path):
    log = open_log(tmp_path)
    log.append(batch(2), 0, NOW)
    frame = bytearray(b"head") + batch(3)
    view = memoryview(frame)[4:]
    result = log.append(view, 0, NOW)
    assert (result.base_offset, result.last_offset) == (2, 4)
    assert int.from_bytes(frame[4:12], "big") == 2  # the base offset patched into the frame
    assert [(h.base_offset, h.last_offset) for h in headers_of(log.read(2, 1 << 20))] == [(2, 4)]


def test_a_read_only_view_is_copied_before_offsets_are_patched(tmp_path):
    log = open_log(tmp_path)
    log.append(batch(2), 0, NOW)
    original = bytes(batch(1))
    log.append(memoryview(original), 0, NOW)
    assert original == bytes(batch(1))
    assert [h.base_offset for h in headers_of(log.read(2, 1 << 20))] == [2]


def test_a_read_knows_the_base_offset_of_the_batch_after_it(tmp_path):
    log = open_log(tmp_path)
    for _ in range(3):
        log.append(batch(2), 0, NOW)
    with log.read(0, 1) as first:  # one whole batch (KIP-74)
        assert first.next_base_offset() == 2
    with log.read(4, 1 << 20) as last:
        assert last.next_base_offset() is None


def test_reserved_space_after_the_data_is_not_taken_for_a_next_batch(tmp_path):
    log = open_log(tmp_path, preallocate=True)
    log.append(batch(2), 0, NOW)
    assert os.path.getsize(log.active_segment.log_path) > log.active_segment.size
    with log.read(0, 1 << 20) as whole:
        assert whole.next_base_offset() is None


def test_segment_jitter_rolls_the_active_segment_that_much_before_segment_ms(tmp_path, monkeypatch):
    """segment.jitter.ms: a segment rolls once it spans more than segment.ms minus its
    jitter (drawn below min(segment.jitter.ms, segment.ms))."""
    now = 1_700_000_000_000
    monkeypatch.setattr(PartitionLog, "draw_jitter", staticmethod(lambda bound: bound - 1))
    for jitter, segments in ((0, 1), (400, 2)):
        config = LogConfig(segment_ms=1000, segment_jitter_ms=jitter)
        plog = PartitionLog.open(tmp_path / f"t-{jitter}", config, now)
        try:
            plog.append(encode_batch([b"a"], now), 0, now)
            plog.append(encode_batch([b"b"], now + 700), 0, now + 700)
            assert len(plog.segments) == segments
        finally:
            plog.close()


def test_high_watermark_reopens_from_checkpoint_not_log_end(tmp_path):
    log = open_log(tmp_path)
    log.append(batch(5), 0, NOW)
    log.high_watermark = 3
    log.close()
    log = open_log(tmp_path)
    assert (log.log_end_offset, log.high_watermark) == (5, 3)


def test_high_watermark_checkpointed_while_open_survives_a_crash(tmp_path):
    log = open_log(tmp_path)
    log.append(batch(5), 0, NOW)
    log.flush()
    log.high_watermark = 2
    log.checkpoint_high_watermark()
    log.high_watermark = 4  # moved after the last checkpoint; no clean close follows
    log = open_log(tmp_path)
    assert (log.log_end_offset, log.high_watermark) == (5, 2)


def test_legacy_offsets_before_answers_segment_bases_and_log_end_newest_first(tmp_path):
    # ListOffsets v0 as Kafka 3.9's fetchOffsetsBefore: segment base offsets with their
    # files' mtimes, plus the log end, newest first, at most max_num_offsets.
    log = open_log(tmp_path, segment_bytes=1000)
    for _ in range(12):
        log.append(batch(2, size=200), 0, NOW)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 3
    end = log.log_end_offset
    assert log.legacy_offsets_before(-1, 100) == [end, *reversed(bases)]
    assert log.legacy_offsets_before(-1, 2) == [end, bases[-1]]
    assert log.legacy_offsets_before(-2, 100) == [0]
    assert log.legacy_offsets_before(-1, 0) == []
    # By time: the newest entry last modified at or before the timestamp, then older.
    for i, seg in enumerate(log.segments):
        os.utime(seg.log_path, (1000 + i, 1000 + i))
    assert log.legacy_offsets_before(1_001_500, 2) == [bases[1], bases[0]]
    assert log.legacy_offsets_before(999_000, 5) == []
    log.high_watermark = end
    log.delete_records_before(bases[1] + 1)
    assert log.legacy_offsets_before(-2, 3) == [bases[1] + 1]


def test_every_move_of_a_log_start_is_counted(tmp_path):
    """LogStartMoves lets a parked Fetch know that no log start moved since its read."""
    log = open_log(tmp_path, segment_bytes=400, retention_ms=1000)
    for i in range(10):
        log.append(batch(1, ts=NOW + 100 * i, size=150), 0, NOW)
    log.high_watermark = log.log_end_offset

    def moves(change) -> int:  # type: ignore[no-untyped-def]
        before, start = LogStartMoves.count, log.log_start_offset
        change()
        assert log.log_start_offset != start
        return LogStartMoves.count - before

    assert moves(lambda: log.apply_retention(NOW + 1550)) >= 1
    assert moves(lambda: log.delete_records_before(log.log_start_offset + 1)) >= 1
    assert moves(lambda: log.truncate_to(log.log_start_offset - 1)) >= 1
    assert moves(lambda: log.truncate_fully_and_start_at(100)) == 1
    unmoved = LogStartMoves.count
    log.append(batch(1, ts=NOW + 2000), 0, NOW)
    log.read(100, 1 << 20)
    assert LogStartMoves.count == unmoved
