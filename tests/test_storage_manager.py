"""LogManager: partitions across log dirs, topic deletion, background retention, group commit."""

import asyncio
import errno
import threading
import time

import pytest

from compat_tests.waiting import eventually, eventually_async
from kbroker.protocol.batch import encode_batch, validate_batches
from kbroker.storage import LogConfig, LogManager
from kbroker.storage import log as log_module
from kbroker.storage.checkpoint import read_checkpoint

NOW = 1_700_000_000_000


def batch(n=1, ts=NOW, size=10):
    return encode_batch([b"v" * size for _ in range(n)], ts)


def test_create_places_partitions_in_least_loaded_dir(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    m = LogManager(dirs)
    logs = [m.create("t", p, LogConfig(), NOW) for p in range(4)]
    parents = sorted(log.directory.parent.name for log in logs)
    assert parents == ["a", "a", "b", "b"]
    assert m.get("t", 2) is logs[2]
    assert m.get("t", 9) is None
    assert m.create("t", 2, LogConfig(), NOW) is logs[2]


def test_load_all_reopens_every_partition_with_its_config(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    m = LogManager(dirs)
    for p in range(3):
        m.create("orders", p, LogConfig(), NOW).append(batch(p + 1), 0, NOW)
    m.create("my-topic", 0, LogConfig(), NOW)
    m.close_all()
    (dirs[0] / "not a partition").mkdir()
    seen = []

    def config_for(topic, partition):
        seen.append((topic, partition))
        return LogConfig(retention_ms=123)

    m2 = LogManager(dirs)
    m2.load_all(config_for, NOW)
    assert sorted(seen) == [("my-topic", 0), ("orders", 0), ("orders", 1), ("orders", 2)]
    assert m2.get("orders", 2).log_end_offset == 3
    assert m2.get("orders", 2).config.retention_ms == 123
    assert len(list(m2.logs())) == 4


def test_delete_topic_removes_its_partitions_only(tmp_path):
    m = LogManager([tmp_path])
    a = m.create("a", 0, LogConfig(), NOW)
    a.append(batch(2), 0, NOW)
    a.high_watermark = 2
    m.create("a", 1, LogConfig(), NOW)
    m.create("b", 0, LogConfig(), NOW)
    s = a.read(0, 1 << 20)
    m.delete_topic("a")
    assert m.get("a", 0) is None and m.get("a", 1) is None
    assert m.get("b", 0) is not None
    eventually(  # removal runs in a background thread
        lambda: len(list(tmp_path.iterdir())) <= 1, timeout=5, what="a's directories removed"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b-0"]
    assert len(validate_batches(s.read(), 1 << 30)) == 1  # in-flight slice still readable
    s.release()


def test_leftover_deletion_directories_are_removed_on_load(tmp_path):
    (tmp_path / "t-0.abc-delete").mkdir()
    m = LogManager([tmp_path])
    m.load_all(lambda t, p: LogConfig(), NOW)
    assert list(tmp_path.iterdir()) == []


def test_flush_for_ack_shares_one_fsync_between_concurrent_callers(tmp_path, monkeypatch):
    runs = []
    original = log_module.FlushJob.run

    def counting_run(self):
        runs.append(threading.current_thread().name)
        original(self)

    monkeypatch.setattr(log_module.FlushJob, "run", counting_run)
    monkeypatch.setattr(log_module.FlushJob, "run_on_owner_thread", counting_run)

    async def scenario():
        m = LogManager([tmp_path])
        log = m.create("t", 0, LogConfig(flush_interval_messages=1), NOW)

        async def produce():
            log.append(batch(1), 0, NOW)
            await m.flush_for_ack(log)
            return log.flushed_offset

        results = await asyncio.gather(*(produce() for _ in range(20)))
        fsyncs = len(runs)
        m.close_all()
        return results, fsyncs

    results, fsyncs = asyncio.run(scenario())
    assert results == [20] * 20
    assert fsyncs == 1


def _slow_disk(m: LogManager) -> LogManager:
    """A manager that has seen a slow fsync: acknowledgement fsyncs go to workers."""
    m._inline_fsync = False
    return m


def test_acknowledgement_fsyncs_run_in_workers_once_one_was_slow(tmp_path, monkeypatch):
    runs = []
    original = log_module.FlushJob.run

    def recording_run(self):
        runs.append(threading.current_thread().name)
        original(self)
        if len(runs) == 1:
            self.seconds = 1.0  # as if the disk took a second

    monkeypatch.setattr(log_module.FlushJob, "run", recording_run)
    monkeypatch.setattr(log_module.FlushJob, "run_on_owner_thread", recording_run)

    async def scenario():
        m = LogManager([tmp_path])
        log = m.create("t", 0, LogConfig(flush_interval_messages=1), NOW)
        for _ in range(2):
            log.append(batch(1), 0, NOW)
            await m.flush_for_ack(log)
        m.close_all()

    asyncio.run(scenario())
    assert runs[0] == "MainThread"  # a quick disk: inline
    assert runs[1].startswith("kbroker-fsync")  # after a slow fsync: not on the loop


def test_acknowledgement_fsyncs_come_back_inline_when_a_worker_fsync_is_quick(
    tmp_path, monkeypatch
):
    original = log_module.FlushJob.run

    def quick_run(self):
        original(self)
        self.seconds = 0.0001

    monkeypatch.setattr(log_module.FlushJob, "run", quick_run)

    async def scenario():
        m = _slow_disk(LogManager([tmp_path]))
        log = m.create("t", 0, LogConfig(flush_interval_messages=1), NOW)
        log.append(batch(1), 0, NOW)
        await m.flush_for_ack(log)
        inline = m._inline_fsync
        m.close_all()
        return inline

    assert asyncio.run(scenario()) is True


def test_flush_for_ack_waits_for_a_later_fsync_when_appended_during_one(tmp_path, monkeypatch):
    started = threading.Event()
    release = threading.Event()
    original = log_module.FlushJob.run
    calls = []

    def slow_run(self):
        calls.append(self.upto_offset)
        started.set()
        release.wait(5)  # every fsync is slow until released
        original(self)

    monkeypatch.setattr(log_module.FlushJob, "run", slow_run)

    async def scenario():
        m = _slow_disk(LogManager([tmp_path]))
        log = m.create("t", 0, LogConfig(), NOW)
        log.append(batch(1), 0, NOW)
        first = asyncio.ensure_future(m.flush_for_ack(log))
        await eventually_async(started.is_set, timeout=5, what="the first fsync", interval=0.001)
        log.append(batch(1), 0, NOW)  # after the first fsync was prepared
        second = asyncio.ensure_future(m.flush_for_ack(log))
        # Absence: an answer from the first fsync would come within a few loop turns.
        await asyncio.sleep(0.01)
        assert not second.done()
        release.set()
        await asyncio.gather(first, second)
        flushed = log.flushed_offset, list(calls)
        m.close_all()
        return flushed

    flushed, fsynced_up_to = asyncio.run(scenario())
    assert flushed == 2
    assert 2 in fsynced_up_to  # the second caller was answered by an fsync covering its append


def test_background_retention_deletes_expired_segments(tmp_path):
    async def scenario():
        m = LogManager([tmp_path])
        cfg = LogConfig(segment_bytes=300, retention_ms=1000)
        logs = [m.create("t", p, cfg, NOW) for p in range(3)]
        for log in logs:
            for _ in range(5):
                log.append(batch(1, ts=NOW - 10_000, size=200), 0, NOW)
            log.high_watermark = log.log_end_offset
        task = asyncio.create_task(m.run_retention(0.01))
        await eventually_async(
            lambda: all(log.log_start_offset > 0 for log in logs),
            timeout=5,
            what="a retention pass over every log",
        )
        task.cancel()
        starts = [log.log_start_offset for log in logs]
        m.close_all()
        return starts

    assert asyncio.run(scenario()) == [5, 5, 5]


def test_background_flusher_fsyncs_by_policy(tmp_path):
    async def scenario():
        m = LogManager([tmp_path])
        log = m.create("t", 0, LogConfig(flush_interval_ms=0), NOW)
        log.append(batch(3), 0, NOW)
        task = asyncio.create_task(m.run_flusher(0.01))
        await eventually_async(lambda: log.flushed_offset > 0, timeout=5, what="an fsync")
        task.cancel()
        flushed = log.flushed_offset
        m.close_all()
        return flushed

    assert asyncio.run(scenario()) == 3


def test_close_all_leaves_clean_checkpoints(tmp_path):
    m = LogManager([tmp_path])
    m.create("t", 0, LogConfig(), NOW).append(batch(1), 0, NOW)
    m.close_all()
    text = (tmp_path / "t-0" / "partition.checkpoint").read_text()
    assert '"clean":{' in text


@pytest.mark.slow
def test_thousand_small_partitions_load_quickly_after_clean_shutdown(tmp_path, monkeypatch):
    monkeypatch.setattr(log_module, "_fdatasync", lambda fd: None)
    monkeypatch.setattr(log_module, "_fsync", lambda fd: None)
    m = LogManager([tmp_path])
    for p in range(1000):
        m.create("t", p, LogConfig(), NOW).append(batch(2), 0, NOW)
    m.close_all()
    m2 = LogManager([tmp_path])
    start = time.perf_counter()
    m2.load_all(lambda t, p: LogConfig(), NOW)
    elapsed = time.perf_counter() - start
    assert len(list(m2.logs())) == 1000
    assert all(log.log_end_offset == 2 for log in m2.logs())
    assert elapsed < 2.0


def test_an_inline_acknowledgement_fsync_syncs_the_open_segment_files(tmp_path, monkeypatch):
    synced = []
    monkeypatch.setattr(log_module, "_fdatasync", lambda fd: synced.append(fd))

    async def scenario():
        m = LogManager([tmp_path])
        log = m.create("t", 0, LogConfig(flush_interval_messages=1), NOW)
        log.append(batch(1), 0, NOW)
        await m.flush_for_ack(log)
        fd = log.active_segment.file.fd
        flushed = log.flushed_offset
        m.close_all()
        return fd, flushed

    fd, flushed = asyncio.run(scenario())
    assert synced[0] == fd and flushed == 1


def test_an_io_error_takes_its_log_directory_offline_with_every_log_in_it(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    m = LogManager(dirs)
    logs = {p: m.create("t", p, LogConfig(), NOW) for p in range(4)}
    for plog in logs.values():
        plog.append(batch(), 0, NOW)
    in_a = sorted(p for p, plog in logs.items() if plog.directory.parent == dirs[0])
    lost = []
    m.dir_failure_listeners.append(lost.extend)

    why = m.dir_failures.report(logs[in_a[0]], OSError(errno.EIO, "Input/output error"))

    assert "Input/output error" in why
    assert list(m.offline_dirs) == [str(dirs[0])]
    assert sorted(lost) == [("t", p) for p in in_a]
    assert sorted(m.failed) == [("t", p) for p in in_a]
    for p, plog in logs.items():
        assert (m.get("t", p) is None) == (p in in_a)
        assert plog.closed == (p in in_a)
    # Not recreated empty elsewhere while its data is on the failed disk.
    with pytest.raises(OSError, match="failed"):
        m.create("t", in_a[0], LogConfig(), NOW)
    # Closed without a clean-shutdown mark: the next start recovers the log.
    checkpoint = read_checkpoint(str(logs[in_a[0]].directory))
    assert checkpoint is None or checkpoint.clean is None
    # Deleting the topic forgets it: a new topic of that name gets logs again.
    m.delete_topic("t")
    assert m.create("t", in_a[0], LogConfig(), NOW).directory.parent == dirs[1]


def test_a_replica_is_offline_while_its_directory_failed_or_may_hold_its_data(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    m = LogManager(dirs)
    plogs = {p: m.create("t", p, LogConfig(), NOW) for p in range(2)}
    assert not any(m.replica_offline("t", p, held_before=True) for p in range(2))
    failed = next(p for p, plog in plogs.items() if plog.directory.parent == dirs[0])
    m.dir_failures.report(plogs[failed], OSError(errno.EIO, "Input/output error"))
    assert m.replica_offline("t", failed, held_before=False)
    assert not m.replica_offline("t", 1 - failed, held_before=True)
    # With a directory offline, a replica held before this start that has no log may
    # have its data there; one assigned since then is new and can be made elsewhere.
    assert m.replica_offline("t", 7, held_before=True)
    assert not m.replica_offline("t", 7, held_before=False)


def _full_disk_under(monkeypatch, root):
    """Writing a file under `root` fails with ENOSPC, as on a full disk."""
    from kbroker.storage import entry_file

    real = entry_file.write_file

    def write(path, data):
        if str(path).startswith(str(root)):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, data)

    monkeypatch.setattr(entry_file, "write_file", write)


def test_a_directory_whose_logs_cannot_be_opened_at_start_is_offline_and_the_rest_load(
    tmp_path, monkeypatch
):
    """Kafka's LogManager marks a log directory offline when loading its logs meets an
    I/O error and starts on the others; opening a log after an unclean stop writes (a
    producer-state snapshot), which a full disk refuses."""
    dirs = [tmp_path / "a", tmp_path / "b"]
    m = LogManager(dirs)
    logs = {p: m.create("t", p, LogConfig(), NOW) for p in range(4)}
    for plog in logs.values():
        plog.append(batch(), 0, NOW)
    in_b = sorted(p for p, plog in logs.items() if plog.directory.parent == dirs[1])
    m.dir_failures.report(logs[in_b[0]], OSError(errno.ENOSPC, "No space left on device"))
    m.close_all()
    _full_disk_under(monkeypatch, dirs[1])

    m2 = LogManager(dirs)
    m2.load_all(lambda topic, partition: LogConfig(), NOW)

    assert list(m2.offline_dirs) == [str(dirs[1])]
    assert "No space left" in m2.offline_dirs[str(dirs[1])]
    assert sorted(plog.partition for plog in m2.logs()) == [p for p in range(4) if p not in in_b]
    assert all(m2.replica_offline("t", p, held_before=True) for p in in_b)


def test_a_start_whose_every_log_directory_fails_to_open_its_logs_is_refused(tmp_path, monkeypatch):
    m = LogManager([tmp_path / "a"])
    m.create("t", 0, LogConfig(), NOW).append(batch(), 0, NOW)
    m.dir_failures.report(m.get("t", 0), OSError(errno.ENOSPC, "No space left on device"))
    _full_disk_under(monkeypatch, tmp_path / "a")
    with pytest.raises(OSError, match="none of the log directories"):
        LogManager([tmp_path / "a"]).load_all(lambda topic, partition: LogConfig(), NOW)


def test_running_out_of_descriptors_fails_the_operation_not_the_directory(tmp_path):
    m = LogManager([tmp_path / "a"])
    plog = m.create("t", 0, LogConfig(), NOW)
    m.dir_failures.report(plog, OSError(errno.EMFILE, "Too many open files"))
    assert m.offline_dirs == {}
    assert m.get("t", 0) is plog and not plog.closed
