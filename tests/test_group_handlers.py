"""Group API handlers: version-specific request and response shapes, through kio.

Requests are built as each version carries them and answers are encoded and decoded
again, against a real GroupCoordinator on a manual clock.
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from dataclasses import dataclass, field
from typing import Any

from handler_context import handler_context
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode as E
from kio.serial import entity_reader
from test_group_harness import Harness, subscription

from kbroker.config import BrokerConfig
from kbroker.controller.state import BrokerInfo, MetadataState, PartitionInfo, TopicInfo
from kbroker.handlers.context import RequestContext
from kbroker.handlers.registry import APIS
from kbroker.protocol.messages import build, build_response, encode, response_type
from kbroker.security.quotas import ClientQuotas

OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN_GROUP = 8, 9, 10, 11
HEARTBEAT, LEAVE_GROUP, SYNC_GROUP, DESCRIBE_GROUPS = 12, 13, 14, 15
LIST_GROUPS, DELETE_GROUPS, OFFSET_DELETE = 16, 42, 47
TOPIC_ID = uuid.UUID(int=7)
OTHER_TOPIC_ID = uuid.UUID(int=8)


@dataclass
class FakeController:
    state: MetadataState


@dataclass
class Address:
    host: str = "localhost"
    port: int = 9092


class FakeService:
    def __init__(self, harness: Harness, node: BrokerInfo) -> None:
        self.coordinator = harness.c
        self.node = node

    async def find_group_coordinator(self, group_id: str) -> tuple[E, Any]:
        return E.none, self.node


@dataclass
class FakeBroker:
    harness: Harness
    node_id: int = 1
    advertised: Address = field(default_factory=Address)

    def __post_init__(self) -> None:
        node = BrokerInfo(1, "localhost", 9092)
        topic = TopicInfo("t", TOPIC_ID, tuple(PartitionInfo(p, 1, (1,), (1,)) for p in range(2)))
        other = TopicInfo("u", OTHER_TOPIC_ID, (PartitionInfo(0, 1, (1,), (1,)),))
        self.controller = FakeController(
            MetadataState(
                brokers={1: node},
                topics={"t": topic, "u": other},
                topics_by_id={TOPIC_ID: topic, OTHER_TOPIC_ID: other},
            )
        )
        self.group_coordinator = FakeService(self.harness, node)


# FindCoordinator answers with the address this node advertises on the client's listener.
ADVERTISED_LOCALHOST = BrokerConfig.from_settings(
    {"advertised.listeners": "PLAINTEXT://localhost:9092"}
)


def context(broker: FakeBroker, api: int, version: int) -> RequestContext:
    return handler_context(
        api,
        version,
        node_id=broker.node_id,
        config=ADVERTISED_LOCALHOST,
        controller=broker.controller,
        groups=broker.group_coordinator,
        quotas=ClientQuotas(dict),  # none configured: answers may come as encoded bytes
    )


def start(broker: FakeBroker, api: int, version: int, **request: Any) -> Any:
    """Call the handler; returns a decoded response or a pending awaitable."""
    req = build(load_request_schema(api, version), request)
    return APIS[api].handler(context(broker, api, version), req)


def decode(key: int, version: int, result: Any) -> Any:
    body = result if isinstance(result, bytes) else encode(build_response(key, version, result))
    decoded, size = entity_reader(response_type(key, version))(body, 0)
    assert size == len(body)
    return decoded


def call(broker: FakeBroker, api: int, version: int, **request: Any) -> Any:
    async def run() -> Any:
        result = start(broker, api, version, **request)
        broker.harness.clock.advance(0)
        if inspect.isawaitable(result):
            result = await asyncio.wait_for(result, 1)
        return decode(api, version, result)

    return asyncio.run(run())


def broker() -> FakeBroker:
    return FakeBroker(Harness())


def join_fields(member_id: str = "", group: str = "g", **extra: Any) -> dict[str, Any]:
    fields = {
        "group_id": group,
        "session_timeout": 10_000,
        "rebalance_timeout": 10_000,
        "member_id": member_id,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": subscription("t")}],
    }
    fields.update(extra)
    return fields


# -- JoinGroup / SyncGroup -------------------------------------------------------------------


def test_join_v4_asks_for_a_member_id():
    b = broker()
    resp = call(b, JOIN_GROUP, 4, **join_fields())
    assert resp.error_code == E.member_id_required
    assert resp.member_id.startswith("client-")


def test_join_v3_joins_at_once_and_leads():
    b = broker()
    resp = call(b, JOIN_GROUP, 3, **join_fields())
    assert resp.error_code == E.none
    assert resp.leader == resp.member_id
    assert resp.protocol_name == "range"
    assert [m.member_id for m in resp.members] == [resp.member_id]


def test_join_error_names_no_protocol_as_empty_before_v7_and_null_after():
    b = broker()
    old = call(b, JOIN_GROUP, 6, **join_fields(member_id="ghost"))
    new = call(b, JOIN_GROUP, 7, **join_fields(member_id="ghost"))
    assert old.error_code == new.error_code == E.unknown_member_id
    assert old.protocol_name == ""
    assert new.protocol_name is None


def test_join_records_the_client_id_and_host():
    b = broker()
    call(b, JOIN_GROUP, 3, **join_fields())
    (member,) = b.harness.c.groups["g"].members.values()
    assert (member.client_id, member.client_host) == ("client", "/10.1.2.3")


def test_join_v0_uses_the_session_timeout_as_rebalance_timeout():
    b = broker()
    fields = join_fields()
    del fields["rebalance_timeout"]
    call(b, JOIN_GROUP, 0, **fields)
    (member,) = b.harness.c.groups["g"].members.values()
    assert member.rebalance_timeout_ms == 10_000


def test_sync_v5_answers_with_the_assignment_and_protocol():
    b = broker()
    joined = call(b, JOIN_GROUP, 3, **join_fields())
    resp = call(
        b,
        SYNC_GROUP,
        5,
        group_id="g",
        generation_id=joined.generation_id,
        member_id=joined.member_id,
        protocol_type="consumer",
        protocol_name="range",
        assignments=[{"member_id": joined.member_id, "assignment": b"mine"}],
    )
    assert (resp.error_code, resp.assignment, resp.protocol_name) == (E.none, b"mine", "range")


def test_sync_v5_without_protocol_type_or_name_is_inconsistent_group_protocol():
    """From v5 both fields are mandatory: Kafka answers INCONSISTENT_GROUP_PROTOCOL before
    it looks at the group, even for a member it knows."""
    b = broker()
    joined = call(b, JOIN_GROUP, 3, **join_fields())
    for missing in ("protocol_type", "protocol_name"):
        fields = {"protocol_type": "consumer", "protocol_name": "range", missing: None}
        resp = call(
            b,
            SYNC_GROUP,
            5,
            group_id="g",
            generation_id=joined.generation_id,
            member_id=joined.member_id,
            assignments=[],
            **fields,
        )
        assert resp.error_code == E.inconsistent_group_protocol


# -- Heartbeat / LeaveGroup ------------------------------------------------------------------


def test_heartbeat_reports_the_coordinators_answer():
    b = broker()
    resp = call(b, HEARTBEAT, 0, group_id="g", generation_id=1, member_id="m")
    assert resp.error_code == E.unknown_member_id


def test_leave_before_v3_puts_the_members_error_at_top_level():
    b = broker()
    joined = call(b, JOIN_GROUP, 3, **join_fields())
    resp = call(b, LEAVE_GROUP, 2, group_id="g", member_id="stranger")
    assert resp.error_code == E.unknown_member_id
    resp = call(b, LEAVE_GROUP, 2, group_id="g", member_id=joined.member_id)
    assert resp.error_code == E.none


def test_batched_leave_answers_per_member():
    b = broker()
    joined = call(b, JOIN_GROUP, 3, **join_fields())
    resp = call(
        b,
        LEAVE_GROUP,
        5,
        group_id="g",
        members=[
            {"member_id": joined.member_id, "group_instance_id": None},
            {"member_id": "x", "group_instance_id": None},
        ],
    )
    assert resp.error_code == E.none
    assert [(m.member_id, m.error_code) for m in resp.members] == [
        (joined.member_id, E.none),
        ("x", E.unknown_member_id),
    ]


# -- OffsetCommit / OffsetFetch --------------------------------------------------------------


def standalone_commit(b: FakeBroker, version: int, topics: list[dict[str, Any]]) -> Any:
    """OffsetCommit of group "g" by no member (generation -1), as an admin client commits."""
    return call(
        b,
        OFFSET_COMMIT,
        version,
        group_id="g",
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=topics,
    )


def commit_v8(b: FakeBroker, topic: str = "t", partition: int = 0, offset: int = 5) -> Any:
    return standalone_commit(
        b,
        8,
        [
            {
                "name": topic,
                "partitions": [
                    {
                        "partition_index": partition,
                        "committed_offset": offset,
                        "committed_leader_epoch": 2,
                        "committed_metadata": "m",
                    }
                ],
            }
        ],
    )


def test_commit_then_fetch_v7_returns_offset_epoch_and_metadata():
    b = broker()
    assert commit_v8(b).topics[0].partitions[0].error_code == E.none
    resp = call(
        b, OFFSET_FETCH, 7, group_id="g", topics=[{"name": "t", "partition_indexes": [0, 1]}]
    )
    assert resp.error_code == E.none
    p0, p1 = resp.topics[0].partitions
    assert (p0.committed_offset, p0.committed_leader_epoch, p0.metadata) == (5, 2, "m")
    assert (p1.committed_offset, p1.metadata) == (-1, "")


def test_a_commit_of_several_topics_answers_each_partition_for_its_own_topic():
    """Each partition's answer is its own topic's outcome: partition 1 of the first topic
    committed, partition 5 of it unknown, the second topic's partition 0 committed."""
    for version in (8, 9):
        resp = standalone_commit(
            broker(),
            version,
            [
                {
                    "name": name,
                    "partitions": [
                        {"partition_index": p, "committed_offset": 7, "committed_metadata": ""}
                        for p in partitions
                    ],
                }
                for name, partitions in (("t", [0, 1, 5]), ("u", [0]))
            ],
        )
        answered = {
            (t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions
        }
        assert answered == {
            ("t", 0): E.none,
            ("t", 1): E.none,
            ("t", 5): E.unknown_topic_or_partition,
            ("u", 0): E.none,
        }, version


def test_commit_to_unknown_topic_or_partition_is_refused():
    b = broker()
    assert commit_v8(b, topic="nope").topics[0].partitions[0].error_code == (
        E.unknown_topic_or_partition
    )
    assert commit_v8(b, partition=9).topics[0].partitions[0].error_code == (
        E.unknown_topic_or_partition
    )


def test_commit_v2_with_retention_time_sets_an_expiry():
    b = broker()
    call(
        b,
        OFFSET_COMMIT,
        2,
        group_id="g",
        generation_id_or_member_epoch=-1,
        member_id="",
        retention_time=60_000,
        topics=[
            {
                "name": "t",
                "partitions": [
                    {"partition_index": 0, "committed_offset": 1, "committed_metadata": None}
                ],
            }
        ],
    )
    value = b.harness.c.groups["g"].offsets[("t", 0)]
    assert value.expire_timestamp_ms == value.commit_timestamp_ms + 60_000
    assert value.metadata == ""


def test_commit_and_fetch_v10_name_topics_by_id():
    b = broker()
    resp = call(
        b,
        OFFSET_COMMIT,
        10,
        group_id="g",
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=[
            {
                "topic_id": TOPIC_ID,
                "partitions": [
                    {
                        "partition_index": 1,
                        "committed_offset": 3,
                        "committed_leader_epoch": -1,
                        "committed_metadata": "",
                    }
                ],
            },
            {
                "topic_id": uuid.UUID(int=99),
                "partitions": [
                    {
                        "partition_index": 0,
                        "committed_offset": 3,
                        "committed_leader_epoch": -1,
                        "committed_metadata": "",
                    }
                ],
            },
        ],
    )
    assert [t.partitions[0].error_code for t in resp.topics] == [E.none, E.unknown_topic_id]
    fetched = call(
        b,
        OFFSET_FETCH,
        10,
        groups=[{"group_id": "g", "topics": [{"topic_id": TOPIC_ID, "partition_indexes": [1]}]}],
    )
    (group,) = fetched.groups
    assert group.topics[0].topic_id == TOPIC_ID
    assert group.topics[0].partitions[0].committed_offset == 3


def test_fetch_v8_all_topics_of_several_groups():
    b = broker()
    commit_v8(b)
    resp = call(
        b,
        OFFSET_FETCH,
        8,
        groups=[{"group_id": "g", "topics": None}, {"group_id": "other", "topics": None}],
    )
    first, second = resp.groups
    assert [(t.name, [p.committed_offset for p in t.partitions]) for t in first.topics] == [
        ("t", [5])
    ]
    assert second.topics == ()


def test_fetch_v1_puts_coordinator_errors_on_each_partition():
    b = broker()
    b.harness.c.unload_partition(b.harness.c.partition_for("g"))
    resp = call(
        b, OFFSET_FETCH, 1, group_id="g", topics=[{"name": "t", "partition_indexes": [0, 1]}]
    )
    assert [p.error_code for p in resp.topics[0].partitions] == [E.not_coordinator] * 2
    resp = call(b, OFFSET_FETCH, 3, group_id="g", topics=[{"name": "t", "partition_indexes": [0]}])
    assert resp.error_code == E.not_coordinator


def test_offset_delete_of_unknown_topic_and_of_a_committed_partition():
    b = broker()
    commit_v8(b)
    resp = call(
        b,
        OFFSET_DELETE,
        0,
        group_id="g",
        topics=[
            {"name": "t", "partitions": [{"partition_index": 0}]},
            {"name": "nope", "partitions": [{"partition_index": 0}]},
        ],
    )
    assert resp.error_code == E.none
    assert [t.partitions[0].error_code for t in resp.topics] == [
        E.none,
        E.unknown_topic_or_partition,
    ]
    assert b.harness.c.groups["g"].offsets == {}


# -- FindCoordinator -------------------------------------------------------------------------


def test_find_coordinator_v3_names_the_node():
    b = broker()
    resp = call(b, FIND_COORDINATOR, 3, key="g", key_type=0)
    assert (resp.error_code, resp.node_id, resp.host, resp.port) == (E.none, 1, "localhost", 9092)


def test_find_coordinator_v4_answers_each_key():
    b = broker()
    resp = call(b, FIND_COORDINATOR, 4, key_type=0, coordinator_keys=["a", "b"])
    assert [(c.key, c.node_id) for c in resp.coordinators] == [("a", 1), ("b", 1)]


def test_find_coordinator_for_an_unknown_key_type_is_invalid():
    b = broker()
    resp = call(b, FIND_COORDINATOR, 4, key_type=7, coordinator_keys=["a"])
    assert resp.coordinators[0].error_code == E.invalid_request


# -- List / Describe / Delete ----------------------------------------------------------------


def test_list_groups_v4_filters_states_and_v5_reports_the_type():
    b = broker()
    call(b, JOIN_GROUP, 3, **join_fields())  # joined, not yet synced
    resp = call(b, LIST_GROUPS, 4, states_filter=["completingrebalance"])
    assert [(g.group_id, g.group_state) for g in resp.groups] == [("g", "CompletingRebalance")]
    resp = call(b, LIST_GROUPS, 5, states_filter=[], types_filter=["classic"])
    assert [(g.group_id, g.group_type) for g in resp.groups] == [("g", "classic")]


def test_describe_missing_group_before_and_from_v6():
    b = broker()
    old = call(b, DESCRIBE_GROUPS, 5, groups=["nope"], include_authorized_operations=False)
    new = call(b, DESCRIBE_GROUPS, 6, groups=["nope"], include_authorized_operations=False)
    assert (old.groups[0].error_code, old.groups[0].group_state) == (E.none, "Dead")
    assert (new.groups[0].error_code, new.groups[0].group_state) == (E.group_id_not_found, "Dead")


def test_describe_stable_group_shows_members_with_assignment():
    b = broker()
    joined = call(b, JOIN_GROUP, 3, **join_fields())
    call(
        b,
        SYNC_GROUP,
        3,
        group_id="g",
        generation_id=joined.generation_id,
        member_id=joined.member_id,
        assignments=[{"member_id": joined.member_id, "assignment": b"A"}],
    )
    resp = call(b, DESCRIBE_GROUPS, 5, groups=["g"], include_authorized_operations=True)
    (group,) = resp.groups
    assert (group.group_state, group.protocol_type, group.protocol_data) == (
        "Stable",
        "consumer",
        "range",
    )
    (member,) = group.members
    assert (member.client_host, member.member_assignment) == ("/10.1.2.3", b"A")
    assert group.authorized_operations > 0


def test_delete_groups_reports_each_group():
    b = broker()
    commit_v8(b)
    resp = call(b, DELETE_GROUPS, 2, groups_names=["g", "nope"])
    assert [(r.group_id, r.error_code) for r in resp.results] == [
        ("g", E.none),
        ("nope", E.group_id_not_found),
    ]


def test_fetch_with_require_stable_flags_offsets_held_by_open_transactions():
    b = broker()
    commit_v8(b)
    b.harness.c.pending_offset_check = lambda group, tp: tp == ("t", 0)
    topics = [{"name": "t", "partition_indexes": [0]}]
    stable = call(b, OFFSET_FETCH, 7, group_id="g", topics=topics, require_stable=True)
    loose = call(b, OFFSET_FETCH, 7, group_id="g", topics=topics, require_stable=False)
    assert stable.topics[0].partitions[0].error_code == E.unstable_offset_commit
    assert stable.topics[0].partitions[0].committed_offset == -1
    assert loose.topics[0].partitions[0].committed_offset == 5
