"""Fencing, return, controlled shutdown and AlterPartition as metadata commands: who leads,
who is in sync, and which epochs move (Kafka's rules, applied without Raft)."""

import asyncio
import uuid

import pytest

from compat_tests.waiting import eventually_async
from kbroker.config import BrokerConfig
from kbroker.controller import Controller, ControllerConfig
from kbroker.controller import commands as cmd
from kbroker.controller.commands import apply_command
from kbroker.controller.errors import (
    FENCED_LEADER_EPOCH,
    INELIGIBLE_REPLICA,
    INVALID_REQUEST,
    INVALID_UPDATE_VERSION,
    NOT_CONTROLLER,
    STALE_BROKER_EPOCH,
)
from kbroker.controller.events import BrokerChanged, PartitionChanged
from kbroker.controller.state import state_from_plain, state_to_plain
from kbroker.controller_node import controller_config
from tests.metadata_commands import cluster, ok, part


def fence(state, epochs, node, **extra):
    return ok(state, cmd.FENCE_BROKER, {"node_id": node, "epoch": epochs[node], **extra})


def test_fencing_the_leader_elects_the_next_in_sync_replica_and_bumps_both_epochs():
    state, epochs = cluster([1, 2, 3])
    applied = fence(state, epochs, 1)
    p = part(applied.state)
    assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (2, (2, 3), 1, 1)
    assert applied.state.brokers[1].fenced
    assert PartitionChanged("t", applied.state.topics["t"].topic_id, p) in applied.events
    assert any(isinstance(e, BrokerChanged) for e in applied.events)


def test_fencing_a_follower_shrinks_the_isr_but_keeps_the_leader_epoch():
    state, epochs = cluster([1, 2, 3])
    p = part(fence(state, epochs, 3).state)
    assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (1, (1, 2), 0, 1)


def test_the_last_in_sync_replica_stays_in_the_isr_and_the_partition_goes_offline():
    state, epochs = cluster([1])
    p = part(fence(state, epochs, 1).state)
    assert (p.leader, p.isr) == (-1, (1,))


def test_an_offline_partition_comes_back_when_its_last_in_sync_replica_heartbeats():
    state, epochs = cluster([1])
    state = fence(state, epochs, 1).state
    applied = ok(state, cmd.BROKER_HEARTBEAT, {"node_id": 1, "epoch": epochs[1]})
    p = part(applied.state)
    assert not applied.state.brokers[1].fenced
    assert (p.leader, p.isr, p.leader_epoch) == (1, (1,), 2)


def test_without_unclean_election_an_out_of_sync_replica_never_leads():
    state, epochs = cluster([1, 2])
    state = fence(state, epochs, 2).state  # isr (1,)
    state = fence(state, epochs, 1).state  # offline, isr stays (1,)
    state = ok(state, cmd.BROKER_HEARTBEAT, {"node_id": 2, "epoch": epochs[2]}).state
    assert part(state).leader == -1


def test_unclean_election_takes_an_out_of_sync_replica_when_the_topic_allows_it():
    state, epochs = cluster([1, 2], configs={"unclean.leader.election.enable": "true"})
    state = fence(state, epochs, 2).state
    state = fence(state, epochs, 1).state
    state = ok(state, cmd.BROKER_HEARTBEAT, {"node_id": 2, "epoch": epochs[2]}).state
    assert (part(state).leader, part(state).isr) == (2, (2,))


def test_a_heartbeat_from_an_old_incarnation_is_stale():
    state, epochs = cluster([1])
    applied = apply_command(state, cmd.BROKER_HEARTBEAT, {"node_id": 1, "epoch": epochs[1] - 1})
    assert applied.outcome.error_code == STALE_BROKER_EPOCH
    assert applied.state is state


def test_an_unfenced_heartbeat_changes_no_metadata():
    state, epochs = cluster([1])
    assert ok(state, cmd.BROKER_HEARTBEAT, {"node_id": 1, "epoch": epochs[1]}).state is state


def test_a_broker_shutting_down_is_not_unfenced_by_its_heartbeats():
    state, epochs = cluster([1, 2])
    state = fence(state, epochs, 1, shutting_down=True).state
    state = ok(state, cmd.BROKER_HEARTBEAT, {"node_id": 1, "epoch": epochs[1]}).state
    assert state.brokers[1].fenced and part(state).leader == 2


def test_a_restart_the_controller_missed_ends_the_old_incarnations_leadership():
    state, epochs = cluster([1, 2])
    applied = ok(
        state, cmd.REGISTER_BROKER, {"node_id": 1, "host": "h", "port": 1, "timestamp_ms": 0}
    )
    p = part(applied.state)
    assert applied.outcome.epoch > epochs[1]
    assert (p.leader, p.isr) == (2, (2,))


def alter(state, **fields):
    p = part(state)
    payload = {
        "topic_id": state.topics["t"].topic_id.bytes,
        "partition": 0,
        "leader": p.leader,
        "leader_epoch": p.leader_epoch,
        "partition_epoch": p.partition_epoch,
        "isr": list(p.isr),
    }
    payload.update(fields)
    return apply_command(state, cmd.ALTER_PARTITION, payload)


def test_alter_partition_changes_the_isr_and_bumps_only_the_partition_epoch():
    state, _ = cluster([1, 2, 3])
    applied = alter(state, isr=[1, 2])
    assert (applied.outcome.isr, applied.outcome.leader_epoch) == ((1, 2), 0)
    assert applied.outcome.partition_epoch == 1
    assert part(applied.state) == applied.outcome


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"leader_epoch": -1}, FENCED_LEADER_EPOCH),
        ({"leader_epoch": 5}, NOT_CONTROLLER),
        ({"leader": 2}, FENCED_LEADER_EPOCH),
        ({"partition_epoch": 7}, INVALID_UPDATE_VERSION),
        ({"isr": [2, 3]}, INVALID_REQUEST),
        ({"isr": [1, 4]}, INVALID_REQUEST),
    ],
)
def test_alter_partition_is_refused_as_kafka_refuses_it(fields, code):
    state, _ = cluster([1, 2, 3])
    applied = alter(state, **fields)
    assert applied.outcome.error_code == code
    assert applied.state is state


def test_alter_partition_may_not_add_a_fenced_replica():
    state, epochs = cluster([1, 2, 3])
    state = fence(state, epochs, 3).state
    assert alter(state, isr=[1, 2, 3]).outcome.error_code == INELIGIBLE_REPLICA


def elect(state, election_type, *partitions):
    return ok(
        state,
        cmd.ELECT_LEADERS,
        {"election_type": election_type, "partitions": [list(p) for p in partitions]},
    )


def test_preferred_election_is_refused_while_the_preferred_replica_is_out_of_sync():
    state, epochs = cluster([1, 2])
    state = fence(state, epochs, 1).state
    state = ok(state, cmd.BROKER_HEARTBEAT, {"node_id": 1, "epoch": epochs[1]}).state
    applied = elect(state, 0, ("t", 0), ("t", 5))
    assert [r[2] for r in applied.outcome] == [80, 3]  # PREFERRED_LEADER_NOT_AVAILABLE
    assert part(applied.state).leader == 2


def test_unclean_election_gives_an_offline_partition_a_live_out_of_sync_leader():
    state, epochs = cluster([1, 2])
    state = fence(state, epochs, 2).state
    state = fence(state, epochs, 1).state
    state = ok(state, cmd.BROKER_HEARTBEAT, {"node_id": 2, "epoch": epochs[2]}).state
    applied = elect(state, 1, ("t", 0))
    assert applied.outcome == [["t", 0, 0, None]]
    assert (part(applied.state).leader, part(applied.state).isr) == (2, (2,))


async def _imbalanced(controller):
    """Partition t-0 (replicas [1, 2]) led by 2 while 1, its preferred leader, is back in
    its ISR: the leader rebalance owes it to 1. Answers the partition as it was."""
    b1 = await controller.register_broker(1, "h", 1)
    await controller.register_broker(2, "h", 2)
    info = await controller.create_topic("t", -1, -1, assignments={0: [1, 2]})
    await controller.controlled_shutdown(1, b1.epoch, timeout=5)
    await controller.register_broker(1, "h", 1)
    p = controller.state.topics["t"].partitions[0]
    assert (p.leader, p.isr) == (2, (2,))
    await controller.alter_partition(
        info.topic_id,
        0,
        leader=2,
        leader_epoch=p.leader_epoch,
        partition_epoch=p.partition_epoch,
        new_isr=[2, 1],
    )
    return p


def test_the_active_controller_gives_leadership_back_to_the_preferred_replica(tmp_path):
    async def main():
        controller = Controller(
            ControllerConfig(1, tmp_path, leader_imbalance_check_interval_s=0.05)
        )
        await controller.start()
        try:
            p = await _imbalanced(controller)
            await eventually_async(
                lambda: controller.state.topics["t"].partitions[0].leader == 1,
                timeout=5,
                what="the preferred leader back",
            )
            back = controller.state.topics["t"].partitions[0]
            assert (back.leader, back.leader_epoch) == (1, p.leader_epoch + 1)
        finally:
            await controller.stop()

    asyncio.run(main())


def test_stop_ends_when_it_cancels_the_leader_rebalance_in_the_turn_its_election_commits(
    tmp_path,
):
    """The rebalance's election answered in the very loop turn stop() cancels it: the
    rebalance ends (it used to take the answer for its cancellation's and run on, and
    stop() waited for it forever)."""

    async def main():
        controller = Controller(
            ControllerConfig(1, tmp_path, leader_imbalance_check_interval_s=0.01)
        )
        await controller.start()
        try:
            await _imbalanced(controller)
            await eventually_async(
                lambda: any(f.done() for f in controller._pending),
                timeout=5,
                what="a leader rebalance proposed and answered",
                interval=0,  # stop() must come in the turn the answer arrives
            )
        finally:
            await asyncio.wait_for(controller.stop(), 5)
        assert controller.state.topics["t"].partitions[0].leader == 1

    asyncio.run(main())


async def _offline_with_an_out_of_sync_replica_back(controller):
    """Partition t-0 (replicas [1, 2]): 2 left the ISR at its controlled shutdown and
    registered again, then 1, the last in-sync replica, shut down too: the partition has
    no leader while 2 is live but out of sync."""
    await controller.register_broker(1, "h", 1)
    b2 = await controller.register_broker(2, "h", 2)
    await controller.create_topic("t", -1, -1, assignments={0: [1, 2]})
    await controller.controlled_shutdown(2, b2.epoch, timeout=5)
    await controller.register_broker(2, "h", 2)
    b1 = controller.state.brokers[1]
    await controller.controlled_shutdown(1, b1.epoch, timeout=5)
    p = controller.state.topics["t"].partitions[0]
    assert (p.leader, controller.state.brokers[2].fenced) == (-1, False)
    return p


@pytest.mark.parametrize("where", ["topic", "cluster default"])
def test_the_active_controller_elects_a_live_replica_once_unclean_election_is_enabled(
    tmp_path, where
):
    """Kafka's periodic unclean election (unclean.leader.election.interval.ms): a partition
    already offline when its topic, or the cluster, comes to allow unclean election gets
    its live out-of-sync replica as leader without any broker coming or going."""

    async def main():
        controller = Controller(
            ControllerConfig(1, tmp_path, unclean_leader_election_interval_s=0.05)
        )
        await controller.start()
        try:
            before = await _offline_with_an_out_of_sync_replica_back(controller)
            enable = {"unclean.leader.election.enable": "true"}
            if where == "topic":
                await controller.set_topic_configs("t", enable)
            else:
                await controller.set_broker_configs("", enable)
            await eventually_async(
                lambda: controller.state.topics["t"].partitions[0].leader == 2,
                timeout=5,
                what="the out-of-sync replica elected",
            )
            after = controller.state.topics["t"].partitions[0]
            assert (after.isr, after.leader_epoch) == ((2,), before.leader_epoch + 1)
        finally:
            await controller.stop()

    asyncio.run(main())


def test_the_periodic_unclean_election_leaves_an_offline_partition_whose_topic_refuses_it(
    tmp_path, monkeypatch
):
    """Unclean election disabled (the default): the periodic check elects nothing, however
    many times it runs, and the partition waits for its last in-sync replica."""
    checked = []
    allowed = cmd.unclean_allowed

    def counted(info, default):
        checked.append(info.name)
        return allowed(info, default)

    monkeypatch.setattr(cmd, "unclean_allowed", counted)

    async def main():
        controller = Controller(
            ControllerConfig(1, tmp_path, unclean_leader_election_interval_s=0.01)
        )
        await controller.start()
        try:
            await _offline_with_an_out_of_sync_replica_back(controller)
            checked.clear()
            await eventually_async(
                lambda: checked.count("t") >= 3, timeout=5, what="three periodic checks of t"
            )
            assert controller.state.topics["t"].partitions[0].leader == -1
        finally:
            await controller.stop()

    asyncio.run(main())


def offline(state, epochs, node):
    topic_id = state.topics["t"].topic_id.bytes
    payload = {"node_id": node, "epoch": epochs[node], "partitions": [(topic_id, 0)]}
    return ok(state, cmd.REPLICAS_OFFLINE, payload)


def test_a_leader_whose_log_directory_failed_gives_the_partition_to_the_next_in_sync():
    state, epochs = cluster([1, 2, 3])
    applied = offline(state, epochs, 1)
    p = part(applied.state)
    assert (p.leader, p.isr, p.leader_epoch) == (2, (2, 3), 1)
    assert not applied.state.brokers[1].fenced  # its other replicas stay in service
    assert applied.events == (PartitionChanged("t", applied.state.topics["t"].topic_id, p),)


def test_an_offline_replica_of_the_last_in_sync_broker_leaves_the_partition_leaderless():
    state, epochs = cluster([1])
    p = part(offline(state, epochs, 1).state)
    assert (p.leader, p.isr) == (-1, (1,))


def test_a_replica_whose_log_directory_failed_is_recorded_offline_until_its_broker_registers():
    state, epochs = cluster([1, 2, 3])
    state = offline(state, epochs, 2).state
    topic_id = state.topics["t"].topic_id
    assert state.brokers[2].replica_offline(topic_id, 0)
    assert not state.brokers[1].replica_offline(topic_id, 0)
    assert state_from_plain(state_to_plain(state)).brokers[2].offline_replicas == {(topic_id, 0)}
    # A restarted broker checked its directories again: its replicas are back.
    again = {"node_id": 2, "host": "h", "port": 9002, "timestamp_ms": 0}
    state = ok(state, cmd.REGISTER_BROKER, again).state
    assert not state.brokers[2].replica_offline(topic_id, 0)


def test_a_fenced_broker_that_returns_does_not_lead_a_partition_its_failed_directory_held():
    # 1 is the last in-sync replica when its directory fails: the partition goes offline.
    state, epochs = cluster([1, 2])
    state = fence(state, epochs, 2).state
    state = offline(state, epochs, 1).state
    assert (part(state).leader, part(state).isr) == (-1, (1,))
    # Broker 2 returns (a clean election runs), then 1 is fenced and returns: neither
    # return elects 1, whose replica is still offline.
    state = ok(state, cmd.BROKER_HEARTBEAT, {"node_id": 2, "epoch": epochs[2]}).state
    assert part(state).leader == -1
    state = fence(state, epochs, 1).state
    state = ok(state, cmd.BROKER_HEARTBEAT, {"node_id": 1, "epoch": epochs[1]}).state
    assert not state.brokers[1].fenced
    assert part(state).leader == -1


def test_unclean_election_skips_a_replica_on_a_failed_directory():
    state, epochs = cluster([1, 2, 3])
    state = fence(state, epochs, 3).state
    state = fence(state, epochs, 2).state  # isr (1,)
    state = offline(state, epochs, 1).state
    state = ok(state, cmd.BROKER_HEARTBEAT, {"node_id": 3, "epoch": epochs[3]}).state
    applied = elect(state, 1, ("t", 0))
    assert (part(applied.state).leader, part(applied.state).isr) == (3, (3,))


def test_preferred_election_refuses_a_preferred_replica_on_a_failed_directory():
    state, epochs = cluster([1, 2])
    state = fence(state, epochs, 2).state
    state = offline(state, epochs, 1).state  # isr stays (1,), no leader
    state = ok(state, cmd.BROKER_HEARTBEAT, {"node_id": 2, "epoch": epochs[2]}).state
    applied = elect(state, 0, ("t", 0))
    assert applied.outcome[0][2] == 80  # PREFERRED_LEADER_NOT_AVAILABLE
    assert part(applied.state).leader == -1


def test_alter_partition_may_not_add_back_a_replica_on_a_failed_directory():
    state, epochs = cluster([1, 2, 3])
    state = offline(state, epochs, 3).state
    assert part(state).isr == (1, 2)
    assert alter(state, isr=[1, 2, 3]).outcome.error_code == INELIGIBLE_REPLICA


def test_a_broker_registering_with_an_offline_replica_leaves_its_isr_and_does_not_lead_it():
    state, epochs = cluster([1, 2], brokers=(1, 2))
    state = fence(state, epochs, 2).state  # isr (1,), leader 1
    topic_id = state.topics["t"].topic_id
    # Broker 1 restarts with the directory of its replica offline.
    again = {
        "node_id": 1,
        "host": "h",
        "port": 9001,
        "timestamp_ms": 0,
        "offline": [(topic_id.bytes, 0)],
    }
    state = ok(state, cmd.REGISTER_BROKER, again).state
    assert state.brokers[1].replica_offline(topic_id, 0)
    assert (part(state).leader, part(state).isr) == (-1, (1,))
    state = ok(state, cmd.BROKER_HEARTBEAT, {"node_id": 2, "epoch": epochs[2]}).state
    assert part(state).leader == -1


def test_a_created_partition_leaves_a_fenced_replica_out_unless_the_command_predates_the_rule():
    """Replaying a log written before new partitions took only active replicas into the
    ISR must rebuild the state those commands first built."""
    state, epochs = cluster([2], brokers=[1, 2])
    state = fence(state, epochs, 1).state

    def created(name, **extra):
        payload = {"name": name, "topic_id": uuid.uuid4().bytes, "assignment": [[1, 2]]}
        p = ok(state, cmd.CREATE_TOPIC, {**payload, "configs": {}, **extra}).outcome.partitions[0]
        return p.leader, p.isr

    assert created("now", active_isr=True) == (2, (2,))
    assert created("before") == (1, (1, 2))


def test_unclean_leader_election_interval_ms_sets_the_controllers_check():
    """The setting reaches the controller of a cluster (Kafka's default, 5 minutes, when
    unset); a single node, with no other replica to elect, runs no check."""
    cluster = {
        "node.id": "1",
        "process.roles": "broker,controller",
        "listeners": "PLAINTEXT://127.0.0.1:9091,CONTROLLER://127.0.0.1:19091",
        "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": "1@127.0.0.1:19091,2@127.0.0.1:19092,3@127.0.0.1:19093",
        "cluster.secret": "s3cret",
    }
    default = controller_config(BrokerConfig.from_settings(cluster))
    assert default.unclean_leader_election_interval_s == 300.0
    shortened = BrokerConfig.from_settings(
        {**cluster, "unclean.leader.election.interval.ms": "250"}
    )
    assert controller_config(shortened).unclean_leader_election_interval_s == 0.25
    single = controller_config(BrokerConfig.from_settings({}))
    assert single.unclean_leader_election_interval_s is None
