"""The share coordinator's store: what it keeps of each share-partition, the fencing of a
data partition's former leader, and Kafka's wire form of a state (Read/Write
ShareGroupState) turning back into the same state."""

from __future__ import annotations

import json
import uuid

from kbroker.share.partition_state import AckBatch, SharePartitionState
from kbroker.share.records import state_key, state_value
from kbroker.share.state_store import (
    FENCED_LEADER_EPOCH,
    FENCED_STATE_EPOCH,
    ShareStateStore,
    from_state_batches,
    share_key,
    to_state_batches,
)

TOPIC_ID = uuid.UUID("9b1d8a4e-7c2f-4f5e-8d3a-1b2c3d4e5f60")
KEY = ("g", TOPIC_ID, 0)


def store() -> ShareStateStore:
    return ShareStateStore(lambda: 50)


def value(start: int = 0, leader_epoch: int = 0, state_epoch: int = 0) -> bytes:
    return state_value(
        "orders",
        {
            "start": start,
            "end": start,
            "runs": [],
            "dlq": [],
            "leader_epoch": leader_epoch,
            "state_epoch": state_epoch,
        },
    )


def start_of(read: tuple[bytes | None, int]) -> int:
    return int(json.loads(read[0] or b"{}")["start"])


def test_the_coordinator_key_is_kafkas_group_topic_id_partition() -> None:
    assert share_key(KEY) == "g:mx2KTnwvT16NOhssPU5fYA:0"


def test_a_write_under_an_older_leader_epoch_than_a_reader_is_fenced() -> None:
    s = store()
    assert s.write(KEY, value(5, 3), 3) == 0
    assert s.read(KEY, 4) == (value(5, 3), 0)  # the new leader reads: epoch 4 from now on
    assert s.write(KEY, value(9, 3), 3) == FENCED_LEADER_EPOCH
    assert s.write(KEY, value(7, 4), 4) == 0
    assert start_of(s.read(KEY, 4)) == 7


def test_starting_a_state_again_or_deleting_it_fences_whoever_holds_the_old_one() -> None:
    s = store()
    assert s.write(KEY, value(5), 0) == 0
    assert s.initialize(KEY, "orders", 1, 100) == 0  # AlterShareGroupOffsets to 100
    assert s.initialize(KEY, "orders", 1, 200) == FENCED_STATE_EPOCH  # not newer
    assert s.write(KEY, value(6), 0) == FENCED_STATE_EPOCH  # the leader holding epoch 0
    stored, state_epoch = s.read(KEY, 0)
    assert (start_of((stored, state_epoch)), state_epoch) == (100, 1)
    s.delete(KEY)
    assert s.read(KEY, 0) == (None, 2)  # a fresh state starts under epoch 2
    assert s.write(KEY, value(7, 0, 1), 0) == FENCED_STATE_EPOCH
    assert s.write(KEY, value(8, 0, 2), 0) == 0


def test_a_summary_shows_a_write_only_once_it_is_committed_and_a_leader_reads_it_at_once() -> None:
    s = store()
    s.load(s.partition_of(KEY), [(state_key(KEY), value(13))])  # all below the HW: committed
    assert s.write(KEY, value(20), 0) == 0
    number = s.stage()  # appended, not yet replicated to the ISR
    assert start_of(s.summary(KEY)) == 13
    assert start_of(s.read(KEY, 0)) == 20  # the share-partition's leader sees its write
    s.commit(number, {KEY: value(20)})
    assert start_of(s.summary(KEY)) == 20
    s.commit(number - 1, {KEY: value(13)})  # an older write committing late changes nothing
    assert start_of(s.summary(KEY)) == 20


def test_a_load_commits_only_the_records_below_the_high_watermark() -> None:
    s = store()
    records = [(state_key(KEY), value(13)), (state_key(KEY), value(20))]
    loaded, pending = s.load(s.partition_of(KEY), records, committed=1)
    assert loaded == 1
    assert start_of(s.read(KEY, 0)) == 20  # the leader reads the latest state
    assert start_of(s.summary(KEY)) == 13  # a failover could still lose the second record
    s.commit(s.stage(), pending)  # the high watermark passed it
    assert start_of(s.summary(KEY)) == 20


def test_a_partitions_records_fold_to_its_latest_states_and_tombstones_remove_them() -> None:
    s = store()
    other = ("g", TOPIC_ID, 1)
    partition = s.partition_of(KEY)
    records = [(state_key(KEY), value(1)), (state_key(KEY), value(2)), (state_key(other), None)]
    s.load(partition, records)
    assert start_of(s.read(KEY, 0)) == 2
    s.load(partition, [(state_key(KEY), None)])
    assert s.read(KEY, 0)[0] is None
    assert s.write(KEY, value(3), 0) == 0
    s.unload(partition)
    assert s.entries == {}


def test_the_wire_form_keeps_acknowledged_archived_and_delivery_counts() -> None:
    state = SharePartitionState(10, 5, 100)
    state.acquire("m", [(10, 14), (15, 19)], 10, 0, 1000)
    state.acknowledge("m", [AckBatch(10, 14, (1, 1, 2, 3, 1))], 0, 1000)
    stored = state_value("orders", state.snapshot())
    start, batches = to_state_batches(stored)
    back = SharePartitionState.from_snapshot(
        json.loads(from_state_batches("orders", start, batches, 7)), 5, 100
    )
    assert (
        back.snapshot() == SharePartitionState.from_snapshot(json.loads(stored), 5, 100).snapshot()
    )
    assert json.loads(from_state_batches("orders", start, batches, 7))["leader_epoch"] == 7


def test_the_wire_form_keeps_dead_letters_whose_copy_is_not_yet_written() -> None:
    # Without them a failover between archiving a record and writing its copy would
    # lose the dead letter: only the stored state tells the next leader of it.
    state = SharePartitionState(10, 5, 100)
    state.dead_letters_enabled = True
    state.acquire("m", [(10, 14)], 10, 0, 1000)
    state.acknowledge("m", [AckBatch(10, 14, (1, 3, 1, 3, 1))], 0, 1000)
    assert [d.offset for d in state.pending_dead_letters] == [11, 13]
    stored = state_value("orders", state.snapshot())
    start, batches = to_state_batches(stored)
    back = SharePartitionState.from_snapshot(
        json.loads(from_state_batches("orders", start, batches, 7)), 5, 100
    )
    assert back.pending_dead_letters == state.pending_dead_letters
    assert back.snapshot() == state.snapshot()
