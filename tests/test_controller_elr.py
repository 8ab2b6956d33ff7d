"""Eligible Leader Replicas (KIP-966), UpdateFeatures' levels and UnregisterBroker in the
metadata state machine: pure functions of state and command."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from typing import Any

from inprocess import free_port

from compat_tests.waiting import eventually_async
from kbroker.controller import Controller, ControllerConfig
from kbroker.controller import commands as cmd
from kbroker.controller.commands import apply_command
from kbroker.controller.errors import BROKER_ID_NOT_REGISTERED, ControllerError
from kbroker.controller.events import BrokerConfigsChanged, BrokerUnregistered, FeaturesChanged
from kbroker.controller.state import (
    ELR_FEATURE,
    MetadataState,
    PartitionInfo,
    state_from_plain,
    state_to_plain,
)

TOPIC = "t"


def cluster(elr: bool, min_isr: str = "2") -> MetadataState:
    state = apply_command(
        MetadataState(),
        cmd.INIT_CLUSTER,
        {"cluster_id": "c", "features": {ELR_FEATURE: 1} if elr else {}},
    ).state
    for node in (1, 2, 3):
        state = apply_command(
            state,
            cmd.REGISTER_BROKER,
            {"node_id": node, "host": "h", "port": 9000 + node, "timestamp_ms": 0},
        ).state
    return apply_command(
        state,
        cmd.CREATE_TOPIC,
        {
            "name": TOPIC,
            "topic_id": uuid.uuid4().bytes,
            "assignment": [[1, 2, 3]],
            "configs": {"min.insync.replicas": min_isr},
        },
    ).state


def fence(state: MetadataState, node: int) -> MetadataState:
    epoch = state.brokers[node].epoch
    applied = apply_command(state, cmd.FENCE_BROKER, {"node_id": node, "epoch": epoch})
    assert not isinstance(applied.outcome, ControllerError), applied.outcome
    return applied.state


def unfence(state: MetadataState, node: int) -> MetadataState:
    epoch = state.brokers[node].epoch
    return apply_command(state, cmd.BROKER_HEARTBEAT, {"node_id": node, "epoch": epoch}).state


def part(state: MetadataState) -> PartitionInfo:
    p = state.partition(TOPIC, 0)
    assert p is not None
    return p


def shrink(state: MetadataState, isr: list[int]) -> MetadataState:
    p = part(state)
    applied = apply_command(
        state,
        cmd.ALTER_PARTITION,
        {
            "topic_id": state.topics[TOPIC].topic_id.bytes,
            "partition": 0,
            "leader": p.leader,
            "leader_epoch": p.leader_epoch,
            "partition_epoch": p.partition_epoch,
            "isr": isr,
        },
    )
    assert not isinstance(applied.outcome, ControllerError), applied.outcome
    return applied.state


def test_a_new_cluster_keeps_elrs():
    assert cluster(elr=True).elr_enabled


def test_replicas_leaving_an_isr_below_min_isr_become_eligible_and_one_leads_when_it_is_empty():
    state = fence(cluster(elr=True), 3)
    assert (part(state).isr, part(state).elr) == ((1, 2), ())  # at min.insync.replicas
    state = shrink(state, [1])  # 2 falls behind: the ISR drops below 2
    assert (part(state).isr, part(state).elr) == ((1,), (2,))
    state = fence(state, 1)  # the last ISR member goes, and 2 is alive: 2 leads
    p = part(state)
    assert (p.leader, p.isr) == (2, (2,))
    assert p.elr == (1,)  # the old leader left an ISR below min.insync.replicas
    state = unfence(state, 3)  # 3 never was eligible: it only follows
    assert part(state).leader == 2


def test_the_last_isr_member_leaves_and_the_partition_waits_for_an_eligible_replica():
    state = fence(fence(cluster(elr=True), 3), 2)
    assert (part(state).isr, part(state).elr) == ((1,), (2,))
    state = fence(state, 1)
    p = part(state)
    assert (p.leader, p.isr, set(p.elr)) == (-1, (), {1, 2})
    state = unfence(state, 3)  # not eligible: still no leader
    assert part(state).leader == -1
    state = unfence(state, 2)
    assert (part(state).leader, part(state).isr) == (2, (2,))


def test_without_elr_the_last_isr_member_stays_and_nothing_else_leads():
    state = fence(fence(cluster(elr=False), 3), 2)
    state = fence(state, 1)
    p = part(state)
    assert (p.leader, p.isr, p.elr) == (-1, (1,), ())
    assert part(unfence(state, 2)).leader == -1


def test_an_isr_back_at_min_isr_clears_the_elr():
    state = fence(fence(cluster(elr=True), 3), 2)
    assert part(state).elr == (2,)
    state = unfence(state, 2)
    state = shrink(state, [1, 2])  # 2 caught up and rejoined
    assert (part(state).isr, part(state).elr) == ((1, 2), ())


def test_elr_survives_a_snapshot():
    state = fence(fence(cluster(elr=True), 3), 2)
    again = state_from_plain(state_to_plain(state))
    assert part(again).elr == (2,)
    assert again.features == {ELR_FEATURE: 1}


def test_update_features_records_levels_and_level_0_removes_one():
    state = cluster(elr=False)
    applied = apply_command(state, cmd.UPDATE_FEATURES, {"levels": {ELR_FEATURE: 1}})
    assert applied.state.elr_enabled
    assert applied.events[0] == FeaturesChanged({ELR_FEATURE: 1})
    applied = apply_command(applied.state, cmd.UPDATE_FEATURES, {"levels": {ELR_FEATURE: 0}})
    assert not applied.state.elr_enabled and applied.state.features == {}


def test_a_cluster_formatted_with_elr_holds_one_cluster_level_min_insync_replicas():
    """As Kafka's controller writes it at the format (a describe shows it as
    DYNAMIC_DEFAULT_BROKER_CONFIG): the proposing controller's static value."""
    init = {"cluster_id": "c", "features": {ELR_FEATURE: 1}, "min_isr": 2}
    applied = apply_command(MetadataState(), cmd.INIT_CLUSTER, init)
    assert applied.state.broker_configs == {"": {"min.insync.replicas": "2"}}
    assert applied.events == (BrokerConfigsChanged("", {"min.insync.replicas": "2"}),)
    without = apply_command(MetadataState(), cmd.INIT_CLUSTER, {**init, "features": {}})
    assert without.state.broker_configs == {} and without.events == ()


def test_turning_elr_on_writes_the_cluster_level_value_and_drops_every_node_level_one():
    state = cluster(elr=False)
    for resource, configs in (
        ("1", {"min.insync.replicas": "3", "log.retention.ms": "5"}),
        ("2", {"min.insync.replicas": "2"}),
    ):
        state = apply_command(
            state, cmd.ALTER_BROKER_CONFIGS, {"resource": resource, "set": configs}
        ).state
    applied = apply_command(state, cmd.UPDATE_FEATURES, {"levels": {ELR_FEATURE: 1}, "min_isr": 2})
    assert applied.state.broker_configs == {
        "": {"min.insync.replicas": "2"},
        "1": {"log.retention.ms": "5"},
    }
    assert sorted(applied.events[1:], key=repr) == [
        BrokerConfigsChanged("", {"min.insync.replicas": "2"}),
        BrokerConfigsChanged("1", {"log.retention.ms": "5"}),
        BrokerConfigsChanged("2", {}),
    ]
    # A cluster-level value set before is kept; turning ELR on again changes nothing.
    state = apply_command(
        state, cmd.ALTER_BROKER_CONFIGS, {"resource": "", "set": {"min.insync.replicas": "3"}}
    ).state
    on = apply_command(state, cmd.UPDATE_FEATURES, {"levels": {ELR_FEATURE: 1}, "min_isr": 2})
    assert on.state.broker_configs[""] == {"min.insync.replicas": "3"}
    again = apply_command(on.state, cmd.UPDATE_FEATURES, {"levels": {ELR_FEATURE: 1}})
    assert again.state is on.state


def test_a_cluster_keeping_elrs_without_the_cluster_level_value_is_given_it_once():
    """A cluster formatted before the value was written with its first record."""
    state = cluster(elr=True)
    state = replace(state, broker_configs={"3": {"min.insync.replicas": "2"}})
    applied = apply_command(state, cmd.KEEP_ELR_SAFE, {"min_isr": 1})
    assert applied.state.broker_configs == {"": {"min.insync.replicas": "1"}}
    assert applied.state.version == state.version + 1
    assert apply_command(applied.state, cmd.KEEP_ELR_SAFE, {"min_isr": 3}).state is applied.state


def test_unregister_broker_forgets_it_and_its_replicas_leave_isr_and_elr():
    state = fence(fence(cluster(elr=True), 3), 2)  # ELR (2,)
    applied = apply_command(state, cmd.UNREGISTER_BROKER, {"node_id": 2})
    assert 2 not in applied.state.brokers
    assert part(applied.state).elr == ()
    assert BrokerUnregistered(2) in applied.events
    refused: Any = apply_command(applied.state, cmd.UNREGISTER_BROKER, {"node_id": 2}).outcome
    assert refused == ControllerError(
        BROKER_ID_NOT_REGISTERED, "Broker ID 2 is not currently registered"
    )


def test_an_unclean_election_empties_the_elr():
    from kbroker.controller import leadership

    p = PartitionInfo(0, -1, (1, 2, 3), (), 4, 9, elr=(1, 2), last_known_elr=(3,))
    elected = leadership.elect_unclean(p, lambda node: node == 3)
    assert (elected.leader, elected.isr, elected.elr, elected.last_known_elr) == (3, (3,), (), ())


def register(state: MetadataState, node: int, previous_epoch: int | None) -> MetadataState:
    payload: dict[str, Any] = {"node_id": node, "host": "h", "port": 9000 + node}
    payload["timestamp_ms"] = 0
    if previous_epoch is not None:
        payload["previous_epoch"] = previous_epoch
    return apply_command(state, cmd.REGISTER_BROKER, payload).state


def test_a_broker_back_from_an_unclean_shutdown_leaves_every_elr_and_does_not_lead():
    state = fence(fence(fence(cluster(elr=True), 3), 2), 1)
    assert (part(state).leader, set(part(state).elr)) == (-1, {1, 2})
    epoch_2 = state.brokers[2].epoch
    killed = register(state, 2, None)  # no clean-shutdown marker: previous epoch -1
    p = part(killed)
    assert (p.leader, p.elr, p.last_known_elr) == (-1, (1,), (1,))  # 1 led last
    assert p.partition_epoch > part(state).partition_epoch
    assert part(register(state, 2, epoch_2 - 1)).elr == (1,)  # another incarnation's marker
    clean = register(state, 2, epoch_2)  # it stopped cleanly as the incarnation known
    assert (part(clean).leader, part(clean).isr) == (2, (2,))
    back = register(killed, 1, killed.brokers[1].epoch)
    p = part(back)
    assert (p.leader, p.isr, p.elr, p.last_known_elr) == (1, (1,), (), ())


def test_the_last_leader_leads_again_uncleanly_once_the_isr_and_the_elr_are_empty():
    """Kafka's balanced recovery (useLastKnownLeaderInBalancedRecovery): the leader a
    partition had when its ISR emptied is remembered, and elected, as the whole ISR, when
    it is back and no ISR or ELR member can lead; a topic of one replica comes back with
    its broker, killed or not."""
    state = fence(fence(fence(cluster(elr=True), 3), 2), 1)  # 1 led last
    p = part(state)
    assert (p.leader, p.isr, set(p.elr), p.last_known_elr) == (-1, (), {1, 2}, (1,))
    state = register(state, 2, None)  # killed: leaves the ELR, where 1 (still down) stays
    assert (part(state).leader, part(state).elr, part(state).last_known_elr) == (-1, (1,), (1,))
    assert part(state_from_plain(state_to_plain(state))).last_known_elr == (1,)
    state = register(state, 1, None)  # killed too: the ISR and the ELR are empty now
    p = part(state)
    assert (p.leader, p.isr, p.elr, p.last_known_elr) == (1, (1,), (), ())


def test_an_unclean_election_prefers_an_eligible_replica_and_keeps_the_rest_eligible():
    from kbroker.controller import leadership

    rules = leadership.Rules(min_isr=2, elr=True)
    p = PartitionInfo(0, -1, (1, 2, 3), (), 4, 9, elr=(1, 2), last_known_elr=(3,))
    elected = leadership.elect_unclean(p, lambda node: node != 1, rules)
    assert (elected.leader, elected.isr, elected.elr) == (2, (2,), (1,))
    assert elected.last_known_elr == ()  # forgotten once the partition has a leader
    # without a usable eligible replica it is unclean: any live replica, ELRs emptied
    elected = leadership.elect_unclean(p, lambda node: node == 3, rules)
    assert (elected.leader, elected.isr, elected.elr, elected.last_known_elr) == (3, (3,), (), ())


def test_elect_leaders_unclean_with_no_eligible_replica_takes_a_live_one_and_forgets_the_rest():
    state = fence(fence(fence(cluster(elr=True), 3), 2), 1)  # 1 led last
    state = unfence(register(state, 3, None), 3)  # 3 back, but never eligible
    state = register(state, 2, None)  # 2 killed: the ELR keeps only 1, which is down
    p = part(state)
    assert (p.leader, p.elr, p.last_known_elr) == (-1, (1,), (1,))
    # no usable ISR or ELR member: UNCLEAN takes the first live replica and clears the memory
    applied = apply_command(
        state, cmd.ELECT_LEADERS, {"election_type": 1, "partitions": [[TOPIC, 0]]}
    )
    assert applied.outcome == [[TOPIC, 0, 0, None]]
    p = part(applied.state)
    assert (p.leader, p.isr, p.elr, p.last_known_elr) == (2, (2,), (), ())


def test_a_replica_reassigned_away_leaves_the_elr():
    state = fence(fence(cluster(elr=True), 3), 2)
    assert (part(state).isr, part(state).elr) == ((1,), (2,))
    applied = apply_command(
        state,
        cmd.ALTER_PARTITION_REASSIGNMENTS,
        {"partitions": [[TOPIC, 0, [1, 3]]], "min_isr": 1},
    )
    assert applied.outcome == [[TOPIC, 0, 0, None]]
    p = part(applied.state)  # 3 is being added; 2 still a replica, still eligible
    assert (p.replicas, p.elr) == ((1, 3, 2), (2,))
    applied = apply_command(
        applied.state, cmd.ALTER_PARTITION_REASSIGNMENTS, {"partitions": [[TOPIC, 0, [1]]]}
    )
    p = part(applied.state)  # done at once: 2 and 3 are no replicas any more
    assert (p.replicas, p.isr, p.elr, p.last_known_elr) == ((1,), (1,), (), ())


def test_a_min_isr_change_clears_the_elrs_at_once():
    state = fence(fence(cluster(elr=True), 3), 2)
    assert part(state).elr == (2,)
    topic_id = state.topics[TOPIC].topic_id.bytes
    same = apply_command(
        state, cmd.ALTER_TOPIC_CONFIGS, {"name": TOPIC, "topic_id": topic_id, "set": {}}
    )
    assert part(same.state).elr == (2,)  # no change of min.insync.replicas
    applied = apply_command(
        state,
        cmd.ALTER_TOPIC_CONFIGS,
        {"name": TOPIC, "topic_id": topic_id, "set": {"min.insync.replicas": "3"}},
    )
    p = part(applied.state)
    assert (p.elr, p.last_known_elr, p.partition_epoch) == ((), (), part(state).partition_epoch + 1)
    assert any(getattr(e, "info", None) == p for e in applied.events)
    node_level = apply_command(
        state, cmd.ALTER_BROKER_CONFIGS, {"resource": "1", "set": {"min.insync.replicas": "1"}}
    )
    assert part(node_level.state).elr == (2,)
    assert state.broker_configs[""]["min.insync.replicas"] == "1"
    cluster_default = apply_command(
        state, cmd.ALTER_BROKER_CONFIGS, {"resource": "", "set": {"min.insync.replicas": "2"}}
    )
    assert part(cluster_default.state).elr == ()


def test_a_heartbeat_that_brings_an_eligible_replica_back_keeps_the_cluster_min_isr(tmp_path):
    """The brokers of a topic that does not set min.insync.replicas are fenced one by one
    (they are silent and nothing listens at their addresses), so the last two to leave
    the ISR are eligible. One of them heartbeats again: it leads, as the whole ISR, and
    since one replica is below the cluster's min.insync.replicas of 2, the other stays
    eligible. (The heartbeat's election once took min.insync.replicas as 1 and emptied
    the ELR.)"""

    async def main() -> None:
        controller = Controller(
            ControllerConfig(
                1,
                tmp_path,
                broker_session_timeout_s=0.5,
                broker_heartbeat_interval_s=0.05,
                min_insync_replicas=2,
            )
        )
        await controller.start()
        try:
            assert controller.state.elr_enabled
            assert controller.state.broker_configs == {"": {"min.insync.replicas": "2"}}
            brokers = {
                n: await controller.register_broker(n, "127.0.0.1", free_port()) for n in (1, 2, 3)
            }
            await controller.create_topic(TOPIC, -1, -1, assignments={0: [1, 2, 3]})
            await eventually_async(
                lambda: all(b.fenced for b in controller.state.brokers.values()),
                timeout=10,
                what="every silent broker fenced",
            )
            fenced = part(controller.state)
            assert (fenced.leader, fenced.isr, len(fenced.elr)) == (-1, (), 2)
            back, other = fenced.elr
            await controller.broker_heartbeat(back, brokers[back].epoch, timeout=5)
            p = part(controller.state)
            assert (p.leader, p.isr, p.elr) == (back, (back,), (other,))
        finally:
            await controller.stop()

    asyncio.run(main())
