"""Logs that fsync every append hand the new bytes to the disk as soon as they are written."""

import os

from test_storage_recovery import NOW, batch, open_log, read_all

from kbroker.storage import segment as segment_module
from kbroker.storage.writeback import start_writeback


def record_writebacks(monkeypatch) -> list[tuple[int, int]]:
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(
        segment_module, "start_writeback", lambda fd, offset, length: calls.append((offset, length))
    )
    return calls


def test_an_fsync_per_message_log_starts_the_write_of_the_first_append_an_fsync_covers(
    tmp_path, monkeypatch
):
    calls = record_writebacks(monkeypatch)
    log = open_log(tmp_path / "t-0", flush_interval_messages=1)
    one = len(batch(1))
    log.append(batch(1), 0, NOW)
    log.append(batch(1), 0, NOW)  # shares the coming fsync: no second call
    assert calls == [(0, one)]
    log.flush()
    log.append(batch(1), 0, NOW)
    assert calls == [(0, one), (2 * one, one)]


def test_the_default_flush_policy_leaves_writeback_to_the_kernel(tmp_path, monkeypatch):
    calls = record_writebacks(monkeypatch)
    log = open_log(tmp_path / "t-0")
    log.append(batch(1), 0, NOW)
    assert calls == []


def test_starting_writeback_leaves_the_bytes_as_written(tmp_path):
    path = tmp_path / "f"
    fd = os.open(path, os.O_CREAT | os.O_RDWR)
    try:
        os.pwrite(fd, b"abc" * 1000, 0)
        start_writeback(fd, 0, 3000)
        start_writeback(fd, 10**9, 10)  # past the end: ignored
        assert os.pread(fd, 3000, 0) == b"abc" * 1000
    finally:
        os.close(fd)


def test_an_fsync_per_message_log_reads_back_what_it_wrote(tmp_path):
    log = open_log(tmp_path / "t-0", flush_interval_messages=1)
    for _ in range(3):
        log.append(batch(1), 0, NOW)
    log.flush()
    assert read_all(log) == [(0, 0), (1, 1), (2, 2)]
