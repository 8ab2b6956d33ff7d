"""Streams groups (KIP-1071): the sticky task assignor, the topology checked against the
cluster, the records, the heartbeat state machine on a manual clock, and the
StreamsGroupHeartbeat / StreamsGroupDescribe handlers' errors on raw requests."""

from __future__ import annotations

import asyncio
import inspect
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest
from handler_context import handler_context
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode as E
from test_group_handlers import ADVERTISED_LOCALHOST, FakeController, decode
from test_group_harness import Box, Harness

from kbroker.controller.state import MetadataState, PartitionInfo, TopicInfo
from kbroker.coordinator.streams_assignor import AssignmentMember, assign_tasks
from kbroker.coordinator.streams_coordinator import (
    StreamsGroupConfig,
    StreamsHeartbeatRequest,
    StreamsHeartbeatResult,
)
from kbroker.coordinator.streams_group import (
    CopartitionGroup,
    CurrentAssignmentRecord,
    GroupEpochRecord,
    MemberMetadataRecord,
    MemberState,
    StreamsGroupState,
    StreamsMember,
    Subtopology,
    TargetEpochRecord,
    TargetMemberRecord,
    TaskAssignment,
    TopologyRecord,
    decode_record,
    encode_record,
)
from kbroker.coordinator.streams_group import TopicInfo as StreamsTopic
from kbroker.coordinator.streams_group import Topology as StreamsTopology
from kbroker.coordinator.streams_topology import (
    INCORRECTLY_PARTITIONED_TOPICS,
    MISSING_INTERNAL_TOPICS,
    MISSING_SOURCE_TOPICS,
    InvalidTopology,
    configure,
    validate_topology,
)
from kbroker.handlers.registry import APIS
from kbroker.protocol.messages import build
from kbroker.security.acl import StandardAuthorizer

SESSION_MS = 45_000
HEARTBEAT_MS = 1_000

# -- the assignor -----------------------------------------------------------------------


def _members(*spec: tuple[str, str], previous: dict[str, TaskAssignment] | None = None) -> Any:
    previous = previous or {}
    return {m: AssignmentMember(p, previous.get(m, TaskAssignment())) for m, p in spec}


def _all_active(target: dict[str, TaskAssignment]) -> list[tuple[str, int]]:
    return sorted((s, p) for a in target.values() for s, ps in a.active.items() for p in ps)


def test_assignor_gives_every_task_once_and_balances_within_one() -> None:
    members = _members(("a", "p1"), ("b", "p2"), ("c", "p3"))
    target = assign_tasks(members, {"0": 4, "1": 3})
    tasks = _all_active(target)
    assert tasks == sorted([("0", p) for p in range(4)] + [("1", p) for p in range(3)])
    counts = [sum(len(p) for p in a.active.values()) for a in target.values()]
    assert max(counts) - min(counts) <= 1


def test_assignor_keeps_tasks_where_they_were_when_a_member_joins() -> None:
    first = assign_tasks(_members(("a", "p1"), ("b", "p2")), {"0": 6})
    second = assign_tasks(_members(("a", "p1"), ("b", "p2"), ("c", "p3"), previous=first), {"0": 6})
    for member in ("a", "b"):
        kept = second[member].active.get("0", frozenset())
        assert kept <= first[member].active["0"] and len(kept) == 2
    assert len(second["c"].active["0"]) == 2


def test_assignor_is_sticky_when_nothing_changed() -> None:
    members = _members(("a", "p1"), ("b", "p1"), ("c", "p2"))
    first = assign_tasks(members, {"0": 5, "1": 2})
    again = assign_tasks(
        _members(("a", "p1"), ("b", "p1"), ("c", "p2"), previous=first), {"0": 5, "1": 2}
    )
    assert again == first


def test_standby_never_on_the_process_running_the_active_task() -> None:
    members = _members(("a", "p1"), ("b", "p1"), ("c", "p2"), ("d", "p3"))
    target = assign_tasks(members, {"0": 4}, num_standby=2)
    process = {"a": "p1", "b": "p1", "c": "p2", "d": "p3"}
    for task in range(4):
        holders = [m for m, a in target.items() if task in a.active.get("0", frozenset())]
        standbys = [m for m, a in target.items() if task in a.standby.get("0", frozenset())]
        assert len(holders) == 1 and len(standbys) == 2
        processes = [process[m] for m in holders + standbys]
        assert len(set(processes)) == 3, (task, holders, standbys)


def test_fewer_standbys_when_processes_run_out_and_no_warmups() -> None:
    target = assign_tasks(_members(("a", "p1"), ("b", "p1")), {"0": 2}, num_standby=1)
    assert all(not a.standby and not a.warmup for a in target.values())
    target = assign_tasks(_members(("a", "p1"), ("b", "p2")), {"0": 2}, num_standby=1)
    assert all(len(a.standby.get("0", ())) == 1 and not a.warmup for a in target.values())


# -- the topology against the cluster ------------------------------------------------------


def _word_count(app: str = "app", source: str = "in") -> StreamsTopology:
    repartition = f"{app}-count-repartition"
    return StreamsTopology(
        0,
        (
            Subtopology("0", source_topics=(source,), repartition_sink_topics=(repartition,)),
            Subtopology(
                "1",
                repartition_source_topics=(StreamsTopic(repartition, 0, 3),),
                state_changelog_topics=(StreamsTopic(f"{app}-count-changelog", 0, 3),),
            ),
        ),
    )


def test_missing_source_topics_are_a_status() -> None:
    configured = configure(_word_count(), {})
    assert configured.statuses == [(MISSING_SOURCE_TOPICS, "Source topics in are missing.")]
    assert not configured.ready and not configured.to_create


def test_internal_topics_take_their_partitions_from_the_writing_subtopology() -> None:
    configured = configure(_word_count(), {"in": 4})
    assert configured.statuses[0][0] == MISSING_INTERNAL_TOPICS
    assert {(t.name, t.partitions, t.replication_factor) for t in configured.to_create} == {
        ("app-count-repartition", 4, 3),
        ("app-count-changelog", 4, 3),
    }
    ready = configure(
        _word_count(), {"in": 4, "app-count-repartition": 4, "app-count-changelog": 4}
    )
    assert ready.ready and ready.tasks == {"0": 4, "1": 4}


def test_internal_topic_with_the_wrong_partition_count_is_incorrectly_partitioned() -> None:
    configured = configure(
        _word_count(), {"in": 4, "app-count-repartition": 2, "app-count-changelog": 4}
    )
    assert configured.statuses[0][0] == INCORRECTLY_PARTITIONED_TOPICS


def test_copartitioned_sources_must_agree() -> None:
    join = StreamsTopology(
        0,
        (
            Subtopology(
                "0", source_topics=("l", "r"), copartition_groups=(CopartitionGroup((0, 1)),)
            ),
        ),
    )
    assert configure(join, {"l": 2, "r": 3}).statuses[0][0] == INCORRECTLY_PARTITIONED_TOPICS
    assert configure(join, {"l": 3, "r": 3}).tasks == {"0": 3}


@pytest.mark.parametrize(
    "topology",
    [
        StreamsTopology(0, (Subtopology("0", ("a",)), Subtopology("0", ("b",)))),
        StreamsTopology(0, (Subtopology("0", ("a",), repartition_sink_topics=("nowhere",)),)),
        StreamsTopology(
            0, (Subtopology("0", ("a",), state_changelog_topics=(StreamsTopic("c", 2),)),)
        ),
        StreamsTopology(
            0, (Subtopology("0", ("a",), copartition_groups=(CopartitionGroup((3,)),)),)
        ),
        StreamsTopology(0, (Subtopology("0", ("bad name!",)),)),
    ],
)
def test_invalid_topologies_are_refused(topology: StreamsTopology) -> None:
    with pytest.raises(InvalidTopology):
        validate_topology(topology)


# -- records ------------------------------------------------------------------------------


def test_every_record_reads_back_as_written() -> None:
    member = StreamsMember(
        "m",
        member_epoch=3,
        previous_member_epoch=2,
        state=MemberState.UNREVOKED_TASKS,
        instance_id="i",
        rack_id=None,
        client_id="c",
        client_host="/h",
        rebalance_timeout_ms=300,
        topology_epoch=1,
        process_id="p",
        user_endpoint=("host", 8080),
        client_tags=(("zone", "a"),),
        assigned=TaskAssignment({"0": frozenset({1, 2})}, {"1": frozenset({0})}, {}),
        pending_revocation=TaskAssignment({"0": frozenset({3})}, {}, {}),
    )
    records = [
        GroupEpochRecord("g", 7, -12345),
        TopologyRecord("g", _word_count()),
        MemberMetadataRecord("g", "m", member),
        TargetEpochRecord("g", 7),
        TargetMemberRecord("g", "m", member.assigned),
        CurrentAssignmentRecord("g", "m", member),
        GroupEpochRecord("g", None),
        MemberMetadataRecord("g", "m", None),
    ]
    for record in records:
        key, value = encode_record(record)
        back = decode_record(key, value)
        if isinstance(record, MemberMetadataRecord) and record.member is not None:
            assert back.member.metadata() == member.metadata()  # type: ignore[union-attr]
        elif isinstance(record, CurrentAssignmentRecord) and record.member is not None:
            assert back.member.current() == member.current()  # type: ignore[union-attr]
        else:
            assert back == record
    assert encode_record(GroupEpochRecord("g", 1))[0][:2] == b"\x00\x11"  # type 17, Kafka's


# -- the state machine --------------------------------------------------------------------


class StreamsHarness(Harness):
    def __init__(self, **streams: Any) -> None:
        super().__init__()
        settings = {"session_timeout_ms": SESSION_MS, "heartbeat_interval_ms": HEARTBEAT_MS}
        settings.update(streams)
        self.coordinator.streams.config = StreamsGroupConfig(**settings)
        self.state = MetadataState()
        self.coordinator.streams.metadata = lambda: self.state
        self.created: list[str] = []
        self.coordinator.streams.create_topics = self._create

    @property
    def sc(self) -> Any:
        return self.coordinator.streams

    def create_topic(self, name: str, partitions: int) -> None:
        topics = dict(self.state.topics)
        by_id = dict(self.state.topics_by_id)
        info = TopicInfo(
            name, uuid.uuid4(), tuple(PartitionInfo(p, 1, (1,), (1,)) for p in range(partitions))
        )
        topics[name] = info
        by_id[info.topic_id] = info
        self.state = MetadataState(
            version=self.state.version + 1, topics=topics, topics_by_id=by_id
        )
        self.sc.on_topics_changed([name])

    def _create(self, topics: list[Any]) -> None:
        for t in topics:
            if t.name not in self.state.topics:
                self.created.append(t.name)
                self.create_topic(t.name, t.partitions)

    def heartbeat(self, **fields: Any) -> StreamsHeartbeatResult:
        request: dict[str, Any] = {"group_id": "g", "member_id": "m", "member_epoch": 0}
        request.update(fields)
        box = Box()
        self.sc.heartbeat(StreamsHeartbeatRequest(**request), box)
        return box.value  # type: ignore[no-any-return]


@dataclass
class StreamsClient:
    """A Streams member that adopts each assignment it is sent and reports what it owns."""

    h: StreamsHarness
    member_id: str
    process_id: str
    epoch: int = 0
    owned: TaskAssignment = field(default_factory=TaskAssignment)
    last: StreamsHeartbeatResult | None = None

    def beat(self) -> StreamsHeartbeatResult:
        fields: dict[str, Any] = {
            "member_id": self.member_id,
            "member_epoch": self.epoch,
            "active_tasks": self.owned.active,
            "standby_tasks": self.owned.standby,
            "warmup_tasks": self.owned.warmup,
        }
        if self.epoch == 0:
            fields.update(
                rebalance_timeout_ms=30_000, topology=_word_count(), process_id=self.process_id
            )
        result = self.h.heartbeat(**fields)
        self.last = result
        if result.error == E.none:
            self.epoch = result.member_epoch
            if result.assignment is not None:
                self.owned = result.assignment
        return result

    def active(self) -> set[tuple[str, int]]:
        return {(s, p) for s, ps in self.owned.active.items() for p in ps}


def settle(clients: list[StreamsClient], rounds: int = 8) -> None:
    for _ in range(rounds):
        for c in clients:
            c.beat()
        clients[0].h.clock.advance(HEARTBEAT_MS)


def _harness() -> StreamsHarness:
    h = StreamsHarness()
    h.create_topic("in", 4)
    return h


def test_first_member_creates_the_internal_topics_and_then_gets_every_task() -> None:
    h = _harness()
    c = StreamsClient(h, "m1", "p1")
    first = c.beat()
    assert first.error == E.none
    assert [code for code, _ in first.statuses] == [MISSING_INTERNAL_TOPICS]
    assert sorted(h.created) == ["app-count-changelog", "app-count-repartition"]
    settle([c], 2)
    assert c.last is not None and not c.last.statuses
    assert c.active() == {(s, p) for s in "01" for p in range(4)}
    assert h.sc.groups["g"].state == StreamsGroupState.STABLE


def test_tasks_move_only_after_their_owner_revoked_them() -> None:
    h = _harness()
    a = StreamsClient(h, "m1", "p1")
    settle([a], 3)
    b = StreamsClient(h, "m2", "p2")
    b.beat()  # joins: the group epoch moves, m2's target takes half of m1's tasks
    b.beat()
    assert not b.active(), "m2 got tasks m1 still holds"
    assert h.sc.groups["g"].members["m2"].state == MemberState.UNRELEASED_TASKS
    a.beat()  # told to revoke
    assert h.sc.groups["g"].members["m1"].state == MemberState.UNREVOKED_TASKS
    assert len(a.active()) == 4
    a.beat()  # reports them gone
    b.beat()
    assert len(b.active()) == 4 and not a.active() & b.active()
    settle([a, b], 2)
    assert h.sc.groups["g"].state == StreamsGroupState.STABLE


def test_expired_session_fences_the_member_and_the_rest_take_its_tasks() -> None:
    h = _harness()
    a, b = StreamsClient(h, "m1", "p1"), StreamsClient(h, "m2", "p2")
    settle([a, b], 6)
    assert len(a.active()) == len(b.active()) == 4
    for _ in range(SESSION_MS // HEARTBEAT_MS + 2):
        a.beat()
        h.clock.advance(HEARTBEAT_MS)
    assert "m2" not in h.sc.groups["g"].members
    settle([a], 2)
    assert len(a.active()) == 8


def test_epochs_are_checked() -> None:
    h = _harness()
    a = StreamsClient(h, "m1", "p1")
    settle([a], 3)
    ahead = h.heartbeat(member_id="m1", member_epoch=a.epoch + 5)
    assert ahead.error == E.fenced_member_epoch
    unknown = h.heartbeat(member_id="nobody", member_epoch=1)
    assert unknown.error == E.unknown_member_id


def test_the_group_comes_back_from_its_records_after_a_failover() -> None:
    h = _harness()
    a, b = StreamsClient(h, "m1", "p1"), StreamsClient(h, "m2", "p2")
    settle([a, b], 6)
    group = h.sc.groups["g"]
    before = (group.group_epoch, group.assignment_epoch, dict(group.members), group.topology)
    partition = h.c.partition_for("g")
    records = h.store.records(partition)
    h.c.unload_partition(partition)
    assert "g" not in h.sc.groups
    h.c.load_partition(partition, records)
    group = h.sc.groups["g"]
    assert (
        group.group_epoch,
        group.assignment_epoch,
        dict(group.members),
        group.topology,
    ) == before
    assert group.state == StreamsGroupState.STABLE
    settle([a, b], 2)
    assert len(a.active()) == len(b.active()) == 4


def test_leaving_member_hands_its_tasks_over_and_the_empty_group_can_be_deleted() -> None:
    h = _harness()
    a, b = StreamsClient(h, "m1", "p1"), StreamsClient(h, "m2", "p2")
    settle([a, b], 6)
    assert h.heartbeat(member_id="m2", member_epoch=-1).error == E.none
    settle([a], 3)
    assert len(a.active()) == 8
    assert h.heartbeat(member_id="m1", member_epoch=-1).error == E.none
    assert h.sc.groups["g"].state == StreamsGroupState.EMPTY
    box = Box()
    h.c.delete_groups(["g"], box)
    assert box.value == {"g": E.none} and "g" not in h.sc.groups


def test_a_consumer_group_id_is_not_a_streams_group() -> None:
    h = _harness()
    h.coordinator.consumer.metadata = lambda: h.state
    from kbroker.coordinator.consumer_coordinator import HeartbeatRequest

    box = Box()
    h.coordinator.consumer.heartbeat(
        HeartbeatRequest(
            "g", "c1", 0, rebalance_timeout_ms=1000, subscribed_topic_names=("in",), owned=()
        ),
        box,
    )
    assert box.value.error == E.none
    result = StreamsClient(h, "m1", "p1").beat()
    assert result.error == E.group_id_not_found


# -- the handlers on raw requests ---------------------------------------------------------

HEARTBEAT, DESCRIBE = 88, 89


@dataclass
class FakeService:
    coordinator: Any


@dataclass
class FakeBroker:
    harness: StreamsHarness
    authorizer: Any = None

    def call(self, api: int, **request: Any) -> Any:
        return self.call_version(api, 0, **request)

    def call_version(self, api: int, version: int, **request: Any) -> Any:
        async def run() -> Any:
            ctx = handler_context(
                api,
                version,
                node_id=1,
                config=ADVERTISED_LOCALHOST,
                controller=FakeController(self.harness.state),
                groups=FakeService(self.harness.c),
                authorizer=self.authorizer,
            )
            req = build(load_request_schema(api, version), request)
            result = APIS[api].handler(ctx, req)  # type: ignore[arg-type]
            if inspect.isawaitable(result):
                result = await asyncio.wait_for(result, 1)
            return decode(api, version, result)

        return asyncio.run(run())


def _raw_join(b: FakeBroker, member_id: str = "m1", **extra: Any) -> Any:
    fields: dict[str, Any] = {
        "group_id": "g",
        "member_id": member_id,
        "member_epoch": 0,
        "endpoint_information_epoch": 0,
        "rebalance_timeout": 30_000,
        "topology": {
            "epoch": 0,
            "subtopologies": [
                {
                    "subtopology_id": "0",
                    "source_topics": ["in"],
                    "source_topic_regex": [],
                    "state_changelog_topics": [],
                    "repartition_sink_topics": [],
                    "repartition_source_topics": [],
                    "copartition_groups": [],
                }
            ],
        },
        "active_tasks": [],
        "standby_tasks": [],
        "warmup_tasks": [],
        "process_id": "p1",
        "client_tags": [],
        "task_offsets": [],
        "task_end_offsets": [],
    }
    fields.update(extra)
    return b.call(HEARTBEAT, **fields)


def test_raw_join_gets_its_tasks_and_describe_shows_them() -> None:
    b = FakeBroker(_harness())
    first = _raw_join(b)
    assert first.error_code == E.none and first.member_epoch == 1
    assert [(t.subtopology_id, list(t.partitions)) for t in first.active_tasks] == [
        ("0", [0, 1, 2, 3])
    ]
    described = b.call(DESCRIBE, group_ids=["g", "missing"], include_authorized_operations=False)
    group, missing = described.groups
    assert (group.error_code, group.group_state, group.group_epoch) == (E.none, "Stable", 1)
    assert group.members[0].process_id == "p1" and group.topology.epoch == 0
    assert missing.error_code == E.group_id_not_found


def test_raw_join_with_an_endpoint_learns_the_partitions_behind_each_endpoint() -> None:
    b = FakeBroker(_harness())
    first = _raw_join(b, user_endpoint={"host": "h1", "port": 8080})
    assert first.endpoint_information_epoch == 1
    (endpoint,) = first.partitions_by_user_endpoint
    assert (endpoint.user_endpoint.host, endpoint.user_endpoint.port) == ("h1", 8080)
    assert [(t.topic, list(t.partitions)) for t in endpoint.active_partitions] == [
        ("in", [0, 1, 2, 3])
    ]
    again = _raw_join(
        b, member_epoch=1, topology=None, endpoint_information_epoch=1, rebalance_timeout=-1
    )
    assert again.error_code == E.none and again.partitions_by_user_endpoint is None


def test_raw_errors() -> None:
    b = FakeBroker(_harness())
    bad = _raw_join(
        b,
        topology={
            "epoch": 0,
            "subtopologies": [
                {
                    "subtopology_id": "0",
                    "source_topics": ["in"],
                    "source_topic_regex": [],
                    "state_changelog_topics": [],
                    "repartition_sink_topics": ["not-a-source"],
                    "repartition_source_topics": [],
                    "copartition_groups": [],
                }
            ],
        },
    )
    assert bad.error_code == E.streams_invalid_topology and "not-a-source" in bad.error_message
    no_topology = _raw_join(b, topology=None)
    assert no_topology.error_code == E.invalid_request
    assert _raw_join(b).error_code == E.none
    unknown = _raw_join(b, member_id="ghost", member_epoch=3, topology=None)
    assert unknown.error_code == E.unknown_member_id
    fenced = _raw_join(b, member_epoch=9, topology=None)
    assert fenced.error_code == E.fenced_member_epoch
    b.authorizer = StandardAuthorizer((), False, lambda: ())
    denied = _raw_join(b, member_id="m2")
    assert denied.error_code == E.group_authorization_failed
    described = b.call(DESCRIBE, group_ids=["g"], include_authorized_operations=False)
    assert described.groups[0].error_code == E.group_authorization_failed


def test_group_config_overrides_standbys_and_session_of_one_group() -> None:
    h = _harness()
    configs: dict[str, str] = {}
    h.sc.group_configs = lambda group_id: configs if group_id == "g" else {}
    a, b = StreamsClient(h, "m1", "p1"), StreamsClient(h, "m2", "p2")
    settle([a, b], 6)
    assert not a.owned.standby and not b.owned.standby
    configs["streams.num.standby.replicas"] = "1"
    settle([a, b], 6)
    for mine, other in ((a, b), (b, a)):
        standby = {(s, p) for s, ps in mine.owned.standby.items() for p in ps}
        assert standby == other.active(), "each process stands by for the other's tasks"
    configs["streams.heartbeat.interval.ms"] = "7000"
    assert a.beat().heartbeat_interval_ms == 7000


def test_group_configs_are_checked_against_the_broker_bounds() -> None:
    from kbroker.config import BrokerConfig
    from kbroker.coordinator.streams_coordinator import validate_streams_group_config

    config = BrokerConfig.from_settings({})
    assert validate_streams_group_config(config, "streams.session.timeout.ms", "50000") is None
    assert validate_streams_group_config(config, "streams.session.timeout.ms", "1000") == (
        "Invalid value 1000 for configuration streams.session.timeout.ms"
    )
    assert validate_streams_group_config(config, "streams.num.standby.replicas", "3") is not None
    assert validate_streams_group_config(config, "streams.nope", "1") == (
        "Unknown group config name: streams.nope"
    )


def test_topology_epochs_behind_are_stale_and_ahead_are_refused() -> None:
    h = _harness()
    a = StreamsClient(h, "m1", "p1")
    settle([a], 3)
    newer = replace_epoch(_word_count(), 2)
    ahead = h.heartbeat(
        member_id="m2",
        rebalance_timeout_ms=1000,
        topology=newer,
        process_id="p2",
        active_tasks={},
        standby_tasks={},
        warmup_tasks={},
    )
    assert (ahead.error, ahead.message) == (
        E.streams_invalid_topology_epoch,
        "Topology updates are not supported yet.",
    )
    h.sc.groups["g"].topology = newer  # as if the group ran epoch 2 already
    behind = StreamsClient(h, "m3", "p3").beat()
    assert behind.error == E.none
    assert [code for code, _ in behind.statuses] == [0]  # STALE_TOPOLOGY


def replace_epoch(topology: StreamsTopology, epoch: int) -> StreamsTopology:
    return StreamsTopology(epoch, topology.subtopologies)


def test_offsets_of_a_streams_group_are_checked_against_member_epochs() -> None:
    from kbroker.coordinator import OffsetAndMetadata

    h = _harness()
    a = StreamsClient(h, "m1", "p1")
    settle([a], 3)
    tp = ("in", 0)

    def commit(member_id: str, epoch: int) -> E:
        box = Box()
        h.c.commit_offsets("g", member_id, epoch, {tp: OffsetAndMetadata(5)}, box)
        return box.value[tp]  # type: ignore[no-any-return]

    assert commit("m1", a.epoch) == E.none
    assert commit("m1", a.epoch - 1) == E.stale_member_epoch
    assert commit("ghost", a.epoch) == E.unknown_member_id
    assert h.c.validate_txn_offset_commit("g", "m1", a.epoch + 1, None) == E.illegal_generation
    assert h.c.validate_txn_offset_commit("g", "m1", a.epoch, None) == E.none
    assert h.c.fetch_offsets("g", [tp], "m1", a.epoch)[1][tp] == OffsetAndMetadata(
        5, commit_timestamp_ms=h.clock.now_ms()
    )
    assert h.c.fetch_offsets("g", [tp], "m1", a.epoch + 3)[0] == E.stale_member_epoch
    error, listed = h.c.list_groups(types=["streams"])
    assert [(g.group_id, g.group_type, g.protocol_type) for g in listed] == [
        ("g", "streams", "streams")
    ]


def test_other_group_apis_see_a_streams_group_as_kafka_does() -> None:
    b = FakeBroker(_harness())
    assert _raw_join(b).error_code == E.none
    listed = b.call_version(16, 5, states_filter=[], types_filter=["streams"])
    assert [(g.group_id, g.group_type, g.group_state) for g in listed.groups] == [
        ("g", "streams", "Stable")
    ]
    described = b.call_version(15, 6, groups=["g"], include_authorized_operations=False)
    assert described.groups[0].error_code == E.group_id_not_found
    assert described.groups[0].error_message == "Group g is not a classic group."
    consumer = b.call_version(69, 1, group_ids=["g"], include_authorized_operations=False)
    assert consumer.groups[0].error_code == E.group_id_not_found
    assert consumer.groups[0].error_message == "Group g is not a consumer group."
    deleted = b.call_version(42, 2, groups_names=["g"])
    assert deleted.results[0].error_code == E.non_empty_group


def test_missing_source_topic_holds_the_group_until_it_exists() -> None:
    h = StreamsHarness()
    c = StreamsClient(h, "m1", "p1")
    first = c.beat()
    assert [code for code, _ in first.statuses] == [MISSING_SOURCE_TOPICS]
    assert not c.active() and not h.created
    assert h.sc.groups["g"].state == StreamsGroupState.NOT_READY
    h.create_topic("in", 2)
    settle([c], 3)
    assert c.last is not None and not c.last.statuses
    assert c.active() == {(s, p) for s in "01" for p in range(2)}
