"""Opening a log after a crash or a clean shutdown."""

import os
import time

import pytest

from kbroker.protocol.batch import encode_batch, validate_batches
from kbroker.storage import LogConfig, PartitionLog
from kbroker.storage import log as log_module
from kbroker.storage import segment as segment_module

NOW = 1_700_000_000_000


def batch(n=1, ts=NOW, size=10):
    return encode_batch([b"v" * size for _ in range(n)], ts)


def open_log(path, **cfg) -> PartitionLog:
    return PartitionLog.open(path, LogConfig(**cfg), NOW)


def crash(log: PartitionLog) -> None:
    """Drop the log as a killed process would: no flush, no checkpoint."""
    for seg in log.segments:
        seg.close()


def read_all(log: PartitionLog) -> list[tuple[int, int]]:
    out = []
    offset = log.log_start_offset
    while True:
        s = log.read(offset, 1 << 20)
        if s is None:
            return out
        for h in validate_batches(s.read(), 1 << 30):
            out.append((h.base_offset, h.last_offset))
            offset = h.last_offset + 1


def active_log_file(log: PartitionLog) -> str:
    return log.active_segment.log_path


def test_torn_tail_is_truncated_to_last_whole_batch(tmp_path):
    d = tmp_path / "t-0"
    log = open_log(d)
    for _ in range(5):
        log.append(batch(2, size=100), 0, NOW)
    path = active_log_file(log)
    crash(log)
    size = os.path.getsize(path)
    os.truncate(path, size - 30)
    log = open_log(d)
    assert log.log_end_offset == 8
    assert log.recovered_bytes == len(batch(2, size=100)) - 30
    assert os.path.getsize(path) == size - len(batch(2, size=100))
    assert read_all(log)[-1] == (6, 7)
    assert log.append(batch(1), 0, NOW).base_offset == 8


def test_garbage_after_last_batch_is_truncated(tmp_path):
    d = tmp_path / "t-0"
    log = open_log(d)
    for _ in range(3):
        log.append(batch(1), 0, NOW)
    path = active_log_file(log)
    crash(log)
    good = os.path.getsize(path)
    with open(path, "ab") as f:
        f.write(os.urandom(500))
    log = open_log(d)
    assert os.path.getsize(path) == good
    assert log.log_end_offset == 3


def test_zero_filled_tail_is_truncated(tmp_path):
    d = tmp_path / "t-0"
    log = open_log(d)
    log.append(batch(1), 0, NOW)
    path = active_log_file(log)
    crash(log)
    with open(path, "ab") as f:
        f.write(b"\0" * 4096)
    log = open_log(d)
    assert log.log_end_offset == 1
    assert read_all(log) == [(0, 0)]


def test_crc_damage_truncates_from_damaged_batch(tmp_path):
    d = tmp_path / "t-0"
    log = open_log(d)
    one = len(batch(1, size=100))
    for _ in range(6):
        log.append(batch(1, size=100), 0, NOW)
    path = active_log_file(log)
    crash(log)
    with open(path, "r+b") as f:
        f.seek(one * 3 + 80)
        byte = f.read(1)
        f.seek(one * 3 + 80)
        f.write(bytes([byte[0] ^ 0xFF]))
    log = open_log(d)
    assert log.log_end_offset == 3
    assert read_all(log) == [(0, 0), (1, 1), (2, 2)]


def test_damaged_older_unflushed_segment_drops_later_segments(tmp_path):
    d = tmp_path / "t-0"
    log = open_log(d, segment_bytes=500)
    for _ in range(12):
        log.append(batch(1, size=150), 0, NOW)
    first_path = log.segments[0].log_path
    later = [s.log_path for s in log.segments[1:]]
    crash(log)
    with open(first_path, "r+b") as f:
        f.seek(250)
        f.write(b"\xff\xff")
    log = open_log(d, segment_bytes=500)
    assert log.num_segments == 1
    assert log.log_end_offset == 1
    assert not any(os.path.exists(p) for p in later)


def test_recovery_rebuilds_indexes_of_recovered_segment(tmp_path):
    d = tmp_path / "t-0"
    log = open_log(d, index_interval_bytes=200)
    for _ in range(30):
        log.append(batch(1, size=100), 0, NOW)
    entries = len(log.active_segment.index)
    idx_path = log.active_segment.index_path
    crash(log)
    with open(idx_path, "wb") as f:  # whatever the crash left there
        f.write(os.urandom(21))
    log = open_log(d, index_interval_bytes=200)
    assert len(log.active_segment.index) == entries
    assert os.path.getsize(idx_path) == entries * 8
    assert log.active_segment.find(17).base_offset == 17


def test_unclean_open_only_scans_segments_from_recovery_point(tmp_path, monkeypatch):
    d = tmp_path / "t-0"
    log = open_log(d, segment_bytes=500)
    for _ in range(12):
        log.append(batch(1, size=150), 0, NOW)
    log.flush()
    flushed_segments = log.num_segments
    for _ in range(6):
        log.append(batch(1, size=150), 0, NOW)
    total = log.num_segments
    crash(log)
    recovered = []
    original = segment_module.Segment.recover

    def spy(self, *a, **kw):
        recovered.append(self.base_offset)
        return original(self, *a, **kw)

    monkeypatch.setattr(segment_module.Segment, "recover", spy)
    log = open_log(d, segment_bytes=500)
    assert len(recovered) == total - flushed_segments  # from the segment holding offset 12
    assert log.log_end_offset == 18
    assert [b for b, _ in read_all(log)] == list(range(18))


def test_never_checkpointed_log_is_fully_recovered(tmp_path):
    d = tmp_path / "t-0"
    log = open_log(d, segment_bytes=500)
    for _ in range(8):
        log.append(batch(1, size=150), 0, NOW)
    crash(log)
    os.unlink(d / "partition.checkpoint") if (d / "partition.checkpoint").exists() else None
    log = open_log(d, segment_bytes=500)
    assert log.log_end_offset == 8
    assert len(read_all(log)) == 8


def test_clean_restart_skips_every_scan(tmp_path, monkeypatch):
    d = tmp_path / "t-0"
    log = open_log(d, segment_bytes=500)
    for _ in range(12):
        log.append(batch(1, size=150), 0, NOW)
    log.high_watermark = 12  # all committed, as a sole replica's leader makes it
    log.close()

    def forbidden(*a, **kw):
        raise AssertionError("a clean open must not scan")

    monkeypatch.setattr(segment_module, "scan_batches", forbidden)
    monkeypatch.setattr(segment_module.Segment, "recover", forbidden)
    log = open_log(d, segment_bytes=500)
    assert log.log_end_offset == 12
    assert log.high_watermark == 12
    assert not any(s.is_open for s in log.segments)


def test_appends_after_clean_restart_then_crash_are_recovered(tmp_path):
    d = tmp_path / "t-0"
    log = open_log(d)
    log.append(batch(3), 0, NOW)
    log.close()
    log = open_log(d)
    log.append(batch(2), 0, NOW)
    path = active_log_file(log)
    crash(log)
    os.truncate(path, os.path.getsize(path) - 5)
    log = open_log(d)
    assert log.log_end_offset == 3


def test_clean_state_not_matching_files_triggers_recovery(tmp_path):
    d = tmp_path / "t-0"
    log = open_log(d)
    log.append(batch(3), 0, NOW)
    path = active_log_file(log)
    log.close()
    with open(path, "ab") as f:
        f.write(b"junk")
    log = open_log(d)
    assert log.log_end_offset == 3
    assert log.recovered_bytes == 4
    assert os.path.getsize(path) == len(batch(3))


def test_missing_index_files_after_clean_close_are_rebuilt_on_use(tmp_path):
    d = tmp_path / "t-0"
    log = open_log(d, segment_bytes=2000, index_interval_bytes=200)
    for i in range(40):
        log.append(batch(1, ts=NOW + i, size=100), 0, NOW)
    log.close()
    for name in os.listdir(d):
        if name.endswith((".index", ".timeindex")):
            os.unlink(d / name)
    log = open_log(d, segment_bytes=2000, index_interval_bytes=200)
    assert [b for b, _ in read_all(log)] == list(range(40))
    assert log.offset_for_timestamp(NOW + 25) == (25, NOW + 25)
    assert log.max_timestamp() == (NOW + 39, 39)
    assert all(os.path.exists(s.index_path) for s in log.segments)


@pytest.mark.parametrize("damage", ["garbage", "odd_size", "wrong_positions"])
def test_corrupted_index_files_are_detected_and_rebuilt(tmp_path, damage):
    d = tmp_path / "t-0"
    cfg = dict(segment_bytes=3000, index_interval_bytes=200)
    log = open_log(d, **cfg)
    for i in range(60):
        log.append(batch(1, ts=NOW + i, size=100), 0, NOW)
    log.close()
    for name in os.listdir(d):
        if name.endswith(".index"):
            path = d / name
            size = os.path.getsize(path)
            with open(path, "r+b") as f:
                if damage == "garbage":
                    f.write(os.urandom(size))
                elif damage == "odd_size":
                    f.truncate(max(size - 3, 1))
                else:
                    # Plausible entries pointing into the middle of batches.
                    data = bytearray(f.read())
                    for i in range(4, len(data), 8):
                        data[i + 3] ^= 0x05
                    f.seek(0)
                    f.write(data)
    log = open_log(d, **cfg)
    for target in (0, 7, 31, 59):
        s = log.read(target, 1)
        (h,) = validate_batches(s.read(), 1 << 30)
        assert h.base_offset == target


def test_index_entries_pointing_inside_batches_do_not_cut_reads(tmp_path):
    d = tmp_path / "t-0"
    log = open_log(d, index_interval_bytes=200)
    for _ in range(30):
        log.append(batch(1, size=100), 0, NOW)
    path = log.active_segment.index_path
    log.close()
    with open(path, "r+b") as f:
        data = bytearray(f.read())
        for i in range(4, len(data), 8):
            data[i + 3] ^= 0x05
        f.seek(0)
        f.write(data)
    log = open_log(d, index_interval_bytes=200)
    one = len(batch(1, size=100))
    s = log.read(0, one * 4 + 7)  # ends inside the segment: the end is found from the index
    hs = validate_batches(s.read(), 1 << 30)
    assert [x.base_offset for x in hs] == [0, 1, 2, 3]


def test_corrupted_time_index_is_rebuilt(tmp_path):
    d = tmp_path / "t-0"
    log = open_log(d, index_interval_bytes=200)
    for i in range(30):
        log.append(batch(1, ts=NOW + i, size=100), 0, NOW)
    ti = log.active_segment.time_index_path
    log.close()
    with open(ti, "ab") as f:
        f.write(b"12345")
    log = open_log(d, index_interval_bytes=200)
    assert log.offset_for_timestamp(NOW + 20) == (20, NOW + 20)
    assert log.max_timestamp() == (NOW + 29, 29)


def test_empty_active_segment_left_by_roll_survives_crash(tmp_path):
    d = tmp_path / "t-0"
    log = open_log(d)
    log.append(batch(4), 0, NOW)
    log.roll(NOW)
    crash(log)
    log = open_log(d)
    assert log.num_segments == 2
    assert log.log_end_offset == 4
    assert log.append(batch(1), 0, NOW).base_offset == 4


def test_stale_temporary_files_are_removed_on_open(tmp_path):
    d = tmp_path / "t-0"
    log = open_log(d)
    log.close()
    (d / "partition.checkpoint.tmp").write_bytes(b"x")
    (d / "00000000000000000099.index").write_bytes(b"")
    open_log(d)
    assert not (d / "partition.checkpoint.tmp").exists()
    assert not (d / "00000000000000000099.index").exists()


@pytest.mark.slow
def test_hundred_partitions_of_ten_segments_reopen_cleanly_and_fast(tmp_path, monkeypatch):
    monkeypatch.setattr(log_module, "_fdatasync", lambda fd: None)
    monkeypatch.setattr(log_module, "_fsync", lambda fd: None)
    cfg = LogConfig(segment_bytes=1000)
    logs = []
    for p in range(100):
        log = PartitionLog.open(tmp_path / f"t-{p}", cfg, NOW)
        for _ in range(10):
            log.append(batch(4, size=200), 0, NOW)
        logs.append(log)
    assert all(log.num_segments == 10 for log in logs)
    for log in logs:
        log.close()
    start = time.perf_counter()
    reopened = [PartitionLog.open(tmp_path / f"t-{p}", cfg, NOW) for p in range(100)]
    elapsed = time.perf_counter() - start
    assert elapsed < 2.0
    assert all(log.log_end_offset == 40 and log.num_segments == 10 for log in reopened)
    assert [b for b, _ in read_all(reopened[57])] == list(range(0, 40, 4))


def test_a_log_closed_cleanly_opens_without_a_scan_and_one_left_open_is_recovered(tmp_path):
    from kbroker.protocol.batch import encode_batch as _encode
    from kbroker.storage import LogConfig as _Config
    from kbroker.storage import PartitionLog as _Log

    directory = tmp_path / "t-0"
    plog = _Log.open(directory, _Config(), 1000)
    plog.append(_encode([(None, b"v")], base_timestamp=1000), 0, 1000)
    plog.close()
    reopened = _Log.open(directory, _Config(), 1000)
    assert reopened.opened_cleanly
    reopened.append(_encode([(None, b"w")], base_timestamp=1000), 0, 1000)
    reopened.flush()  # not closed: as after kill -9
    crashed = _Log.open(directory, _Config(), 1000)
    assert not crashed.opened_cleanly
    assert crashed.log_end_offset == 2
