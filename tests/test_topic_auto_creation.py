"""Auto-creation of a topic on first mention: one creation per topic in flight, refusals
logged once a minute, nothing left running when the broker stops."""

from __future__ import annotations

import asyncio
import logging

import pytest

from kbroker.controller.auto_creation import TopicAutoCreation
from kbroker.controller.errors import INVALID_REPLICATION_FACTOR, ControllerError
from kbroker.controller.state import MetadataState, TopicInfo


class SlowController:
    """Creates nothing: each create_topic is recorded and waits for `release`, then
    refuses with `refusal` when set."""

    def __init__(self) -> None:
        self.state = MetadataState()
        self.calls: list[tuple[str, int, int]] = []
        self.release = asyncio.Event()
        self.refusal: ControllerError | None = None

    async def create_topic(
        self, name: str, num_partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> TopicInfo:
        self.calls.append((name, num_partitions, replication_factor))
        await self.release.wait()
        if self.refusal is not None:
            raise self.refusal
        raise AssertionError("the test's controller never creates")


def test_a_topic_asked_for_again_while_it_is_being_created_is_created_once() -> None:
    async def main() -> list[tuple[str, int, int]]:
        controller = SlowController()
        creation = TopicAutoCreation(controller)
        creation.start("t", 3, 2)
        creation.start("t", 3, 2)
        creation.start("u", 1, 1)
        await asyncio.sleep(0)
        await creation.stop()
        return controller.calls

    assert asyncio.run(main()) == [("t", 3, 2), ("u", 1, 1)]


def test_stopping_cancels_the_creations_in_flight() -> None:
    async def main() -> bool:
        controller = SlowController()
        creation = TopicAutoCreation(controller)
        creation.start("t", 1, 1)
        await asyncio.sleep(0)
        task = next(iter(creation._in_flight.values()))
        await creation.stop()
        return task.cancelled()

    assert asyncio.run(main())


def test_a_refusal_is_logged_once_however_often_the_client_asks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> int:
        controller = SlowController()
        controller.refusal = ControllerError(INVALID_REPLICATION_FACTOR, "only 1 broker")
        controller.release.set()
        creation = TopicAutoCreation(controller)
        for _ in range(3):
            creation.start("t", 1, 3)
            while creation._in_flight:
                await asyncio.sleep(0)
        return len(controller.calls)

    with caplog.at_level(logging.WARNING, logger="kbroker.metadata"):
        attempts = asyncio.run(main())
    lines = [r.getMessage() for r in caplog.records]
    assert attempts == 3
    assert lines == ["topic 't' not auto-created: INVALID_REPLICATION_FACTOR only 1 broker"]
