"""Moving a partition's log to another log directory (AlterReplicaLogDirs) and the log
directories' identity: every acknowledged record survives a move, a crash at any step
of it leaves one whole copy in use, and each directory keeps its meta.properties."""

import asyncio
from pathlib import Path

import pytest

from kbroker.protocol.batch import decode_records, encode_batch
from kbroker.storage import LogConfig, LogManager, PartitionLog
from kbroker.storage.log_move import FUTURE_SUFFIX, LogMove
from kbroker.storage.meta_properties import (
    MetaPropertiesError,
    ensure_meta_properties,
    read_meta_properties,
)

NOW = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=4096)


def append(plog: PartitionLog, first: int, count: int) -> None:
    for i in range(first, first + count):
        plog.append(encode_batch([f"r{i:06d}".encode() * 8], NOW), 0, NOW)
    plog.high_watermark = plog.log_end_offset


def values(plog: PartitionLog) -> list[int]:
    """Every record's number, read back from the log in offset order."""
    found: list[int] = []
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:
        region = plog.read(offset, 1 << 20)
        assert region is not None
        data = region.read()
        region.release()
        pos = 0
        while pos < len(data):
            length = int.from_bytes(data[pos + 8 : pos + 12], "big")
            for record in decode_records(data[pos : pos + 12 + length]):
                found.append(int(record.value[1:7]))
                offset = record.offset + 1
            pos += 12 + length
    return found


def two_dirs(tmp_path: Path) -> tuple[LogManager, list[Path]]:
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = LogManager(dirs)
    manager.check_directories("cluster-1", 1)
    return manager, dirs


def reopened(dirs: list[Path]) -> LogManager:
    manager = LogManager(dirs)
    manager.load_all(lambda t, p: CONFIG, NOW)
    return manager


async def move_under_appends(manager: LogManager, plog: PartitionLog, dest: Path) -> list:
    swapped: list[PartitionLog] = []
    manager.start_move(plog.topic, plog.partition, dest, swapped.append)
    task = manager._move_tasks[(plog.topic, plog.partition)]
    written = plog.log_end_offset
    while not task.done():
        current = swapped[-1] if swapped else manager.get(plog.topic, plog.partition)
        append(current, written, 5)
        written += 5
        await asyncio.sleep(0.001)  # pacing: appends keep coming while the move runs
    await task
    append(swapped[-1], written, 5)
    return swapped


def test_a_moved_log_keeps_every_record_and_is_served_from_the_new_directory(tmp_path):
    manager, dirs = two_dirs(tmp_path)
    plog = manager.create("t", 0, CONFIG, NOW)
    append(plog, 0, 400)  # many segments
    plog.delete_records_before(7)
    assert plog.num_segments > 10

    swapped = asyncio.run(move_under_appends(manager, plog, dirs[1]))

    moved = manager.get("t", 0)
    assert swapped == [moved] and moved is not plog
    assert moved.directory == dirs[1] / "t-0"
    assert manager.log_dir_of(moved) == dirs[1]
    numbers = values(moved)
    assert numbers == list(range(7, moved.log_end_offset))
    assert moved.log_start_offset == 7
    assert moved.high_watermark == moved.log_end_offset
    assert not (dirs[0] / "t-0").exists()
    manager.close_all()
    assert values(reopened(dirs).get("t", 0)) == numbers
    assert manager.moves == {}


def test_new_partitions_go_where_the_fewest_are_after_a_move(tmp_path):
    manager, dirs = two_dirs(tmp_path)
    first = manager.create("t", 0, CONFIG, NOW)
    assert manager.log_dir_of(first) == dirs[0]
    asyncio.run(move_under_appends(manager, first, dirs[1]))
    assert manager.log_dir_of(manager.create("t", 1, CONFIG, NOW)) == dirs[0]
    assert manager.log_dir_of(manager.create("t", 2, CONFIG, NOW)) == dirs[0]
    assert manager.log_dir_of(manager.create("t", 3, CONFIG, NOW)) == dirs[1]


def test_a_crash_before_the_copy_is_complete_keeps_the_source(tmp_path):
    manager, dirs = two_dirs(tmp_path)
    plog = manager.create("t", 0, CONFIG, NOW)
    append(plog, 0, 200)
    plog.flush()
    move = LogMove(plog, dirs[1])
    move.copy(move.plan())
    append(plog, 200, 10)  # acknowledged after the copy round; then kill -9
    assert any(p.name.endswith(FUTURE_SUFFIX) for p in dirs[1].iterdir())

    after = reopened(dirs)
    assert values(after.get("t", 0)) == list(range(210))
    assert after.log_dir_of(after.get("t", 0)) == dirs[0]
    assert [p.name for p in dirs[1].iterdir()] == ["meta.properties"]  # the copy is gone


def test_a_crash_between_the_two_renames_uses_the_moved_copy(tmp_path):
    manager, dirs = two_dirs(tmp_path)
    plog = manager.create("t", 0, CONFIG, NOW)
    append(plog, 0, 200)
    move = LogMove(plog, dirs[1])
    move.copy(move.plan())
    append(plog, 200, 10)
    move.plan()
    live = move.finish()  # the copy is in place; the source is not renamed away yet
    assert live.exists() and (dirs[0] / "t-0").exists()

    after = reopened(dirs)
    assert values(after.get("t", 0)) == list(range(210))
    assert after.log_dir_of(after.get("t", 0)) == dirs[1]
    assert not (dirs[0] / "t-0").exists()


def test_a_truncation_during_a_move_starts_the_copy_afresh(tmp_path):
    manager, dirs = two_dirs(tmp_path)
    plog = manager.create("t", 0, CONFIG, NOW)
    append(plog, 0, 100)
    move = LogMove(plog, dirs[1])
    move.copy(move.plan())
    plog.truncate_to(60)  # a follower drops a divergent tail ...
    append(plog, 500, 50)  # ... and fetches the leader's records at the same offsets
    move.copy(move.plan())
    move.plan()
    move.finish()
    move.retire_source()
    moved = PartitionLog.open(dirs[1] / "t-0", CONFIG, NOW)
    assert values(moved) == list(range(60)) + list(range(500, 550))


def test_a_move_is_called_off_when_the_topic_is_deleted(tmp_path):
    manager, dirs = two_dirs(tmp_path)
    plog = manager.create("t", 0, CONFIG, NOW)
    append(plog, 0, 300)

    async def run() -> None:
        manager.start_move("t", 0, dirs[1], lambda new: None)
        task = manager._move_tasks[("t", 0)]
        manager.delete_topic("t")
        with pytest.raises(Exception, match="closed|deleted"):
            await task

    asyncio.run(run())
    assert not any(p.name.endswith(FUTURE_SUFFIX) for p in dirs[1].iterdir())
    assert manager.get("t", 0) is None


def test_asking_for_another_directory_mid_move_calls_the_first_move_off(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    manager = LogManager(dirs)
    manager.check_directories("cluster-1", 1)
    plog = manager.create("t", 0, CONFIG, NOW)
    append(plog, 0, 300)
    swapped: list[PartitionLog] = []

    async def run() -> None:
        manager.start_move("t", 0, dirs[1], swapped.append)
        first = manager._move_tasks[("t", 0)]
        await asyncio.sleep(0)  # one loop turn: the first move has taken its first step
        manager.start_move("t", 0, dirs[2], swapped.append)
        second = manager._move_tasks[("t", 0)]
        await asyncio.gather(first, second, return_exceptions=True)
        assert first.cancelled() and second.result() is swapped[-1]

    asyncio.run(run())
    assert manager.log_dir_of(manager.get("t", 0)) == dirs[2]
    assert [p.name for p in dirs[1].iterdir()] == ["meta.properties"]
    assert values(manager.get("t", 0)) == list(range(300))


def test_moving_to_the_directory_it_is_in_does_nothing(tmp_path):
    manager, dirs = two_dirs(tmp_path)
    plog = manager.create("t", 0, CONFIG, NOW)

    async def run() -> None:
        manager.start_move("t", 0, dirs[0], lambda new: None)

    asyncio.run(run())
    assert manager.moves == {} and manager.get("t", 0) is plog


# -- offline directories --------------------------------------------------------------------


def test_an_unusable_directory_is_offline_and_gets_no_new_partition(tmp_path):
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where a directory should be")
    manager = LogManager([blocked, tmp_path / "ok"])
    manager.check_directories("cluster-1", 1)
    manager.load_all(lambda t, p: CONFIG, NOW)
    assert list(manager.offline_dirs) == [str(blocked)]
    assert all(manager.log_dir_of(manager.create("t", p, CONFIG, NOW)) == tmp_path / "ok"
               for p in range(3))  # fmt: skip


def test_a_partition_from_before_the_start_gets_no_empty_log_while_a_dir_is_offline(tmp_path):
    blocked = tmp_path / "blocked"
    blocked.write_text("")
    manager = LogManager([blocked, tmp_path / "ok"])
    manager.check_directories("cluster-1", 1)
    with pytest.raises(OSError, match="offline"):
        manager.create("t", 0, CONFIG, NOW, is_new=False)
    assert ("t", 0) in manager.failed
    assert manager.get("t", 0) is None


def test_no_usable_directory_stops_the_start(tmp_path):
    blocked = tmp_path / "blocked"
    blocked.write_text("")
    with pytest.raises(OSError, match="none of the log directories"):
        LogManager([blocked]).check_directories("cluster-1", 1)


# -- meta.properties ------------------------------------------------------------------------


def test_each_log_directory_gets_its_own_meta_properties(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = LogManager(dirs)
    manager.check_directories("cluster-1", 3)
    metas = [read_meta_properties(d) for d in dirs]
    assert all(m is not None and m.cluster_id == "cluster-1" and m.node_id == 3 for m in metas)
    ids = {m.directory_id for m in metas if m is not None}
    assert len(ids) == 2 and all(len(i) == 22 for i in ids)
    text = (dirs[0] / "meta.properties").read_text()
    assert "version=1" in text and f"directory.id={metas[0].directory_id}" in text
    again = LogManager(dirs)
    again.check_directories("cluster-1", 3)
    assert again.directory_ids == manager.directory_ids  # kept across starts


def test_a_directory_of_another_cluster_or_node_is_refused(tmp_path):
    ensure_meta_properties(tmp_path / "a", "cluster-1", 1)
    with pytest.raises(MetaPropertiesError, match="cluster.id"):
        ensure_meta_properties(tmp_path / "a", "cluster-2", 1)
    with pytest.raises(MetaPropertiesError, match="node id"):
        ensure_meta_properties(tmp_path / "a", "cluster-1", 2)


def test_two_directories_with_one_directory_id_are_refused(tmp_path):
    _, dirs = two_dirs(tmp_path)
    (dirs[1] / "meta.properties").write_text((dirs[0] / "meta.properties").read_text())
    with pytest.raises(MetaPropertiesError, match="same directory.id"):
        LogManager(dirs).check_directories("cluster-1", 1)


def test_a_move_copies_no_faster_than_the_alter_log_dirs_bound(tmp_path):
    """replica.alter.log.dirs.io.max.bytes.per.second: the worker rounds of a move copy at
    most the bound's bytes a second (the last, small step is not held), and every record
    arrives. 2.5 MB at 1 MB/s takes over 1.5 s; the same move unbounded takes a fraction."""

    def timed_move(directory: Path, bound: int | None) -> tuple[float, list[int]]:
        manager = LogManager([directory / "a", directory / "b"])
        manager.check_directories("cluster-1", 1)
        if bound is not None:
            manager.move_throttle.bound = bound
        config = LogConfig(segment_bytes=256 * 1024)
        plog = manager.create("t", 0, config, NOW)
        for i in range(250):
            plog.append(encode_batch([f"r{i:06d}".encode() + b"x" * 10_000], NOW), 0, NOW)
        plog.high_watermark = plog.log_end_offset

        async def move() -> float:
            started = asyncio.get_running_loop().time()
            manager.start_move("t", 0, directory / "b", lambda _: None)
            await manager._move_tasks[("t", 0)]
            return asyncio.get_running_loop().time() - started

        elapsed = asyncio.run(move())
        moved = manager.get("t", 0)
        assert moved.directory == directory / "b" / "t-0"
        numbers = values(moved)
        manager.close_all()
        return elapsed, numbers

    (tmp_path / "bounded").mkdir()
    (tmp_path / "free").mkdir()
    bounded, numbers = timed_move(tmp_path / "bounded", 1_000_000)
    assert numbers == list(range(250))
    free, _ = timed_move(tmp_path / "free", None)
    assert bounded >= 1.5
    assert free < bounded / 2
