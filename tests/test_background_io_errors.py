"""An I/O error met by background work on a log (retention deleting segments, a deleted
topic's directory being renamed away, the log cleaner) takes that log directory offline
as an error on produce does (Kafka routes all of them through its LogDirFailureChannel),
instead of being logged and retried forever. The errors are injected by replacing the
one failing call: a real disk's EIO cannot be made on demand."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from disk_faults import eio

from compat_tests.waiting import eventually_async
from kbroker.protocol.batch import Record, encode_batch
from kbroker.storage import LogConfig, LogManager
from kbroker.storage import cleaner as cleaner_module
from kbroker.storage import manager as manager_module
from kbroker.storage import segment as segment_module
from kbroker.storage.cleaner import CleanerConfig

NOW = 1_700_000_000_000


def fill(plog, batches: int, ts: int = NOW, keyed: bool = False) -> None:
    for _ in range(batches):
        key = b"k" if keyed else None
        plog.append(encode_batch([Record(key, b"v" * 200, ts)], ts), 0, NOW)
    plog.high_watermark = plog.log_end_offset


def test_retention_failing_to_delete_a_segment_takes_its_log_directory_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = LogManager([tmp_path / "a", tmp_path / "b"])
    plog = m.create("t", 0, LogConfig(segment_bytes=300, retention_ms=1000), NOW)
    fill(plog, 5, ts=NOW - 10_000)
    lost: list[tuple[str, int]] = []
    m.dir_failure_listeners.append(lost.extend)
    monkeypatch.setattr(segment_module, "remove_file", eio)

    async def one_pass() -> None:
        task = asyncio.create_task(m.run_retention(0.01))
        await eventually_async(lambda: m.offline_dirs, timeout=5, what="the directory offline")
        task.cancel()

    asyncio.run(one_pass())
    monkeypatch.undo()
    assert list(m.offline_dirs) == [str(plog.directory.parent)]
    assert "Input/output error" in m.offline_dirs[str(plog.directory.parent)]
    assert lost == [("t", 0)] and m.get("t", 0) is None and plog.closed


def test_a_deleted_topic_whose_directory_cannot_be_renamed_takes_its_log_directory_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = LogManager([tmp_path / "a"])
    doomed = m.create("gone", 0, LogConfig(), NOW)
    other = m.create("kept", 0, LogConfig(), NOW)
    fill(doomed, 1)
    monkeypatch.setattr(manager_module.os, "rename", eio)
    m.delete_topic("gone")
    monkeypatch.undo()
    assert list(m.offline_dirs) == [str(tmp_path / "a")]
    assert m.get("kept", 0) is None and other.closed


def test_a_deleted_topic_already_gone_from_disk_is_not_an_io_error(tmp_path: Path) -> None:
    m = LogManager([tmp_path / "a"])
    plog = m.create("gone", 0, LogConfig(), NOW)
    os.rename(plog.directory, tmp_path / "elsewhere")
    m.delete_topic("gone")
    assert m.offline_dirs == {}


def test_the_log_cleaner_failing_on_a_log_takes_its_log_directory_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = LogManager([tmp_path / "a"])
    config = LogConfig(cleanup_policy="compact", segment_bytes=300)
    plog = m.create("compacted", 0, config, NOW)
    fill(plog, 6, keyed=True)
    monkeypatch.setattr(cleaner_module, "run_plan", eio)

    async def run_cleaner() -> None:
        task = asyncio.create_task(m.run_cleaner(CleanerConfig(backoff_ms=10)))
        await eventually_async(lambda: m.offline_dirs, timeout=5, what="the directory offline")
        task.cancel()
        assert m.cleaner is not None
        m.cleaner.stop()

    asyncio.run(run_cleaner())
    assert list(m.offline_dirs) == [str(tmp_path / "a")]
    assert m.get("compacted", 0) is None and plog.closed
