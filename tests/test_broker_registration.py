"""A starting broker registers with the controller quorum even when it asks during an
election (a restarted voter often sets one off as it rejoins): like Kafka's broker it
retries every heartbeat interval for up to initial.broker.registration.timeout.ms, and
only then gives up with a start error rather than a traceback. The controller's
unavailability is injected: its proposals fail as they do while no leader is known."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kbroker.broker import Broker
from kbroker.config import load_broker_config
from kbroker.controller import ControllerError, ControllerStartError
from kbroker.controller.state import BrokerInfo

NOT_CONTROLLER = 41


def broker(tmp_path: Path, *settings: str) -> Broker:
    config = load_broker_config(
        None, [f"log.dirs={tmp_path / 'data'}", "broker.heartbeat.interval.ms=1", *settings], {}
    )
    return Broker(config)


def test_registration_during_an_election_is_retried_until_it_commits(tmp_path: Path) -> None:
    node = broker(tmp_path)
    attempts: list[int] = []

    async def election_under_way(node_id: int, *args: object) -> BrokerInfo:
        attempts.append(node_id)
        if len(attempts) <= 3:
            raise ControllerError(NOT_CONTROLLER, "no controller leader is known")
        return BrokerInfo(node_id=node_id, host="h", port=1, epoch=7)

    node.controller.register_broker = election_under_way  # type: ignore[method-assign]
    registered = asyncio.run(asyncio.wait_for(node._register_at_start(), 10))
    assert registered.epoch == 7
    assert len(attempts) == 4


def test_registration_gives_up_after_the_initial_registration_timeout(tmp_path: Path) -> None:
    node = broker(tmp_path, "initial.broker.registration.timeout.ms=50")

    async def no_quorum(node_id: int, *args: object) -> BrokerInfo:
        raise ControllerError(NOT_CONTROLLER, "no controller leader is known")

    node.controller.register_broker = no_quorum  # type: ignore[method-assign]
    with pytest.raises(ControllerStartError, match="initial.broker.registration.timeout.ms"):
        asyncio.run(asyncio.wait_for(node._register_at_start(), 10))
