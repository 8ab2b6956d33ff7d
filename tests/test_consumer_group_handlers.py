"""ConsumerGroupHeartbeat and ConsumerGroupDescribe on the wire (through kio and back),
how the older group APIs see consumer groups, and the lag gauges."""

from __future__ import annotations

import asyncio
import datetime
import inspect
from dataclasses import dataclass, field
from typing import Any

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode as E
from test_consumer_group_harness import HEARTBEAT_MS, ConsumerHarness, settle
from test_group_handlers import Address, FakeController, context, decode

from kbroker.coordinator import OffsetAndMetadata
from kbroker.coordinator.lag import lag_metrics
from kbroker.handlers.registry import APIS
from kbroker.metrics.prometheus import render_families
from kbroker.protocol.messages import build

HEARTBEAT, DESCRIBE = 68, 69
OFFSET_FETCH, DESCRIBE_GROUPS, LIST_GROUPS = 9, 15, 16


class FakeService:
    def __init__(self, harness: ConsumerHarness) -> None:
        self.coordinator = harness.c


@dataclass
class FakeBroker:
    harness: ConsumerHarness
    node_id: int = 1
    advertised: Address = field(default_factory=Address)

    def __post_init__(self) -> None:
        self.group_coordinator = FakeService(self.harness)

    @property
    def controller(self) -> FakeController:
        return FakeController(self.harness.state)


def call(b: FakeBroker, api: int, version: int, **request: Any) -> Any:
    async def run() -> Any:
        req = build(load_request_schema(api, version), request)
        result = APIS[api].handler(context(b, api, version), req)  # type: ignore[arg-type]
        if inspect.isawaitable(result):
            result = await asyncio.wait_for(result, 1)
        return decode(api, version, result)

    return asyncio.run(run())


def join(b: FakeBroker, version: int = 1, member_id: str = "m-1", **extra: Any) -> Any:
    fields = {
        "group_id": "g",
        "member_id": member_id,
        "member_epoch": 0,
        "rebalance_timeout": 30_000,
        "subscribed_topic_names": ["t"],
        "server_assignor": None,
        "topic_partitions": [],
    }
    fields.update(extra)
    return call(b, HEARTBEAT, version, **fields)


def setup() -> FakeBroker:
    harness = ConsumerHarness()
    harness.create_topic("t", 3)
    return FakeBroker(harness)


def test_join_answers_epoch_interval_and_assignment_by_topic_id():
    b = setup()
    resp = join(b)
    assert resp.error_code == E.none
    assert resp.member_id == "m-1"
    assert resp.member_epoch == 1
    assert resp.heartbeat_interval == datetime.timedelta(milliseconds=HEARTBEAT_MS)
    (tp,) = resp.assignment.topic_partitions
    assert tp.topic_id == b.harness.topic_id("t")
    assert list(tp.partitions) == [0, 1, 2]


def test_version_0_join_without_member_id_gets_a_generated_one():
    b = setup()
    resp = join(b, version=0, member_id="")
    assert resp.error_code == E.none
    assert len(resp.member_id) == 22  # Kafka's Uuid.toString()


def test_version_1_join_without_member_id_is_invalid():
    b = setup()
    resp = join(b, member_id="")
    assert resp.error_code == E.invalid_request
    assert resp.error_message == "MemberId can't be empty."
    assert resp.assignment is None


def test_steady_heartbeat_carries_no_assignment():
    b = setup()
    join(b)
    resp = call(
        b,
        HEARTBEAT,
        1,
        group_id="g",
        member_id="m-1",
        member_epoch=1,
        subscribed_topic_names=None,
        topic_partitions=None,
    )
    assert resp.error_code == E.none
    assert resp.assignment is None


def test_describe_shows_epochs_members_and_named_assignments():
    b = setup()
    join(b, instance_id="inst-1")
    resp = call(b, DESCRIBE, 1, group_ids=["g"], include_authorized_operations=True)
    (g,) = resp.groups
    assert (g.error_code, g.group_state, g.group_epoch, g.assignment_epoch) == (
        E.none,
        "Stable",
        1,
        1,
    )
    assert g.assignor_name == "uniform"
    assert g.authorized_operations != -2147483648
    (m,) = g.members
    assert (m.member_id, m.instance_id, m.member_epoch, m.member_type) == ("m-1", "inst-1", 1, 1)
    assert (m.client_id, m.client_host) == ("client", "/10.1.2.3")
    assert list(m.subscribed_topic_names) == ["t"]
    assert [(t.topic_name, list(t.partitions)) for t in m.assignment.topic_partitions] == [
        ("t", [0, 1, 2])
    ]
    assert m.target_assignment == m.assignment


def test_describe_tells_a_classic_group_from_a_missing_one():
    b = setup()
    b.harness.stable_group(1, group="classic-g")
    resp = call(
        b, DESCRIBE, 0, group_ids=["classic-g", "nope"], include_authorized_operations=False
    )
    classic, missing = resp.groups
    assert classic.error_code == missing.error_code == E.group_id_not_found
    assert classic.error_message == "Group classic-g is not a consumer group."
    assert missing.error_message == "Group nope not found."


def test_describe_groups_v6_says_a_consumer_group_is_not_classic():
    b = setup()
    join(b)
    (g,) = call(b, DESCRIBE_GROUPS, 6, groups=["g"], include_authorized_operations=False).groups
    assert g.error_code == E.group_id_not_found
    assert g.error_message == "Group g is not a classic group."
    assert g.group_state == "Dead"
    (old,) = call(b, DESCRIBE_GROUPS, 5, groups=["g"], include_authorized_operations=False).groups
    assert (old.error_code, old.group_state) == (E.none, "Dead")


def test_list_groups_v5_types_a_consumer_group():
    b = setup()
    join(b)
    resp = call(b, LIST_GROUPS, 5, states_filter=[], types_filter=[])
    (g,) = resp.groups
    assert (g.group_id, g.protocol_type, g.group_state, g.group_type) == (
        "g",
        "consumer",
        "Stable",
        "consumer",
    )


def test_offset_fetch_v9_checks_the_member_epoch():
    b = setup()
    join(b)
    group = {"group_id": "g", "member_id": "m-1", "member_epoch": 7, "topics": None}
    resp = call(b, OFFSET_FETCH, 9, groups=[group], require_stable=False)
    assert resp.groups[0].error_code == E.stale_member_epoch
    group["member_epoch"] = 1
    resp = call(b, OFFSET_FETCH, 9, groups=[group], require_stable=False)
    assert resp.groups[0].error_code == E.none


def test_lag_gauges_report_committed_offsets_and_lag_of_led_partitions():
    h = ConsumerHarness()
    h.create_topic("t", 2)
    a = h.member()
    settle([a], rounds=2)
    h.group().offsets.update(
        {("t", 0): OffsetAndMetadata(7), ("t", 1): OffsetAndMetadata(3)},
    )
    ends = {("t", 0): 10}
    lines = render_families(lag_metrics(h.c, lambda t, p: ends.get((t, p)))).splitlines()
    assert 'kbroker_consumer_group_committed_offset{group="g",partition="0",topic="t"} 7.0' in lines
    assert 'kbroker_consumer_group_committed_offset{group="g",partition="1",topic="t"} 3.0' in lines
    assert 'kbroker_consumer_group_lag{group="g",partition="0",topic="t"} 3.0' in lines
    assert 'kafka_consumergroup_lag{consumergroup="g",partition="0",topic="t"} 3.0' in lines
    assert not any(
        line.startswith('kbroker_consumer_group_lag{group="g",topic="t",partition="1"')
        for line in lines
    )
    assert 'kbroker_consumer_group_members{group="g",state="Stable",type="consumer"} 1.0' in lines
    assert "# TYPE kbroker_consumer_group_lag gauge" in lines
