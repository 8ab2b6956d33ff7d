"""Leader epoch cache: where each leader epoch began, for OffsetForLeaderEpoch and truncation."""

import os

from kbroker.protocol.batch import encode_batch
from kbroker.storage import LogConfig, PartitionLog
from kbroker.storage.leader_epoch import LeaderEpochCache

NOW = 1_700_000_000_000


def batch(n=1, epoch=-1, base=0, size=10):
    return encode_batch(
        [b"v" * size for _ in range(n)], NOW, base_offset=base, partition_leader_epoch=epoch
    )


def open_log(path, **cfg):
    return PartitionLog.open(path, LogConfig(**cfg), NOW)


def test_leader_appends_record_first_offset_of_each_epoch(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append(batch(3), 1, NOW)
    log.append(batch(2), 1, NOW)
    log.append(batch(4), 3, NOW)
    assert log.leader_epoch_entries() == [(1, 0), (3, 5)]
    assert log.latest_epoch == 3


def test_end_offset_for_epoch_follows_kafka_rules():
    cache = LeaderEpochCache("/nonexistent")
    assert cache.end_offset_for(1, 10) == (-1, -1)
    cache.assign(2, 5)
    cache.assign(4, 12)
    assert cache.end_offset_for(4, 20) == (4, 20)  # latest epoch: the log end
    assert cache.end_offset_for(2, 20) == (2, 12)
    assert cache.end_offset_for(3, 20) == (2, 12)  # unknown epoch: the one below it
    assert cache.end_offset_for(1, 20) == (1, 5)  # older than all: where the first began
    assert cache.end_offset_for(5, 20) == (-1, -1)
    assert cache.end_offset_for(-1, 20) == (-1, -1)


def test_epochs_survive_reopen(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append(batch(2), 0, NOW)
    log.append(batch(2), 2, NOW)
    log.close()
    assert open_log(tmp_path / "t-0").leader_epoch_entries() == [(0, 0), (2, 2)]


def test_truncation_drops_epochs_beyond_new_end(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append(batch(2), 0, NOW)
    log.append(batch(2), 2, NOW)
    log.append(batch(2), 5, NOW)
    log.truncate_to(3)
    assert log.log_end_offset == 2
    assert log.leader_epoch_entries() == [(0, 0)]
    assert log.end_offset_for_epoch(0) == (0, 2)


def test_follower_append_takes_epochs_from_batches(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append_as_follower(batch(2, epoch=1, base=0) + batch(3, epoch=4, base=2), NOW)
    assert log.log_end_offset == 5
    assert log.leader_epoch_entries() == [(1, 0), (4, 2)]


def test_recovery_rebuilds_epochs_from_batches(tmp_path):
    d = tmp_path / "t-0"
    log = open_log(d)
    log.append(batch(2), 1, NOW)
    log.append(batch(2), 6, NOW)
    for seg in log.segments:
        seg.close()
    os.unlink(d / "leader-epoch-checkpoint")
    assert open_log(d).leader_epoch_entries() == [(1, 0), (6, 2)]


def test_log_start_moving_trims_epochs(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=300)  # one 280-byte batch a segment
    for epoch in (1, 1, 2, 2, 3):
        log.append(batch(2, size=100), epoch, NOW)
    log.high_watermark = log.log_end_offset
    log.delete_records_before(5)
    assert log.leader_epoch_entries() == [(2, 5), (3, 8)]
