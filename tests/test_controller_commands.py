"""The metadata state machine's transitions, without Raft: pure functions of state and command."""

import uuid

from kbroker.controller import commands as cmd
from kbroker.controller.commands import apply_command
from kbroker.controller.errors import (
    INVALID_PARTITIONS,
    INVALID_REQUEST,
    INVALID_TOPIC_EXCEPTION,
    TOPIC_ALREADY_EXISTS,
    UNKNOWN_TOPIC_OR_PARTITION,
    ControllerError,
)
from kbroker.controller.events import (
    BrokerRegistered,
    PartitionsCreated,
    TopicConfigsChanged,
    TopicCreated,
    TopicDeleted,
    diff_events,
)
from kbroker.controller.machine import MetadataMachine
from kbroker.controller.state import MetadataState, state_from_plain, state_to_plain


def create(state, name, assignment=([1],), configs=None, topic_id=None):
    payload = {
        "name": name,
        "topic_id": (topic_id or uuid.uuid4()).bytes,
        "assignment": [list(r) for r in assignment],
        "configs": configs or {},
    }
    return apply_command(state, cmd.CREATE_TOPIC, payload)


def test_create_topic_builds_partitions_with_first_replica_as_leader():
    applied = create(MetadataState(), "orders", assignment=([1, 2], [2, 1]))
    info = applied.outcome
    assert [p.leader for p in info.partitions] == [1, 2]
    assert info.partitions[1].replicas == (2, 1)
    assert info.partitions[1].isr == (2, 1)
    assert {p.leader_epoch for p in info.partitions} == {0}
    assert applied.state.topics["orders"] is info
    assert applied.state.topics_by_id[info.topic_id] is info
    assert applied.events == (TopicCreated(info),)


def test_every_change_increments_the_version():
    state = MetadataState()
    state = create(state, "a").state
    state = create(state, "b").state
    assert state.version == 2


def test_second_create_of_a_name_is_refused_by_the_log_order():
    first = create(MetadataState(), "orders")
    second = create(first.state, "orders")
    assert isinstance(second.outcome, ControllerError)
    assert second.outcome.error_code == TOPIC_ALREADY_EXISTS
    assert second.state is first.state
    assert second.events == ()


def test_dot_and_underscore_names_collide():
    state = create(MetadataState(), "a.b").state
    refused = create(state, "a_b")
    assert refused.outcome.error_code == INVALID_TOPIC_EXCEPTION


def test_name_freed_by_delete_can_be_reused_without_collision():
    state = create(MetadataState(), "a.b").state
    info = state.topics["a.b"]
    state = apply_command(
        state, cmd.DELETE_TOPIC, {"name": "a.b", "topic_id": info.topic_id.bytes}
    ).state
    assert isinstance(create(state, "a_b").outcome, type(info))


def test_delete_topic_removes_it_from_every_index():
    state = create(MetadataState(), "orders").state
    info = state.topics["orders"]
    applied = apply_command(
        state, cmd.DELETE_TOPIC, {"name": "orders", "topic_id": info.topic_id.bytes}
    )
    assert applied.state.topics == {}
    assert applied.state.topics_by_id == {}
    assert applied.state.topic_collisions == {}
    assert applied.events == (TopicDeleted("orders", info.topic_id),)


def test_delete_of_a_recreated_topic_with_the_old_id_is_refused():
    state = create(MetadataState(), "orders").state
    stale_id = uuid.uuid4().bytes
    applied = apply_command(state, cmd.DELETE_TOPIC, {"name": "orders", "topic_id": stale_id})
    assert applied.outcome.error_code == UNKNOWN_TOPIC_OR_PARTITION
    assert "orders" in applied.state.topics


def test_create_partitions_appends_new_partitions():
    state = create(MetadataState(), "orders", assignment=([1],)).state
    info = state.topics["orders"]
    applied = apply_command(
        state,
        cmd.CREATE_PARTITIONS,
        {"name": "orders", "topic_id": info.topic_id.bytes, "first": 1, "assignment": [[1], [1]]},
    )
    new = applied.state.topics["orders"]
    assert [p.partition for p in new.partitions] == [0, 1, 2]
    assert applied.state.topics_by_id[info.topic_id] is new
    assert applied.events == (PartitionsCreated(new, new.partitions[1:]),)


def test_create_partitions_racing_another_is_refused():
    state = create(MetadataState(), "orders", assignment=([1], [1])).state
    info = state.topics["orders"]
    applied = apply_command(
        state,
        cmd.CREATE_PARTITIONS,
        {"name": "orders", "topic_id": info.topic_id.bytes, "first": 1, "assignment": [[1]]},
    )
    assert applied.outcome.error_code == INVALID_PARTITIONS


def test_incremental_config_change_sets_and_deletes_overrides():
    state = create(MetadataState(), "t", configs={"retention.ms": "1", "segment.bytes": "2"}).state
    applied = apply_command(
        state,
        cmd.ALTER_TOPIC_CONFIGS,
        {"name": "t", "set": {"cleanup.policy": "compact"}, "delete": ["retention.ms"]},
    )
    expected = {"segment.bytes": "2", "cleanup.policy": "compact"}
    assert applied.state.topics["t"].configs == expected
    assert applied.events == (TopicConfigsChanged("t", expected),)


def test_config_replace_drops_unnamed_overrides():
    state = create(MetadataState(), "t", configs={"retention.ms": "1"}).state
    applied = apply_command(
        state, cmd.ALTER_TOPIC_CONFIGS, {"name": "t", "set": {"a": "b"}, "replace": True}
    )
    assert applied.state.topics["t"].configs == {"a": "b"}


def test_producer_id_blocks_do_not_overlap():
    state = MetadataState()
    first = apply_command(state, cmd.ALLOCATE_PRODUCER_IDS, {"count": 1000})
    second = apply_command(first.state, cmd.ALLOCATE_PRODUCER_IDS, {"count": 1000})
    assert (first.outcome, second.outcome) == (0, 1000)
    assert second.state.next_producer_id == 2000


def test_first_cluster_id_wins():
    state = apply_command(MetadataState(), cmd.INIT_CLUSTER, {"cluster_id": "one"}).state
    again = apply_command(state, cmd.INIT_CLUSTER, {"cluster_id": "two"})
    assert again.outcome == "one"
    assert again.state.cluster_id == "one"


def test_register_broker_records_it_unfenced():
    applied = apply_command(
        MetadataState(),
        cmd.REGISTER_BROKER,
        {"node_id": 3, "host": "h", "port": 9092, "rack": "r1", "timestamp_ms": 5},
    )
    info = applied.state.brokers[3]
    assert (info.host, info.port, info.rack, info.fenced, info.last_heartbeat_ms) == (
        "h",
        9092,
        "r1",
        False,
        5,
    )
    assert applied.events == (BrokerRegistered(info),)


def test_unknown_command_is_refused_without_a_change():
    state = MetadataState()
    applied = apply_command(state, "from_the_future", {})
    assert applied.outcome.error_code == INVALID_REQUEST
    assert applied.state is state


def test_barrier_changes_nothing():
    state = MetadataState()
    applied = apply_command(state, cmd.BARRIER, {"token": b"x"})
    assert applied.outcome == b"x"
    assert applied.state is state


def populated_state():
    state = create(MetadataState(), "a", assignment=([1, 2], [2, 1]), configs={"x": "y"}).state
    state = create(state, "b.c").state
    state = apply_command(
        state,
        cmd.REGISTER_BROKER,
        {"node_id": 1, "host": "h", "port": 1, "rack": None, "timestamp_ms": 1},
    ).state
    state = apply_command(state, cmd.INIT_CLUSTER, {"cluster_id": "cid"}).state
    return apply_command(state, cmd.ALLOCATE_PRODUCER_IDS, {"count": 7}).state


def test_snapshot_plain_form_round_trips():
    state = populated_state()
    assert state_from_plain(state_to_plain(state)) == state


def test_snapshot_file_round_trips_state_and_raft_entries(tmp_path):
    machine = MetadataMachine()
    machine.state = populated_state()
    entries = ((b"cmd2", 2, 1), (b"cmd1", 1, 1), set())
    machine.write_snapshot(str(tmp_path / "snap"), entries)
    loaded = MetadataMachine()
    raft_part = loaded.read_snapshot(str(tmp_path / "snap"))
    assert loaded.state == machine.state
    assert raft_part == ((b"cmd2", 2, 1), (b"cmd1", 1, 1), [])


def test_loading_a_snapshot_reports_what_changed():
    old = create(MetadataState(), "gone").state
    new = populated_state()
    events = diff_events(old, new)
    assert TopicDeleted("gone", old.topics["gone"].topic_id) in events
    assert TopicCreated(new.topics["a"]) in events
    assert BrokerRegistered(new.brokers[1]) in events


def test_malformed_command_is_skipped_without_a_change():
    state = MetadataState()
    applied = apply_command(state, cmd.CREATE_TOPIC, {"name": "t"})  # no id, no assignment
    assert applied.outcome.error_code == INVALID_REQUEST
    assert applied.state is state
