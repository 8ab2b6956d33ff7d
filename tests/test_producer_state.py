"""Producer state of a partition log: duplicates, sequences, epochs, transactions, recovery."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kbroker.protocol.batch import encode_batch
from kbroker.storage.config import LogConfig
from kbroker.storage.log import PartitionLog
from kbroker.storage.producer_state import (
    ABORTED_INDEX_FILE,
    COORDINATOR,
    REPLICATION,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    ProducerStateManager,
    read_control_record,
)
from kbroker.txn.markers import encode_marker

T0 = 1_700_000_000_000


def open_log(path: Path, **config: object) -> PartitionLog:
    return PartitionLog.open(path / "topic-0", LogConfig(**config), T0)  # type: ignore[arg-type]


def batch(pid: int = 7, epoch: int = 0, seq: int = 0, n: int = 1, txn: bool = False) -> bytearray:
    return encode_batch(
        [b"v%d" % (seq + i) for i in range(n)],
        T0,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=txn,
    )


def marker(pid: int = 7, epoch: int = 0, commit: bool = True, coordinator_epoch: int = 0):
    return encode_marker(pid, epoch, coordinator_epoch, commit, T0)


def append(plog: PartitionLog, data: bytearray, origin: int = 0):
    result = plog.append(data, 0, T0, origin)
    plog.high_watermark = plog.log_end_offset
    return result


# -- idempotence ----------------------------------------------------------------------------


def test_duplicate_batch_gets_the_original_offsets_and_is_not_written(tmp_path):
    plog = open_log(tmp_path)
    first = append(plog, batch(seq=0, n=3))
    append(plog, batch(seq=3, n=2))
    again = append(plog, batch(seq=0, n=3))
    assert (again.base_offset, again.last_offset) == (first.base_offset, first.last_offset)
    assert plog.log_end_offset == 5


def test_duplicate_of_any_of_the_last_five_batches_is_recognised(tmp_path):
    plog = open_log(tmp_path)
    offsets = [append(plog, batch(seq=i)).base_offset for i in range(5)]
    for seq in range(5):
        assert append(plog, batch(seq=seq)).base_offset == offsets[seq]
    assert plog.log_end_offset == 5


def test_batch_older_than_the_last_five_is_out_of_order(tmp_path):
    plog = open_log(tmp_path)
    for i in range(6):
        append(plog, batch(seq=i))
    with pytest.raises(OutOfOrderSequenceError):
        append(plog, batch(seq=0))


def test_gap_in_sequence_is_out_of_order_and_nothing_is_written(tmp_path):
    plog = open_log(tmp_path)
    append(plog, batch(seq=0, n=2))
    with pytest.raises(OutOfOrderSequenceError):
        append(plog, batch(seq=5))
    assert plog.log_end_offset == 2


def test_unknown_producer_may_start_at_any_sequence(tmp_path):
    # KIP-360: a producer whose state was removed (retention) continues where it was.
    plog = open_log(tmp_path)
    append(plog, batch(pid=9, seq=1234))
    append(plog, batch(pid=9, seq=1235))
    assert plog.log_end_offset == 2


def test_no_batch_above_the_lowest_sequence_waiting_for_its_partition_is_taken(tmp_path):
    """Kafka's VerificationStateEntry: batches 0 and 5 of a transaction both waited for
    the partition to join it; until 0 is written, 5 is out of order (the client sends 0
    again, then 5). A lower sequence lowers the bar, a higher epoch starts afresh."""
    plog = open_log(tmp_path)
    state = plog.producer_state
    state.start_verification(9, 5, 0)
    state.start_verification(9, 0, 0)
    state.start_verification(9, 3, 0)  # the lowest stays 0
    with pytest.raises(OutOfOrderSequenceError, match="waits for the partition"):
        append(plog, batch(pid=9, seq=5, n=2, txn=True))
    assert plog.log_end_offset == 0
    append(plog, batch(pid=9, seq=0, n=5, txn=True))
    assert 9 not in state.verifying  # written: the transaction holds the partition
    append(plog, batch(pid=9, seq=5, n=2, txn=True))
    assert plog.log_end_offset == 7
    state.start_verification(11, 8, 0)
    state.start_verification(11, 2, 1)  # the next epoch's sequences start again
    assert state.verifying[11][:2] == (1, 2)
    assert state.expire(T0, max_age_ms=0) == 0 and 11 not in state.verifying


def test_sequence_wraps_after_int32_max(tmp_path):
    plog = open_log(tmp_path)
    append(plog, batch(seq=2**31 - 2, n=2))
    append(plog, batch(seq=0))
    assert plog.log_end_offset == 3


def test_older_epoch_is_refused(tmp_path):
    plog = open_log(tmp_path)
    append(plog, batch(epoch=3, seq=0))
    with pytest.raises(InvalidProducerEpochError):
        append(plog, batch(epoch=2, seq=1))


def test_new_epoch_must_start_at_sequence_zero(tmp_path):
    plog = open_log(tmp_path)
    append(plog, batch(epoch=0, seq=0))
    with pytest.raises(OutOfOrderSequenceError):
        append(plog, batch(epoch=1, seq=1))
    append(plog, batch(epoch=1, seq=0))
    assert plog.producer_state.producers[7].epoch == 1


def test_batches_without_producer_id_skip_the_producer_state(tmp_path):
    plog = open_log(tmp_path)
    append(plog, encode_batch([b"a"], T0))
    append(plog, encode_batch([b"a"], T0))
    assert plog.log_end_offset == 2
    assert plog.producer_state.producers == {}


def test_negative_sequence_with_a_producer_id_is_invalid(tmp_path):
    plog = open_log(tmp_path)
    with pytest.raises(InvalidRecordError):
        append(plog, batch(seq=-1))
    with pytest.raises(InvalidRecordError):
        append(plog, batch(pid=99, seq=-7))
    assert plog.log_end_offset == 0


def test_client_control_batch_is_invalid(tmp_path):
    plog = open_log(tmp_path)
    with pytest.raises(InvalidRecordError):
        append(plog, marker())
    assert plog.log_end_offset == 0


def test_several_batches_of_one_producer_in_one_append_are_checked_in_order(tmp_path):
    plog = open_log(tmp_path)
    append(plog, batch(seq=0, n=2) + batch(seq=2, n=2))
    assert plog.producer_state.producers[7].last_sequence == 3
    with pytest.raises(OutOfOrderSequenceError):
        append(plog, batch(seq=4) + batch(seq=9))
    assert plog.log_end_offset == 4


# -- transactions -----------------------------------------------------------------------------


def test_open_transaction_holds_the_last_stable_offset(tmp_path):
    plog = open_log(tmp_path)
    append(plog, batch(pid=1, seq=0))
    append(plog, batch(pid=2, seq=0, txn=True))
    append(plog, batch(pid=1, seq=1))
    assert plog.last_stable_offset == 1
    append(plog, marker(pid=2, commit=True), COORDINATOR)
    assert plog.last_stable_offset == plog.high_watermark == 4


def test_abort_marker_indexes_the_aborted_transaction(tmp_path):
    plog = open_log(tmp_path)
    append(plog, batch(pid=2, seq=0, n=3, txn=True))
    append(plog, batch(pid=1, seq=0))
    append(plog, marker(pid=2, commit=False), COORDINATOR)
    aborted = plog.aborted_transactions(0, plog.log_end_offset)
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in aborted] == [(2, 0, 4)]
    assert plog.aborted_transactions(5, 10) == []


def test_committed_transaction_is_not_indexed(tmp_path):
    plog = open_log(tmp_path)
    append(plog, batch(pid=2, seq=0, txn=True))
    append(plog, marker(pid=2, commit=True), COORDINATOR)
    assert plog.aborted_transactions(0, 10) == []


def test_plain_write_inside_an_open_transaction_is_invalid(tmp_path):
    plog = open_log(tmp_path)
    append(plog, batch(seq=0, txn=True))
    with pytest.raises(InvalidTxnStateError):
        append(plog, batch(seq=1, txn=False))


def test_marker_with_older_epoch_is_refused(tmp_path):
    plog = open_log(tmp_path)
    append(plog, batch(epoch=5, seq=0, txn=True))
    with pytest.raises(InvalidProducerEpochError):
        append(plog, marker(epoch=4), COORDINATOR)


def test_marker_with_bumped_epoch_fences_the_old_epoch(tmp_path):
    plog = open_log(tmp_path)
    append(plog, batch(epoch=0, seq=0, txn=True))
    append(plog, marker(epoch=1, commit=False), COORDINATOR)
    with pytest.raises(InvalidProducerEpochError):
        append(plog, batch(epoch=0, seq=1, txn=True))


def test_aborted_lookup_stops_at_the_upper_offset(tmp_path):
    plog = open_log(tmp_path)
    for i in range(50):
        append(plog, batch(pid=3, seq=i, txn=True))
        append(plog, marker(pid=3, commit=False), COORDINATOR)
    found = plog.aborted_transactions(10, 20)
    assert [t.first_offset for t in found] == [10, 12, 14, 16, 18]


def test_read_control_record_reads_type_and_coordinator_epoch():
    assert read_control_record(marker(commit=True, coordinator_epoch=9), 0) == (1, 9)
    assert read_control_record(marker(commit=False, coordinator_epoch=3), 0) == (0, 3)
    garbage = bytearray(marker())
    del garbage[70:]
    assert read_control_record(garbage, 0) == (-1, -1)


# -- persistence ------------------------------------------------------------------------------


def test_clean_close_leaves_a_snapshot_that_reopening_uses_without_replay(tmp_path):
    plog = open_log(tmp_path)
    append(plog, batch(seq=0, n=2))
    plog.close()
    plog = open_log(tmp_path)
    assert plog.producer_state.snapshot_offsets() == [2]
    assert plog.producer_state.load(plog.segments, 0, plog.log_end_offset) == 2
    assert append(plog, batch(seq=0, n=2)).base_offset == 0  # still a duplicate
    plog.close()


def test_unclean_shutdown_rebuilds_the_state_from_batch_headers(tmp_path):
    plog = open_log(tmp_path)
    append(plog, batch(seq=0, n=2))
    append(plog, batch(pid=8, seq=0, txn=True))
    append(plog, batch(seq=2, n=2))
    plog.flush()  # no close: a crash
    reopened = open_log(tmp_path)
    assert append(reopened, batch(seq=2, n=2)).base_offset == 3
    with pytest.raises(OutOfOrderSequenceError):
        append(reopened, batch(seq=9))
    assert reopened.last_stable_offset == 2  # producer 8's transaction is still open
    reopened.close()


def test_roll_snapshots_and_recovery_replays_only_after_the_snapshot(tmp_path):
    plog = open_log(tmp_path, segment_bytes=300)
    for seq in range(20):
        append(plog, batch(seq=seq))
    assert len(plog.segments) > 2
    snapshots = plog.producer_state.snapshot_offsets()
    assert snapshots and snapshots[-1] == plog.segments[-1].base_offset
    plog.flush()  # no close: a crash
    replay = ProducerStateManager(str(tmp_path / "topic-0"))
    assert replay.load(plog.segments, 0, plog.log_end_offset) == snapshots[-1]
    assert replay.producers[7].last_sequence == 19
    reopened = open_log(tmp_path, segment_bytes=300)
    # The replay is saved, so the next start needs none.
    assert reopened.producer_state.snapshot_offsets()[-1] == reopened.log_end_offset == 20
    assert append(reopened, batch(seq=19)).base_offset == 19
    reopened.close()


def test_aborted_transactions_survive_restart_clean_or_not(tmp_path):
    plog = open_log(tmp_path, segment_bytes=400)
    for i in range(6):
        append(plog, batch(pid=4, seq=i, txn=True))
        append(plog, marker(pid=4, commit=i % 2 == 0), COORDINATOR)
    expected = [(t.first_offset, t.last_offset) for t in plog.aborted_transactions(0, 100)]
    assert len(expected) == 3
    plog.flush()
    crashed = open_log(tmp_path, segment_bytes=400)
    assert [(t.first_offset, t.last_offset) for t in crashed.aborted_transactions(0, 100)] == (
        expected
    )
    crashed.close()
    clean = open_log(tmp_path, segment_bytes=400)
    assert [(t.first_offset, t.last_offset) for t in clean.aborted_transactions(0, 100)] == (
        expected
    )
    clean.close()


def test_damaged_snapshot_falls_back_to_replaying_the_log(tmp_path):
    plog = open_log(tmp_path)
    append(plog, batch(seq=0, n=2))
    plog.close()
    path = tmp_path / "topic-0" / f"{2:020d}.snapshot"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(data)
    reopened = open_log(tmp_path)
    assert append(reopened, batch(seq=0, n=2)).base_offset == 0
    reopened.close()


def test_lost_aborted_index_entries_force_a_full_replay(tmp_path):
    plog = open_log(tmp_path, segment_bytes=300)
    append(plog, batch(pid=4, seq=0, txn=True))
    append(plog, marker(pid=4, commit=False), COORDINATOR)
    for seq in range(1, 12):
        append(plog, batch(pid=5, seq=seq))
    plog.close()
    os.unlink(tmp_path / "topic-0" / ABORTED_INDEX_FILE)
    reopened = open_log(tmp_path, segment_bytes=300)
    assert [t.first_offset for t in reopened.aborted_transactions(0, 100)] == [0]
    reopened.close()


def test_truncation_forgets_batches_after_the_new_end(tmp_path):
    plog = open_log(tmp_path)
    append(plog, batch(seq=0))
    append(plog, batch(seq=1))
    append(plog, batch(pid=8, seq=0, txn=True))
    plog.truncate_to(1)
    assert plog.producer_state.producers[7].last_sequence == 0
    assert 8 not in plog.producer_state.producers
    assert plog.last_stable_offset == plog.high_watermark
    append(plog, batch(seq=1))
    assert plog.log_end_offset == 2
    plog.close()


def test_follower_appends_update_state_without_checks(tmp_path):
    leader = open_log(tmp_path / "leader")
    append(leader, batch(seq=0, n=2))
    data = bytearray(leader.read(0, 1 << 20).read())
    follower = open_log(tmp_path / "follower")
    follower.append_as_follower(data, T0)
    assert follower.producer_state.producers[7].last_sequence == 1
    leader.close()
    follower.close()


def test_expire_forgets_idle_producers_without_open_transactions():
    state = ProducerStateManager("/nonexistent")
    from kbroker.storage.producer_state import ProducerEntry

    state.producers[1] = ProducerEntry(1, 0, last_timestamp=T0)
    state.producers[2] = ProducerEntry(2, 0, last_timestamp=T0, txn_first_offset=5)
    state.producers[3] = ProducerEntry(3, 0, last_timestamp=T0 + 10_000)
    assert state.expire(T0 + 5_000, 1_000) == 1
    assert sorted(state.producers) == [2, 3]


def test_replication_origin_is_not_checked(tmp_path):
    plog = open_log(tmp_path)
    append(plog, batch(seq=0))
    append(plog, batch(seq=7), REPLICATION)
    assert plog.producer_state.producers[7].last_sequence == 7
