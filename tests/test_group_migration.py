"""KIP-848's online migration: a classic group becomes a consumer group when a member of
the new protocol joins it, its classic members keep working inside it through JoinGroup,
SyncGroup and Heartbeat, and it turns classic again when the last new-protocol member
leaves (group.consumer.migration.policy, `bidirectional` by default as on Kafka)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import pytest
from kio.schema.errors import ErrorCode as E
from test_consumer_group_harness import ConsumerHarness, Member, assert_exclusive
from test_group_harness import Box

from kbroker.coordinator import JoinRequest, LeavingMember, OffsetAndMetadata, SyncRequest
from kbroker.coordinator.consumer_group import ClassicMemberMetadata, ConsumerMember
from kbroker.coordinator.consumer_protocol import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
)
from kbroker.coordinator.consumer_records import (
    MemberMetadataRecord,
    decode_record,
    encode_record,
)
from kbroker.coordinator.group import GroupState

PARTITIONS = 6
SESSION_MS = 10_000


def subscription_v1(topics: tuple[str, ...], owned: set[tuple[str, int]]) -> bytes:
    """A ConsumerProtocolSubscription v1, as a cooperative classic consumer sends it."""
    import struct

    out = struct.pack(">hi", 1, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    out += struct.pack(">i", -1)  # no user data
    by_topic: dict[str, list[int]] = {}
    for t, p in sorted(owned):
        by_topic.setdefault(t, []).append(p)
    out += struct.pack(">i", len(by_topic))
    for t, ps in by_topic.items():
        out += struct.pack(">h", len(t)) + t.encode() + struct.pack(">i", len(ps))
        out += b"".join(struct.pack(">i", p) for p in ps)
    return out


@dataclass
class ClassicConsumer:
    """A classic consumer as Kafka's clients behave: it joins (again with the id it is
    given), syncs (assigning round-robin when it leads), heartbeats, and rejoins when
    told REBALANCE_IN_PROGRESS or ILLEGAL_GENERATION. Eager by default: it gives up all
    its partitions before rejoining; cooperative keeps and reports them."""

    h: ConsumerHarness
    topics: tuple[str, ...] = ("t",)
    cooperative: bool = False
    instance_id: str | None = None
    member_id: str = ""
    generation: int = -1
    owned: set[tuple[str, int]] = field(default_factory=set)
    left: bool = False
    pending_join: Box | None = None
    pending_sync: Box | None = None

    def protocols(self) -> list[tuple[str, bytes]]:
        name = "cooperative-sticky" if self.cooperative else "range"
        return [(name, subscription_v1(self.topics, self.owned if self.cooperative else set()))]

    def join_box(self) -> Box:
        box = Box()
        self.h.c.join_group(
            JoinRequest(
                group_id="g",
                member_id=self.member_id,
                protocol_type="consumer",
                protocols=self.protocols(),
                session_timeout_ms=SESSION_MS,
                rebalance_timeout_ms=30_000,
                group_instance_id=self.instance_id,
                client_id="classic",
                client_host="/127.0.0.1",
            ),
            box,
        )
        return box

    def join(self) -> None:
        """Send JoinGroup; its answer (and then SyncGroup's) may come later, when the
        classic group's rebalance completes: `beat` picks them up."""
        if not self.cooperative:
            self.owned = set()
        self.pending_join = self.join_box()
        self._progress()

    def _progress(self) -> None:
        if self.pending_join is not None and self.pending_join.done:
            result = self.pending_join.value
            self.pending_join = None
            if result.error == E.member_id_required:
                self.member_id = result.member_id
                self.join()
                return
            assert result.error in (E.none, E.rebalance_in_progress), result
            if result.error != E.none:
                self.join()
                return
            self.member_id = result.member_id
            self.generation = result.generation_id
            assignments = self._assign(result.members) if result.members else {}
            self.pending_sync = Box()
            self.h.c.sync_group(
                SyncRequest(
                    group_id="g",
                    generation_id=self.generation,
                    member_id=self.member_id,
                    assignments=assignments,
                    group_instance_id=self.instance_id,
                    protocol_type="consumer",
                    protocol_name=result.protocol_name,
                ),
                self.pending_sync,
            )
        if self.pending_sync is not None and self.pending_sync.done:
            synced = self.pending_sync.value
            self.pending_sync = None
            if synced.error == E.none:
                partitions, _ = decode_assignment(synced.assignment)
                self.owned = {(t, p) for t, ps in partitions for p in ps}
            else:
                assert synced.error in (E.rebalance_in_progress, E.illegal_generation), synced

    def _assign(self, members: tuple[tuple[str, str | None, bytes], ...]) -> dict[str, bytes]:
        ids = sorted(m for m, _, _ in members)
        topic = decode_subscription(members[0][2]).topics[0]
        count = len(self.h.state.topics[topic].partitions)
        plan: dict[str, list[int]] = {m: [] for m in ids}
        for p in range(count):
            plan[ids[p % len(ids)]].append(p)
        return {m: encode_assignment(((topic, tuple(ps)),)) for m, ps in plan.items()}

    def heartbeat_error(self) -> E:
        box = Box()
        self.h.c.heartbeat("g", self.member_id, self.generation, self.instance_id, box)
        return box.value

    def beat(self) -> E | None:
        if self.pending_join is not None or self.pending_sync is not None:
            self._progress()
            return None
        error = self.heartbeat_error()
        if error in (E.rebalance_in_progress, E.illegal_generation):
            self.join()
        elif error == E.unknown_member_id:
            self.member_id, self.owned = "", set()
            self.join()
        return error

    def leave(self) -> E:
        box = Box()
        self.h.c.leave_group("g", [LeavingMember(self.member_id, self.instance_id)], box)
        self.left = True
        self.owned = set()
        return box.value.members[0][2]

    def partitions(self) -> set[tuple[uuid.UUID, int]]:
        return {(self.h.topic_id(t), p) for t, p in self.owned}


def settle_all(classic: list[ClassicConsumer], modern: list[Member], rounds: int = 12) -> None:
    for _ in range(rounds):
        for c in classic:
            if not c.left:
                c.beat()
        for m in modern:
            if not m.left:
                m.beat()
        (classic or modern)[0].h.clock.advance(1_000)


@pytest.fixture
def h() -> ConsumerHarness:
    harness = ConsumerHarness()
    harness.create_topic("t", PARTITIONS)
    return harness


def classic_group(h: ConsumerHarness, n: int, **kwargs: object) -> list[ClassicConsumer]:
    """n classic consumers in a Stable classic group."""
    members = [ClassicConsumer(h, **kwargs) for _ in range(n)]  # type: ignore[arg-type]
    boxes = []
    for m in members:
        first = m.join_box().value
        assert first.error == E.member_id_required
        m.member_id = first.member_id
        boxes.append(m.join_box())
    h.clock.advance(0)
    for m, box in zip(members, boxes, strict=True):
        result = box.value
        m.generation = result.generation_id
    leader = next(b.value for b in boxes if b.value.members)
    plan = members[0]._assign(leader.members)
    for m in members:
        box = Box()
        h.c.sync_group(
            SyncRequest(
                "g", m.generation, m.member_id, plan if m.member_id == leader.member_id else {}
            ),
            box,
        )
    for m in members:
        m.beat()
        partitions, _ = decode_assignment(h.c.groups["g"].members[m.member_id].assignment)
        m.owned = {(t, p) for t, ps in partitions for p in ps}
    assert h.c.groups["g"].is_in(GroupState.STABLE)
    return members


def mixed_group(h: ConsumerHarness, n: int) -> tuple[list[ClassicConsumer], Member]:
    """n classic consumers and one consumer-protocol member, settled in a consumer group."""
    classic = classic_group(h, n)
    modern = h.member()
    modern.beat()
    settle_all(classic, [modern])
    return classic, modern


def owners(classic: list[ClassicConsumer], modern: list[Member]) -> list[object]:
    return [*classic, *modern]


# -- the upgrade --------------------------------------------------------------------------


def test_a_consumer_protocol_member_turns_a_live_classic_group_into_a_consumer_group(h):
    classic = classic_group(h, 2)
    generation = h.c.groups["g"].generation_id
    modern = h.member()
    result = modern.beat()
    assert result.error == E.none
    assert "g" not in h.c.groups
    group = h.group()
    assert group.group_epoch == generation + 1
    members = group.members
    assert members[classic[0].member_id].classic == ClassicMemberMetadata(
        SESSION_MS, tuple(classic[0].protocols())
    )
    # The classic members keep their partitions at their generation until they rejoin.
    assert members[classic[0].member_id].member_epoch == generation
    assert {tp for c in classic for tp in c.partitions()} == {
        (h.topic_id("t"), p) for p in range(PARTITIONS)
    }


def test_classic_members_are_told_to_rejoin_and_the_partitions_spread_over_all(h):
    classic = classic_group(h, 2)
    modern = h.member()
    modern.beat()
    assert classic[0].heartbeat_error() == E.rebalance_in_progress
    settle_all(classic, [modern])
    assert_exclusive(owners(classic, [modern]), PARTITIONS)  # type: ignore[arg-type]
    assert all(len(m.partitions()) == 2 for m in owners(classic, [modern]))  # type: ignore[attr-defined]
    assert h.group().state.value == "Stable"
    for c in classic:
        assert c.heartbeat_error() == E.none


def test_a_cooperative_classic_member_revokes_before_the_new_member_gets_its_partitions(h):
    classic = classic_group(h, 1, cooperative=True)
    modern = h.member()
    modern.beat()
    assert modern.partitions() == set()  # all six still belong to the classic member
    settle_all(classic, [modern])
    assert_exclusive(owners(classic, [modern]), PARTITIONS)  # type: ignore[arg-type]
    assert len(modern.partitions()) == 3


def test_the_classic_member_joins_as_a_follower_with_its_member_epoch_as_generation(h):
    classic = classic_group(h, 1)
    h.member().beat()
    result = classic[0].join_box().value
    member = h.group().members[classic[0].member_id]
    assert result.error == E.none
    assert result.generation_id == member.member_epoch
    assert (result.leader_id, result.members, result.protocol_name) == ("", (), "range")


def test_parked_classic_joins_are_answered_rebalance_in_progress_on_upgrade(h):
    classic = classic_group(h, 2)
    parked = classic[0].join_box()  # the leader rejoins: a rebalance starts
    assert not parked.done
    h.member().beat()
    assert parked.value.error == E.rebalance_in_progress


def test_a_classic_member_commits_with_its_member_epoch_as_generation(h):
    classic, modern = mixed_group(h, 1)
    member = h.group().members[classic[0].member_id]
    epoch = member.member_epoch
    held = sorted(p for _, ps in member.assigned.items() for p in ps)
    other = next(p for p in range(PARTITIONS) if p not in held)

    def commit(generation: int, partition: int = held[0]) -> E:
        box = Box()
        h.c.commit_offsets(
            "g", classic[0].member_id, generation, {("t", partition): OffsetAndMetadata(5)}, box
        )
        return box.value[("t", partition)]

    assert commit(epoch) == E.none
    assert commit(epoch + 1) == E.illegal_generation
    # An older generation only for a partition it held since then (KIP-1251).
    assert commit(epoch - 1, other) == E.illegal_generation
    assert commit(0) == E.illegal_generation


def test_upgrade_refused_by_policy_is_group_id_not_found_with_kafkas_message():
    h = ConsumerHarness(migration_policy="downgrade")
    h.create_topic("t", PARTITIONS)
    classic_group(h, 1)
    result = h.heartbeat(member_id="m")
    assert result.error == E.group_id_not_found
    assert result.message == (
        "Cannot upgrade classic group g to consumer group because online upgrade is disabled."
    )
    assert h.c.groups["g"].is_in(GroupState.STABLE)


def test_a_group_of_another_embedded_protocol_is_not_upgraded(h):
    box = Box()
    h.c.join_group(JoinRequest("g", "", "connect", [("default", b"x")], 10_000, 30_000), box)
    assert box.value.error == E.member_id_required
    h.c.join_group(
        JoinRequest("g", box.value.member_id, "connect", [("default", b"x")], 10_000, 30_000),
        Box(),
    )
    result = h.heartbeat(member_id="m")
    assert result.error == E.group_id_not_found
    assert "does not use the consumer embedded protocol" in (result.message or "")


def test_the_upgraded_group_is_rebuilt_from_its_records(h):
    classic, modern = mixed_group(h, 2)
    before = h.group()
    partition = h.c.partition_for("g")
    fresh = ConsumerHarness()
    fresh.state = h.state
    fresh.coordinator.consumer.metadata = lambda: fresh.state
    fresh.c.load_partition(partition, h.store.records(partition))
    after = fresh.cc.groups["g"]
    assert "g" not in fresh.c.groups
    assert after.members == before.members
    assert after.group_epoch == before.group_epoch


# -- the downgrade ------------------------------------------------------------------------


def test_the_last_consumer_protocol_member_leaving_turns_the_group_classic(h):
    classic, modern = mixed_group(h, 2)
    epoch = h.group().group_epoch
    assert modern.leave().error == E.none
    assert "g" not in h.cc.groups
    group = h.c.groups["g"]
    assert group.generation_id == epoch
    assert group.is_in(GroupState.PREPARING_REBALANCE)
    settle_all(classic, [])
    assert h.c.groups["g"].is_in(GroupState.STABLE)
    assert_exclusive(classic, PARTITIONS)  # type: ignore[arg-type]


def test_with_the_upgrade_only_policy_the_group_stays_a_consumer_group():
    h = ConsumerHarness(migration_policy="upgrade")
    h.create_topic("t", PARTITIONS)
    classic, modern = mixed_group(h, 2)
    modern.leave()
    settle_all(classic, [])
    assert "g" in h.cc.groups and "g" not in h.c.groups
    assert_exclusive(classic, PARTITIONS)  # type: ignore[arg-type]


def test_a_classic_member_whose_session_expires_is_fenced(h):
    classic, modern = mixed_group(h, 2)
    classic[1].left = True  # stops heartbeating
    for _ in range(15):
        classic[0].beat()
        modern.beat()
        h.clock.advance(1_000)
    assert classic[1].member_id not in h.group().members
    settle_all([classic[0]], [modern])
    assert_exclusive([classic[0], modern], PARTITIONS)  # type: ignore[list-item]


def test_classic_leave_group_removes_the_member_from_the_consumer_group(h):
    classic, modern = mixed_group(h, 2)
    assert classic[1].leave() == E.none
    assert classic[1].member_id not in h.group().members
    settle_all([classic[0]], [modern])
    assert_exclusive([classic[0], modern], PARTITIONS)  # type: ignore[list-item]


# -- requests checked as Kafka checks them -------------------------------------------------


def test_sync_and_heartbeat_check_member_generation_and_protocol(h):
    classic, modern = mixed_group(h, 1)
    c = classic[0]

    def sync(generation: int, name: str | None = "range", member: str | None = None) -> E:
        box = Box()
        h.c.sync_group(
            SyncRequest("g", generation, member or c.member_id, {}, None, "consumer", name), box
        )
        return box.value.error

    assert sync(c.generation) == E.none
    assert sync(c.generation + 5) == E.illegal_generation
    assert sync(c.generation, name="roundrobin") == E.inconsistent_group_protocol
    assert sync(c.generation, member=modern.member_id) == E.unknown_member_id
    box = Box()
    h.c.heartbeat("g", c.member_id, c.generation + 1, None, box)
    assert box.value == E.illegal_generation


def test_a_classic_join_whose_protocols_the_classic_members_do_not_share_is_refused(h):
    classic_group(h, 1)
    h.member().beat()
    box = Box()
    h.c.join_group(
        JoinRequest(
            "g", "x", "consumer", [("roundrobin", subscription_v1(("t",), set()))], 10_000, 30_000
        ),
        box,
    )
    assert box.value.error == E.inconsistent_group_protocol


# -- the stored layout ---------------------------------------------------------------------


def test_classic_member_metadata_is_stored_byte_for_byte_as_kafka_stores_it():
    """The value Kafka 4.3.1's ConsumerGroupMemberMetadataValue serializes for a member
    with ClassicMemberMetadata(session 7, [range: 0x0102]) (tagged field 0)."""
    kafka = bytes.fromhex(
        "00000101026302680202740100000005010100110100000007020672616e67650301020000"
    )
    member = ConsumerMember(
        "m",
        instance_id="",
        rack_id="",
        client_id="c",
        client_host="h",
        subscribed_topic_names=frozenset({"t"}),
        subscribed_topic_regex="",
        rebalance_timeout_ms=5,
        server_assignor="",
        classic=ClassicMemberMetadata(7, (("range", b"\x01\x02"),)),
    )
    key, value = encode_record(MemberMetadataRecord("g", "m", member))
    assert value == kafka
    decoded = decode_record(key, kafka)
    assert isinstance(decoded, MemberMetadataRecord) and decoded.member is not None
    assert decoded.member.classic == member.classic


def test_the_downgraded_group_is_rebuilt_from_its_records(h):
    classic, modern = mixed_group(h, 2)
    modern.leave()
    partition = h.c.partition_for("g")
    fresh = ConsumerHarness()
    fresh.c.load_partition(partition, h.store.records(partition))
    assert "g" not in fresh.cc.groups
    rebuilt = fresh.c.groups["g"]
    assert set(rebuilt.members) == {c.member_id for c in classic}
    assert rebuilt.generation_id == h.c.groups["g"].generation_id


def test_a_classic_join_taking_the_last_static_consumer_members_place_turns_the_group_classic(h):
    """A deployment rolling back: the static consumer-protocol member restarts as a
    classic consumer with the same group.instance.id, and its group, classic otherwise,
    turns classic with the new member in its place and its partitions."""
    classic = classic_group(h, 1)
    modern = h.member(instance_id="instance-a")
    modern.beat()
    settle_all(classic, [modern])
    held = {p for _, p in modern.partitions()}
    assert held and modern.leave(static=True).error == E.none
    back = ClassicConsumer(h, instance_id="instance-a")
    result = back.join_box().value
    assert result.error == E.none
    assert "g" not in h.cc.groups
    group = h.c.groups["g"]
    assert group.is_in(GroupState.STABLE)  # the same topics: no rebalance
    assert result.generation_id == group.generation_id
    back.member_id, back.generation = result.member_id, result.generation_id
    box = Box()
    h.c.sync_group(SyncRequest("g", back.generation, back.member_id, {}, "instance-a"), box)
    partitions, _ = decode_assignment(box.value.assignment)
    assert {p for _, ps in partitions for p in ps} == held


def test_a_classic_member_that_joins_and_never_syncs_is_fenced_after_its_rebalance_timeout(h):
    classic, modern = mixed_group(h, 2)
    quiet = classic[1]
    rejoined = quiet.join_box().value  # joined again, but no SyncGroup follows
    assert rejoined.error == E.none
    quiet.generation = rejoined.generation_id
    for _ in range(29):  # heartbeats keep its session; only the sync timeout runs out
        quiet.heartbeat_error()
        modern.beat()
        h.clock.advance(1_000)
    assert quiet.member_id in h.group().members
    for _ in range(3):
        quiet.heartbeat_error()
        modern.beat()
        h.clock.advance(1_000)
    assert quiet.member_id not in h.group().members


def test_the_migration_policy_and_group_max_size_come_from_the_broker_settings():
    from kbroker.config import BrokerConfig
    from kbroker.coordinator.consumer_coordinator import consumer_group_config

    default = consumer_group_config(BrokerConfig.from_settings({}))
    assert (default.upgrade_enabled, default.downgrade_enabled) == (True, True)
    upgrade_only = consumer_group_config(
        BrokerConfig.from_settings(
            {"group.consumer.migration.policy": "UPGRADE", "group.max.size": "7"}
        )
    )
    assert (upgrade_only.upgrade_enabled, upgrade_only.downgrade_enabled) == (True, False)
    assert upgrade_only.classic_max_size == 7
    disabled = consumer_group_config(
        BrokerConfig.from_settings({"group.consumer.migration.policy": "disabled"})
    )
    assert (disabled.upgrade_enabled, disabled.downgrade_enabled) == (False, False)
