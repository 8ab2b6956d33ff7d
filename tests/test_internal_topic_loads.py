"""A coordinator partition reloaded for a new leader epoch: the older load never lands."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from compat_tests.waiting import eventually_async
from kbroker.controller.state import PartitionInfo
from kbroker.coordinator_runtime.internal_topics import InternalTopicService
from kbroker.replica.delayed import DataWaiters
from kbroker.replica.manager import ReplicaManager
from kbroker.storage import LogConfig, PartitionLog

TOPIC = "__test_state"


@dataclass
class FakeCoordinator:
    config: Any = field(default_factory=lambda: SimpleNamespace(num_partitions=1))
    epochs: dict[int, int] = field(default_factory=dict)
    loaded: list[int] = field(default_factory=list)  # leader epochs whose load finished

    def partition_for(self, key: str) -> int:
        return 0

    def unload_partition(self, partition: int) -> None:
        self.epochs.pop(partition, None)

    def shutdown(self) -> None:
        pass


class SlowService(InternalTopicService):
    """Each load waits for its own release, as a long replay would."""

    topic = TOPIC

    def __init__(self, broker: Any) -> None:
        super().__init__(broker)
        self.coordinator = FakeCoordinator()
        self.releases: dict[int, asyncio.Event] = {}
        self.waiting: list[int] = []  # leader epochs whose load reached load_records
        self.first_load: asyncio.Task[None] | None = None

    def held_partitions(self) -> list[int]:
        return list(self.coordinator.epochs)

    def needs_load(self, partition: int, leader_epoch: int) -> bool:
        return self.coordinator.epochs.get(partition) != leader_epoch

    def begin_loading(self, partition: int, leader_epoch: int) -> None:
        self.coordinator.epochs[partition] = leader_epoch
        self.releases[leader_epoch] = asyncio.Event()

    async def load_records(self, partition: int, records: list, started: float) -> None:
        epoch = self.coordinator.epochs[partition]
        self.waiting.append(epoch)
        await self.releases[epoch].wait()
        self.coordinator.loaded.append(epoch)


def fake_broker(tmp_path: Path) -> SimpleNamespace:
    log = PartitionLog.open(tmp_path / f"{TOPIC}-0", LogConfig(), 0)
    info = PartitionInfo(0, 1, (1,), (1,), leader_epoch=1)
    state = SimpleNamespace(topics={TOPIC: SimpleNamespace(partitions=[info])})
    replicas = ReplicaManager(
        1, SimpleNamespace(get=lambda topic, p: log, dir_failure_listeners=[]), DataWaiters()
    )
    return SimpleNamespace(
        node_id=1,
        controller=SimpleNamespace(state=state),
        replicas=replicas,
        replica=replicas.ensure(TOPIC, info, LogConfig()),
    )


async def reloaded_at_a_newer_epoch(tmp_path: Path) -> SlowService:
    """A service whose partition began loading at leader epoch 1, then again at 2."""
    broker = fake_broker(tmp_path)
    service = SlowService(broker)
    service.refresh()
    service.first_load = service._loads[0]
    await eventually_async(lambda: 1 in service.waiting, timeout=5, what="the first load")
    broker.replica.become_leader(2, 0, (1,), (1,), 0)
    service.refresh()
    return service


def test_a_load_for_an_older_leader_epoch_is_cancelled_by_the_newer_one(tmp_path: Path) -> None:
    async def scenario() -> None:
        service = await reloaded_at_a_newer_epoch(tmp_path)
        await eventually_async(lambda: 2 in service.waiting, timeout=5, what="the second load")
        service.releases[1].set()
        service.releases[2].set()
        await eventually_async(lambda: not service._loads, timeout=5, what="both loads to end")
        assert service.coordinator.loaded == [2]
        assert service._loads == {}

    asyncio.run(scenario())


def test_the_newer_load_stays_tracked_while_the_older_one_unwinds(tmp_path: Path) -> None:
    async def scenario() -> None:
        service = await reloaded_at_a_newer_epoch(tmp_path)
        newer = service._loads[0]
        service.releases[1].set()  # whatever the older load still does, it ends now
        older = service.first_load
        assert older is not None and older is not newer
        await eventually_async(older.done, timeout=5, what="the older load to unwind")
        assert service._loads.get(0) is newer
        service.releases[2].set()
        await newer

    asyncio.run(scenario())
