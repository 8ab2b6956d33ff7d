"""A dead letter still to be written when the broker stops is written after it starts
again, once, without waiting for a consumer to fetch from its share-partition; once
when the writer is told to search the dead-letter topics again mid-copy; and not by a
leader that lost its share-partition mid-run."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from inprocess import run_broker
from kio.schema.errors import ErrorCode

from compat_tests.waiting import eventually_async
from kbroker.broker import Broker
from kbroker.protocol.batch import HEADER_SIZE, decode_records, read_header
from kbroker.protocol.compression import decompress
from kbroker.share.dead_letters import H_OFFSET, H_REASON
from kbroker.share.records import StateKey, state_value
from kbroker.share.service import ShareService

GROUP, TOPIC, DLQ = "workers", "orders", "dlq.orders"
BROKER = ["errors.deadletterqueue.auto.create.topics.enable=true"]


def _copies(broker: Broker) -> list[dict[str, bytes | None]]:
    """The headers of every record in the dead-letter topic's partition 0."""
    replica = broker.replicas.get(DLQ, 0)
    if replica is None:
        return []
    plog = replica.log
    region = plog.read(plog.log_start_offset, 1 << 20, plog.log_end_offset)
    if region is None:
        return []
    with region:
        data = region.read()
    found = []
    pos = 0
    while pos + HEADER_SIZE <= len(data):
        header = read_header(data, pos)
        found += [dict(r.headers) for r in decode_records(data, pos, decompress)]
        pos += header.total_size
    return found


async def _until(condition, timeout_s: float) -> bool:  # type: ignore[no-untyped-def]
    await eventually_async(condition, timeout=timeout_s, what="the condition")
    return True


async def _store_letters(broker: Broker, rejected: int) -> tuple[ShareService, StateKey]:
    """Offsets 0..rejected-1 of TOPIC's partition 0 were rejected: archived, their copies
    recorded in the stored share-partition state as still to be written. Returns the
    share service and the share-partition's key."""
    info = await broker.controller.create_topic(TOPIC, 1, 1)
    await broker.controller.set_group_configs(GROUP, {"errors.deadletterqueue.topic.name": DLQ})
    service = broker.share_coordinator
    await service.ensure_topic()
    key = (GROUP, info.topic_id, 0)
    partition = service.coordinator.store.partition_of(key)
    assert await _until(lambda: partition in service.coordinator.owned, 10)
    assert await _until(lambda: broker.replicas.leader(TOPIC, 0)[0] is not None, 10)
    epoch = broker.replicas.leader(TOPIC, 0)[0].leader_epoch
    snapshot = {
        "start": rejected,
        "end": rejected,
        "runs": [],
        "dlq": [[offset, 1, "rejected"] for offset in range(rejected)],
        "leader_epoch": epoch,
    }
    written = await service.write_here(partition, [(key, state_value(TOPIC, snapshot), epoch)])
    assert set(written.values()) == {0}
    return service, key


@pytest.mark.slow
def test_a_pending_dead_letter_is_written_once_after_a_restart_without_a_fetch(tmp_path: Path):
    async def store_pending(broker: Broker, port: int) -> None:
        await _store_letters(broker, 1)

    async def restarted(broker: Broker, port: int) -> None:
        assert await _until(lambda: len(_copies(broker)) > 0, 10)
        service = broker.share_coordinator
        stored = service.coordinator.store.of_group(GROUP)
        assert await _until(
            lambda: [s["dlq"] for s in service.coordinator.store.of_group(GROUP).values()] == [[]],
            5,
        ), stored
        copies = _copies(broker)
        assert [(c[H_OFFSET], c[H_REASON]) for c in copies] == [(b"0", b"rejected")]

    async def restarted_again(broker: Broker, port: int) -> None:
        # Absence: time enough for a second copy, were one to be made.
        await asyncio.sleep(1.0)
        assert len(_copies(broker)) == 1

    run_broker(tmp_path, store_pending, BROKER)
    run_broker(tmp_path, restarted, BROKER)
    run_broker(tmp_path, restarted_again, BROKER)


def test_copies_forgotten_while_a_copy_is_under_way_leave_the_writer_running(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Holding another share-partition with letters pending makes the writer search the
    dead-letter topics again (`forget_copies`); when that happens while a copy is being
    stored, the letter is still recorded as written, once, with nothing failing."""

    async def check(broker: Broker, port: int) -> None:
        service, key = await _store_letters(broker, 1)
        writer = service.dead_letters
        copy = writer._copy

        async def copy_while_another_is_held(*args: Any) -> bool:
            writer.forget_copies()
            return await copy(*args)

        writer._copy = copy_while_another_is_held  # type: ignore[method-assign,assignment]
        await service.fetch_path.start_holding(key)  # as a consumer's fetch there would
        assert await _until(
            lambda: [s["dlq"] for s in service.coordinator.store.of_group(GROUP).values()] == [[]],
            5,
        )
        assert [c[H_OFFSET] for c in _copies(broker)] == [b"0"]

    with caplog.at_level(logging.ERROR, logger="kbroker.share.dlq"):
        run_broker(tmp_path, check, BROKER)
    assert not caplog.records, [r.getMessage() for r in caplog.records]


def test_a_leader_that_loses_its_share_partition_mid_run_copies_no_more_of_its_letters(
    tmp_path: Path,
) -> None:
    """Two letters pending; the share-partition is dropped (its data partition's
    leadership moved on) while the first is being copied: the second is left to the
    next leader, which reads it from the stored state, rather than copied twice."""

    async def check(broker: Broker, port: int) -> None:
        service, key = await _store_letters(broker, 2)
        writer = service.dead_letters
        copy = writer._copy

        async def copy_then_lose_the_partition(*args: Any) -> bool:
            copied = await copy(*args)
            service.coordinator.leader.drop(key)
            return copied

        writer._copy = copy_then_lose_the_partition  # type: ignore[method-assign,assignment]
        await service.fetch_path.start_holding(key)  # as a consumer's fetch there would

        # This broker still leads the data partition, so its share clock would take the
        # share-partition up again (as the next leader does) and write the second letter:
        # held no more here, the dropped holder alone is watched.
        def not_held_again(_key: object) -> asyncio.Future[ErrorCode]:
            done: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
            done.set_result(ErrorCode.none)
            return done

        service.fetch_path.start_holding = not_held_again  # type: ignore[method-assign]
        assert await _until(lambda: len(_copies(broker)) > 0, 5)
        # Absence: time enough for a second copy, were one to be made.
        await asyncio.sleep(0.5)
        assert [c[H_OFFSET] for c in _copies(broker)] == [b"0"]

    run_broker(tmp_path, check, BROKER)
