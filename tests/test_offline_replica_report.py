"""A broker whose log directory failed tells the controller which replicas went offline,
and keeps telling it every heartbeat interval until the controller has recorded them,
however long it is unreachable, as Kafka's broker repeats its offline log directories
in every heartbeat until it restarts. The controller's unavailability is injected: its
proposals fail as they do while no quorum is reachable."""

from __future__ import annotations

import asyncio
import logging
import uuid
from pathlib import Path

import pytest

from kbroker.broker import Broker
from kbroker.config import load_broker_config
from kbroker.controller import ControllerError
from kbroker.controller.state import BrokerInfo

REQUEST_TIMED_OUT = 7


def broker(tmp_path: Path) -> Broker:
    config = load_broker_config(
        None, [f"log.dirs={tmp_path / 'data'}", "broker.heartbeat.interval.ms=1"], {}
    )
    return Broker(config)


def test_offline_replicas_are_reported_until_the_controller_records_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    node = broker(tmp_path)
    node.registration = BrokerInfo(node_id=1, host="h", port=1, epoch=5)
    calls: list[tuple[int, int, list[tuple[uuid.UUID, int]]]] = []

    async def unreachable_for_a_while(
        node_id: int, epoch: int, partitions: list[tuple[uuid.UUID, int]]
    ) -> None:
        calls.append((node_id, epoch, partitions))
        if len(calls) <= 50:  # more than the first minute of 2 s heartbeats would be
            raise ControllerError(REQUEST_TIMED_OUT, "no quorum")

    node.controller.replicas_offline = unreachable_for_a_while  # type: ignore[method-assign]
    lost = [(uuid.uuid4(), 0)]
    with caplog.at_level(logging.INFO, logger="kbroker.broker"):
        asyncio.run(asyncio.wait_for(node._send_offline_replicas(lost), 10))
    assert calls == [(1, 5, lost)] * 51
    messages = [r.getMessage() for r in caplog.records]
    assert sum("reporting 1 offline replicas" in m for m in messages) == 1
    assert messages[-1] == "reported 1 offline replicas to the controller"


def test_a_new_registration_ends_the_retries_as_it_names_the_offline_replicas(
    tmp_path: Path,
) -> None:
    node = broker(tmp_path)
    node.registration = BrokerInfo(node_id=1, host="h", port=1, epoch=5)
    calls: list[int] = []

    async def stale(node_id: int, epoch: int, partitions: object) -> None:
        calls.append(epoch)
        if len(calls) == 3:  # the heartbeat loop registers again meanwhile
            node.registration = BrokerInfo(node_id=1, host="h", port=1, epoch=9)
        raise ControllerError(REQUEST_TIMED_OUT, "no quorum")

    node.controller.replicas_offline = stale  # type: ignore[method-assign]
    asyncio.run(asyncio.wait_for(node._send_offline_replicas([(uuid.uuid4(), 0)]), 10))
    assert calls == [5, 5, 5]
