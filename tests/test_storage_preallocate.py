"""Preallocated segments: space reserved ahead of the data, given back when the segment
stops being active, and never mistaken for data or for a torn write."""

import os
from pathlib import Path

from test_storage_recovery import NOW, active_log_file, batch, crash, open_log, read_all

from kbroker.storage import PartitionLog
from kbroker.storage.config import PREALLOCATE_CHUNK


def test_the_default_flush_policy_does_not_preallocate(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append(batch(1), 0, NOW)
    assert os.path.getsize(active_log_file(log)) == log.active_segment.size


def test_preallocate_reserves_a_chunk_ahead_of_the_data(tmp_path):
    log = open_log(tmp_path / "t-0", preallocate=True)
    log.append(batch(1), 0, NOW)
    assert os.path.getsize(active_log_file(log)) == PREALLOCATE_CHUNK
    assert log.active_segment.size == len(batch(1))


def test_fsync_on_every_message_preallocates(tmp_path):
    log = open_log(tmp_path / "t-0", flush_interval_messages=1)
    log.append(batch(1), 0, NOW)
    assert os.path.getsize(active_log_file(log)) == PREALLOCATE_CHUNK


def test_the_reservation_never_exceeds_the_segment_size(tmp_path):
    log = open_log(tmp_path / "t-0", preallocate=True, segment_bytes=4096)
    log.append(batch(1), 0, NOW)
    assert os.path.getsize(active_log_file(log)) == 4096


def test_appends_past_the_reservation_reserve_again(tmp_path):
    log = open_log(tmp_path / "t-0", preallocate=True)
    big = batch(1, size=PREALLOCATE_CHUNK // 2)
    for _ in range(3):
        log.append(big, 0, NOW)
    data = log.active_segment.size
    assert data > PREALLOCATE_CHUNK
    assert data <= os.path.getsize(active_log_file(log)) <= data + PREALLOCATE_CHUNK
    assert read_all(log) == [(0, 0), (1, 1), (2, 2)]


def test_a_rolled_segment_gives_its_reserved_space_back(tmp_path):
    log = open_log(tmp_path / "t-0", preallocate=True, segment_bytes=500)
    for _ in range(4):
        log.append(batch(1, size=150), 0, NOW)
    assert log.num_segments > 1
    for seg in log.segments[:-1]:
        assert os.path.getsize(seg.log_path) == seg.size


def preallocated_log(d: Path, records: int) -> tuple[PartitionLog, str]:
    """A preallocating log in `d` holding `records` one-record batches, and the path of
    its active segment's file."""
    log = open_log(d, preallocate=True)
    for _ in range(records):
        log.append(batch(1), 0, NOW)
    return log, active_log_file(log)


def test_a_clean_close_gives_the_space_back_and_reopens_without_recovery(tmp_path):
    d = tmp_path / "t-0"
    log, path = preallocated_log(d, 3)
    log.close()
    assert os.path.getsize(path) == 3 * len(batch(1))
    log = open_log(d, preallocate=True)
    assert log.opened_cleanly
    assert log.append(batch(1), 0, NOW).base_offset == 3


def test_after_a_crash_the_unwritten_space_is_cut_without_counting_as_torn(tmp_path):
    d = tmp_path / "t-0"
    log, path = preallocated_log(d, 3)
    crash(log)
    log = open_log(d, preallocate=True)
    assert not log.opened_cleanly
    assert log.recovered_bytes == 0
    assert os.path.getsize(path) == 3 * len(batch(1))
    assert read_all(log) == [(0, 0), (1, 1), (2, 2)]
    assert log.append(batch(1), 0, NOW).base_offset == 3


def test_a_torn_write_into_reserved_space_is_cut_and_counted(tmp_path):
    d = tmp_path / "t-0"
    log, path = preallocated_log(d, 2)
    end = log.active_segment.size
    crash(log)
    with open(path, "r+b") as f:
        f.seek(end)
        f.write(batch(1)[:30])  # half a batch landed, the rest of the space is zeros
    log = open_log(d, preallocate=True)
    assert log.recovered_bytes == 30
    assert read_all(log) == [(0, 0), (1, 1)]


def test_an_untrimmed_older_segment_keeps_the_segments_after_it(tmp_path):
    """A crash can leave a rolled segment with its reserved zeros still on disk; that
    is unwritten space, not damage, so nothing after it may be dropped."""
    d = tmp_path / "t-0"
    log = open_log(d, segment_bytes=500)
    for _ in range(6):
        log.append(batch(1, size=150), 0, NOW)
    first = log.segments[0].log_path
    segments = log.num_segments
    crash(log)
    with open(first, "ab") as f:
        f.write(b"\0" * 8192)
    log = open_log(d, segment_bytes=500)
    assert log.num_segments == segments
    assert log.recovered_bytes == 0
    assert read_all(log) == [(i, i) for i in range(6)]


def test_truncation_inside_the_active_segment_drops_the_reservation(tmp_path):
    log = open_log(tmp_path / "t-0", preallocate=True)
    for _ in range(4):
        log.append(batch(1), 0, NOW)
    log.truncate_to(2)
    path = active_log_file(log)
    assert os.path.getsize(path) == 2 * len(batch(1))
    log.append(batch(1), 0, NOW)
    assert os.path.getsize(path) == 2 * len(batch(1)) + PREALLOCATE_CHUNK
    assert read_all(log) == [(0, 0), (1, 1), (2, 2)]


def test_a_large_append_keeps_blocks_ahead_without_growing_the_file(tmp_path):
    from kbroker.storage.segment import KEEP_AHEAD, KEEP_MIN_APPEND

    log = open_log(tmp_path / "t-0")
    log.append(batch(1), 0, NOW)
    path = active_log_file(log)
    small = os.stat(path).st_blocks * 512
    assert small < KEEP_MIN_APPEND  # a small append keeps nothing ahead
    log.append(batch(1, size=KEEP_MIN_APPEND), 0, NOW)
    st = os.stat(path)
    assert st.st_size == log.active_segment.size  # readers see the data's end only
    if st.st_blocks * 512 < KEEP_AHEAD:  # the filesystem cannot keep blocks past the end
        return
    data = log.active_segment.size
    log.close()
    st = os.stat(path)
    assert st.st_size == data
    assert st.st_blocks * 512 < st.st_size + 64 * 1024  # given back when it closes
    log = open_log(tmp_path / "t-0")
    assert [offset for offset, _ in read_all(log)] == [0, 1]


def test_a_rolled_segment_gives_its_kept_blocks_back(tmp_path):
    from kbroker.storage.segment import KEEP_MIN_APPEND

    log = open_log(tmp_path / "t-0", segment_bytes=3 * KEEP_MIN_APPEND)
    for _ in range(4):
        log.append(batch(1, size=KEEP_MIN_APPEND), 0, NOW)
    assert log.num_segments > 1
    for seg in log.segments[:-1]:
        st = os.stat(seg.log_path)
        assert st.st_size == seg.size
        assert st.st_blocks * 512 < seg.size + 64 * 1024
