"""The `__consumer_offsets` log store: writes become batches, replay reads them back."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from kio.schema.errors import ErrorCode as E
from test_group_harness import Box

from compat_tests.waiting import eventually_async
from kbroker.config import BrokerConfig
from kbroker.controller.state import PartitionInfo
from kbroker.coordinator.store import OFFSETS_TOPIC, LogGroupStore
from kbroker.coordinator_runtime.internal_topics import read_log_records
from kbroker.protocol.batch import COMPRESSION_MASK, Record, encode_batch, validate_batches
from kbroker.replica.delayed import DataWaiters
from kbroker.replica.manager import ReplicaManager
from kbroker.storage import LogConfig, LogManager

NOW = 1_700_000_000_000


@dataclass
class FakeBroker:
    logs: LogManager
    replicas: ReplicaManager
    config: BrokerConfig = field(default_factory=BrokerConfig)


def make_broker(
    tmp_path: Path, config: LogConfig | None = None, settings: dict[str, str] | None = None
) -> FakeBroker:
    logs = LogManager([tmp_path])
    replicas = ReplicaManager(1, logs, DataWaiters())
    leader_here = PartitionInfo(0, 1, (1,), (1,))
    replicas.ensure(OFFSETS_TOPIC, leader_here, config or LogConfig(cleanup_policy="compact"))
    return FakeBroker(logs, replicas, BrokerConfig.from_settings(settings))


def test_written_records_are_replayed_in_order(tmp_path):
    broker = make_broker(tmp_path)
    store = LogGroupStore(broker, lambda: NOW)
    first, second = Box(), Box()
    store.write(0, [(b"k1", b"v1"), (b"k2", b"v2")], first)
    store.write(0, [(b"k1", None)], second)
    assert first.value == second.value == E.none
    plog = broker.replicas.get(OFFSETS_TOPIC, 0).log
    batches = list(read_log_records(plog))
    assert [offset for offset, _ in batches] == [0, 2]
    assert [kv for _, batch in batches for kv in batch] == [
        (b"k1", b"v1"),
        (b"k2", b"v2"),
        (b"k1", None),
    ]


def test_replay_reads_in_chunks_smaller_than_a_batch(tmp_path):
    broker = make_broker(tmp_path)
    store = LogGroupStore(broker, lambda: NOW)
    for i in range(20):
        store.write(0, [(f"k{i}".encode(), b"x" * 300)], Box())
    plog = broker.replicas.get(OFFSETS_TOPIC, 0).log
    keys = [k for _, batch in read_log_records(plog, chunk_bytes=100) for k, _ in batch]
    assert keys == [f"k{i}".encode() for i in range(20)]


def test_replay_skips_records_before_the_start_offset(tmp_path):
    broker = make_broker(tmp_path)
    plog = broker.replicas.get(OFFSETS_TOPIC, 0).log
    plog.append(encode_batch([Record(b"a", b"1"), Record(b"b", b"2")], NOW), 0, NOW)
    assert [kv for _, b in read_log_records(plog, start=1) for kv in b] == [(b"b", b"2")]


def test_compressed_batches_replay(tmp_path):
    broker = make_broker(tmp_path)
    plog = broker.replicas.get(OFFSETS_TOPIC, 0).log
    plog.append(encode_batch([Record(b"k", b"v")], NOW, compression=1), 0, NOW)
    assert [kv for _, b in read_log_records(plog) for kv in b] == [(b"k", b"v")]


def test_write_to_a_partition_not_held_here_is_unknown(tmp_path):
    broker = make_broker(tmp_path)
    box = Box()
    LogGroupStore(broker, lambda: NOW).write(3, [(b"k", b"v")], box)
    assert box.value == E.unknown_topic_or_partition


def test_write_to_a_follower_replica_is_not_leader(tmp_path):
    broker = make_broker(tmp_path)
    broker.replicas.get(OFFSETS_TOPIC, 0).become_follower(2, 1, 1, (1, 2), (1, 2))
    box = Box()
    LogGroupStore(broker, lambda: NOW).write(0, [(b"k", b"v")], box)
    assert box.value == E.not_leader_or_follower


def test_write_waits_for_fsync_when_the_topic_flushes_every_message(tmp_path):
    broker = make_broker(tmp_path, LogConfig(flush_interval_messages=1))
    plog = broker.replicas.get(OFFSETS_TOPIC, 0).log

    async def run() -> None:
        box = Box()
        LogGroupStore(broker, lambda: NOW).write(0, [(b"k", b"v")], box)
        assert not box.done
        await eventually_async(lambda: box.done, timeout=5, what="the write to be stored")
        assert box.value == E.none
        assert plog.flushed_offset >= 1

    asyncio.run(run())


def test_offsets_topic_compression_codec_compresses_the_coordinators_batches(tmp_path):
    broker = make_broker(tmp_path, settings={"offsets.topic.compression.codec": "4"})
    box = Box()
    LogGroupStore(broker, lambda: NOW).write(0, [(b"k", b"v" * 200), (b"k2", b"w")], box)
    assert box.value == E.none
    plog = broker.replicas.get(OFFSETS_TOPIC, 0).log
    (header,) = validate_batches(plog.read(0, 1 << 20).read(), 1 << 20)
    assert header.attributes & COMPRESSION_MASK == 4  # zstd
    assert [kv for _, batch in read_log_records(plog) for kv in batch] == [
        (b"k", b"v" * 200),
        (b"k2", b"w"),
    ]
