"""A coordinator's topic is made off the event loop, and its coordinator still answers
the client that asked for it at once.

`__consumer_offsets` (like `__transaction_state`) has 50 partitions, whose directories,
segment, index and checkpoint files took the loop 80-130 ms when the broker made them
in the step that applied the topic's creation: every other client of the node waited
that long. The broker's workers make them now, and FindCoordinator answers once this
node's replicas are open and their coordinator loads have begun, so the asking
client's next request finds its coordinator ready."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from inprocess import RawClient, run_broker

from kbroker.broker import Broker
from kbroker.controller.events import MetadataEvent, TopicCreated

FIND_COORDINATOR, OFFSET_FETCH = 10, 9
NONE, COORDINATOR_LOAD_IN_PROGRESS = 0, 14
GROUP, TRANSACTION = 0, 1


def test_the_offsets_topic_is_made_by_workers_and_its_coordinator_answers_at_once(
    tmp_path: Path,
) -> None:
    async def check(broker: Broker, port: int) -> None:
        topic = "__consumer_offsets"
        made_in_the_creation_step: list[int] = []

        def on_event(event: MetadataEvent) -> None:  # called after the broker's own handler
            if isinstance(event, TopicCreated) and event.info.name == topic:
                made = [p for p in event.info.partitions if broker.logs.get(topic, p.partition)]
                made_in_the_creation_step.append(len(made))

        broker.controller.subscribe(on_event)
        client = await RawClient.connect(port)
        found = await client.call(
            FIND_COORDINATOR, 4, {"key_type": GROUP, "coordinator_keys": ["g"]}
        )
        assert [(c.error_code, c.node_id) for c in found.coordinators] == [(0, broker.node_id)]
        partitions = broker.controller.state.topics[topic].partitions
        assert len(partitions) == 50
        assert made_in_the_creation_step == [0]  # none made in the step that applied it
        assert all(broker.logs.get(topic, p.partition) is not None for p in partitions)

        fetched = await client.call(
            OFFSET_FETCH,
            8,
            {"groups": [{"group_id": "g", "topics": None}], "require_stable": False},
        )
        assert [g.error_code for g in fetched.groups] == [0]  # not NOT_COORDINATOR (16)
        client.close()

    run_broker(tmp_path, check)


def test_a_coordinator_whose_log_is_still_being_made_says_it_is_loading(
    tmp_path: Path,
) -> None:
    """FindCoordinator names the partition's leader as soon as the topic is in the
    metadata, so a client may come while this node's workers still make the logs (a
    second client, or the same one's retry). Its group is then loading: the answer is
    COORDINATOR_LOAD_IN_PROGRESS, which clients retry, and once the logs are made, the
    group's offsets; never NOT_COORDINATOR, which librdkafka's committed() reports as
    final."""

    async def check(broker: Broker, port: int) -> None:
        topic = "__consumer_offsets"
        gate = asyncio.Event()
        create_many = broker.logs.create_many

        async def held_create_many(*args: Any, **kwargs: Any) -> Any:
            await gate.wait()  # the workers are slow today
            return await create_many(*args, **kwargs)

        broker.logs.create_many = held_create_many  # type: ignore[method-assign]
        finder, fetcher = await RawClient.connect(port), await RawClient.connect(port)
        finding = asyncio.ensure_future(
            finder.call(FIND_COORDINATOR, 4, {"key_type": GROUP, "coordinator_keys": ["g"]})
        )
        while not broker.opening(topic):
            await asyncio.sleep(0.005)
        offset_fetch = {"groups": [{"group_id": "g", "topics": None}], "require_stable": False}
        early = await fetcher.call(OFFSET_FETCH, 8, offset_fetch)
        assert [g.error_code for g in early.groups] == [COORDINATOR_LOAD_IN_PROGRESS]
        assert not finding.done()  # FindCoordinator still waits for the logs

        gate.set()
        found = await finding
        assert [(c.error_code, c.node_id) for c in found.coordinators] == [(0, broker.node_id)]
        later = await fetcher.call(OFFSET_FETCH, 8, offset_fetch)
        assert [g.error_code for g in later.groups] == [NONE]
        finder.close()
        fetcher.close()

    run_broker(tmp_path, check)


def test_the_transaction_coordinator_answers_at_once_on_its_new_topic(tmp_path: Path) -> None:
    async def check(broker: Broker, port: int) -> None:
        client = await RawClient.connect(port)
        found = await client.call(
            FIND_COORDINATOR, 4, {"key_type": TRANSACTION, "coordinator_keys": ["tx"]}
        )
        assert [(c.error_code, c.node_id) for c in found.coordinators] == [(0, broker.node_id)]
        service = broker.txn_coordinator
        partition = service.coordinator.partition_for("tx")
        assert partition in service.held_partitions()
        client.close()

    run_broker(tmp_path, check)
