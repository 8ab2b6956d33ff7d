"""The share coordinator without a broker: membership by heartbeat, share sessions, bad
acknowledgements answered with Kafka's error codes, expiry, and reloading its records."""

from __future__ import annotations

import struct
import uuid

import pytest

from kbroker.coordinator.share_group_records import (
    fold_share_groups,
    is_share_group_record,
    metadata_hash,
)
from kbroker.coordinator.store import KeyValue
from kbroker.protocol.batch import encode_batch
from kbroker.share.coordinator import ShareCoordinator
from kbroker.share.group_configs import ShareConfig, parse_duration_ms
from kbroker.share.partition import (
    FENCED_MEMBER_EPOCH,
    INVALID_REQUEST,
    INVALID_SHARE_SESSION_EPOCH,
    LEAVE_EPOCH,
    SHARE_SESSION_LIMIT_REACHED,
    SHARE_SESSION_NOT_FOUND,
    UNKNOWN_MEMBER_ID,
    FetchAnswer,
    TopicRef,
)
from kbroker.share.partition_state import INVALID_RECORD_STATE, AckBatch, AckType
from kbroker.share.records import state_key

TOPIC = TopicRef("orders", uuid.uuid4(), 1)
TP = (TOPIC.topic_id, 0)
RECORDS = 10
LOCK = 1000


class FakeLog:
    """One partition of RECORDS one-record batches."""

    def __init__(self) -> None:
        self.batches = [
            bytes(encode_batch([(None, b"v")], 0, base_offset=o)) for o in range(RECORDS)
        ]

    def bounds(self, topic: str, partition: int, committed: bool) -> tuple[int, int] | None:
        return (0, RECORDS)

    def read(
        self, topic: str, partition: int, offset: int, max_bytes: int, end: int, *_: object
    ) -> tuple[bytes, list[tuple[int, int, int]]]:
        """Every batch from `offset` below `end` (ShareLog.read: none is transactional,
        and reading on past `stop_offset` is allowed)."""
        data, index = b"", []
        for o in range(offset, end):
            index.append((o, o, len(data)))
            data += self.batches[o]
        return data, index

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        return 7  # every record was stamped 7 ms apart from 0: offset 7 is the first found

    def by_name(self, name: str) -> TopicRef | None:
        return TOPIC if name == TOPIC.name else None

    def by_id(self, topic_id: uuid.UUID) -> TopicRef | None:
        return TOPIC if topic_id == TOPIC.topic_id else None


@pytest.fixture
def coordinator() -> ShareCoordinator:
    fake = FakeLog()
    c = ShareCoordinator(ShareConfig(record_lock_ms=LOCK, session_timeout_ms=5000), fake, fake)
    c.set_group_configs("g", {"share.auto.offset.reset": "earliest"})
    return c


def join(c: ShareCoordinator, member: str, now: int = 0) -> int:
    result = c.membership.heartbeat(
        "g", member, 0, None, (TOPIC.name,), "client", "/127.0.0.1", now
    )
    assert result.error == 0
    return result.member_epoch


def fetch(c: ShareCoordinator, member: str, max_records: int = 100, now: int = 0) -> FetchAnswer:
    answer = FetchAnswer()
    session = c.leader.sessions.get(("g", member))
    epoch = 0 if session is None else session.epoch
    session = c.leader.open_session("g", member, epoch, [TP], [], False, answer)
    assert session is not None, answer.message
    c.leader.acquire("g", member, session, max_records, 1 << 20, now, answer)
    return answer


def ack(c: ShareCoordinator, member: str, *batches: AckBatch, now: int = 0) -> FetchAnswer:
    answer = FetchAnswer()
    c.leader.acknowledge("g", member, [(TOPIC.topic_id, 0, list(batches))], now, answer)
    return answer


def test_every_member_of_a_one_partition_topic_is_assigned_that_partition(coordinator) -> None:  # type: ignore[no-untyped-def]
    join(coordinator, "a")
    join(coordinator, "b")
    members = coordinator.membership.groups["g"].members
    assert members["a"].assignment == {TOPIC.topic_id: frozenset({0})}
    assert members["b"].assignment == {TOPIC.topic_id: frozenset({0})}


def test_share_groups_are_as_many_as_are_made(coordinator) -> None:  # type: ignore[no-untyped-def]
    """Kafka 4.3 has no cap on share groups (Kafka 4.0's group.share.max.groups, 10 by
    default, is gone): a long-lived cluster keeps making new ones."""
    for n in range(150):
        result = coordinator.membership.heartbeat(
            f"g{n}", "a", 0, None, (TOPIC.name,), "client", "/127.0.0.1", 0
        )
        assert result.error == 0, (n, result.message)
    assert len(coordinator.membership.groups) >= 150


def test_a_stale_member_epoch_is_fenced(coordinator) -> None:  # type: ignore[no-untyped-def]
    first = join(coordinator, "a")
    join(coordinator, "b")
    current = coordinator.membership.heartbeat(
        "g", "a", first, None, None, "c", "h", 0
    ).member_epoch
    assert current > first
    join(coordinator, "c")
    newest = coordinator.membership.heartbeat(
        "g", "a", current, None, None, "c", "h", 0
    ).member_epoch
    assert newest > current
    stale = coordinator.membership.heartbeat(
        "g", "a", first, None, None, "c", "h", 0
    )  # older than both
    assert stale.error == FENCED_MEMBER_EPOCH
    ahead = coordinator.membership.heartbeat("g", "a", newest + 1, None, None, "c", "h", 0)
    assert ahead.error == FENCED_MEMBER_EPOCH


def test_members_joining_together_do_not_fence_each_other(coordinator) -> None:  # type: ignore[no-untyped-def]
    """Each join bumps the group epoch, but a member's epoch moves only with its own
    heartbeat (as on Kafka): the epoch of its last answer stays valid."""
    epochs = {m: join(coordinator, m) for m in "abcd"}
    for member, epoch in epochs.items():
        result = coordinator.membership.heartbeat("g", member, epoch, None, None, "c", "h", 0)
        assert result.error == 0
        assert result.member_epoch == coordinator.membership.groups["g"].group_epoch == 4


def test_a_batch_optimized_fetch_lists_its_records_by_the_requests_batch_size(coordinator) -> None:  # type: ignore[no-untyped-def]
    join(coordinator, "a")
    answer = FetchAnswer()
    session = coordinator.leader.open_session("g", "a", 0, [TP], [], False, answer)
    assert session is not None
    coordinator.leader.acquire("g", "a", session, 10, 1 << 20, 0, answer, batch_size=4)
    ranges = [(r.first_offset, r.last_offset) for r in answer.partitions[TP].acquired]
    assert ranges == [(0, 3), (4, 7), (8, 9)]  # one-record batches: cut every 4


def test_a_record_limit_fetch_lists_its_records_whole(coordinator) -> None:  # type: ignore[no-untyped-def]
    join(coordinator, "a")
    answer = FetchAnswer()
    session = coordinator.leader.open_session("g", "a", 0, [TP], [], False, answer)
    assert session is not None
    coordinator.leader.acquire("g", "a", session, 10, 1 << 20, 0, answer, False, batch_size=4)
    ranges = [(r.first_offset, r.last_offset) for r in answer.partitions[TP].acquired]
    assert ranges == [(0, 9)]


def test_an_unknown_member_is_told_so(coordinator) -> None:  # type: ignore[no-untyped-def]
    result = coordinator.membership.heartbeat("g", "ghost", 3, None, None, "c", "h", 0)
    assert result.error == UNKNOWN_MEMBER_ID


def test_acknowledging_another_members_records_is_invalid_record_state(coordinator) -> None:  # type: ignore[no-untyped-def]
    join(coordinator, "a")
    join(coordinator, "b")
    got = fetch(coordinator, "a", max_records=3)
    assert [(r.first_offset, r.last_offset) for r in got.partitions[TP].acquired] == [(0, 2)]
    answer = ack(coordinator, "b", AckBatch(0, 2, (int(AckType.ACCEPT),)))
    assert answer.partitions[TP].ack_error == INVALID_RECORD_STATE
    assert coordinator.leader.partitions[("g", *TP)].state.acquired_by("a") == [0, 1, 2]


def test_overlapping_acknowledgement_ranges_are_invalid_request(coordinator) -> None:  # type: ignore[no-untyped-def]
    join(coordinator, "a")
    fetch(coordinator, "a")
    answer = ack(
        coordinator,
        "a",
        AckBatch(0, 4, (int(AckType.ACCEPT),)),
        AckBatch(3, 6, (int(AckType.ACCEPT),)),
    )
    assert answer.partitions[TP].ack_error == INVALID_REQUEST
    assert coordinator.leader.partitions[("g", *TP)].state.start_offset == 0


def test_share_session_epochs_must_follow_in_sequence(coordinator) -> None:  # type: ignore[no-untyped-def]
    answer = FetchAnswer()
    assert coordinator.leader.open_session("g", "a", 5, [TP], [], False, answer) is None
    assert answer.error == SHARE_SESSION_NOT_FOUND
    assert coordinator.leader.open_session("g", "a", 0, [TP], [], False, FetchAnswer()) is not None
    answer = FetchAnswer()
    assert coordinator.leader.open_session("g", "a", 7, [], [], False, answer) is None
    assert answer.error == INVALID_SHARE_SESSION_EPOCH
    assert coordinator.leader.open_session("g", "a", 1, [], [], False, FetchAnswer()) is not None


def test_opening_a_session_with_acknowledgements_is_invalid_request(coordinator) -> None:  # type: ignore[no-untyped-def]
    answer = FetchAnswer()
    assert coordinator.leader.open_session("g", "a", 0, [TP], [], True, answer) is None
    assert answer.error == INVALID_REQUEST


def test_an_expired_member_releases_its_records_to_the_others(coordinator) -> None:  # type: ignore[no-untyped-def]
    join(coordinator, "a")
    join(coordinator, "b")
    fetch(coordinator, "a", max_records=RECORDS)
    assert fetch(coordinator, "b").partitions == {}
    coordinator.membership.heartbeat(
        "g",
        "b",
        coordinator.membership.groups["g"].members["b"].member_epoch,
        None,
        None,
        "c",
        "h",
        4000,
    )
    coordinator.tick(5500)  # a last heard of at 0: past its 5 s session; locks also gone
    assert "a" not in coordinator.membership.groups["g"].members
    again = fetch(coordinator, "b", now=5500)
    assert again.partitions[TP].acquired[0].delivery_count == 2


def test_final_acknowledgements_arriving_after_the_leave_heartbeat_are_applied(coordinator) -> None:  # type: ignore[no-untyped-def]
    """A closing consumer sends its leave heartbeat and its final ShareAcknowledge
    together: the leave coming first releases nothing, the final request's
    acknowledgements apply, then what is still held goes back to the group."""
    join(coordinator, "a")
    fetch(coordinator, "a", max_records=6)
    coordinator.membership.heartbeat("g", "a", LEAVE_EPOCH, None, None, "client", "/127.0.0.1", 0)
    state = coordinator.leader.partitions[("g", *TP)].state
    assert state.acquired_by("a") == [0, 1, 2, 3, 4, 5]
    answer = FetchAnswer()
    assert coordinator.leader.open_session("g", "a", -1, [], [], True, answer) is not None
    coordinator.leader.acknowledge("g", "a", [(TP[0], 0, [AckBatch(0, 3, (1,))])], 0, answer)
    coordinator.leader.close_session("g", "a")
    assert answer.partitions[TP].ack_error == 0
    assert state.start_offset == 4
    assert state.acquired_by("a") == []
    join(coordinator, "b")
    again = fetch(coordinator, "b")
    assert [(r.first_offset, r.delivery_count) for r in again.partitions[TP].acquired][0] == (4, 2)


def test_a_member_leaving_without_a_share_session_releases_at_once(coordinator) -> None:  # type: ignore[no-untyped-def]
    join(coordinator, "a")
    fetch(coordinator, "a", max_records=3)
    coordinator.leader.close_session("g", "a")  # records released, then acquired again below
    fetch(coordinator, "a", max_records=3)
    del coordinator.leader.sessions[("g", "a")]  # its session evicted meanwhile
    coordinator.membership.heartbeat("g", "a", LEAVE_EPOCH, None, None, "client", "/127.0.0.1", 0)
    assert coordinator.leader.partitions[("g", *TP)].state.acquired_by("a") == []


def test_a_left_members_unended_session_is_evicted_when_idle_and_its_records_released(
    coordinator,
) -> None:  # type: ignore[no-untyped-def]
    join(coordinator, "a")
    fetch(coordinator, "a", max_records=3)
    coordinator.membership.heartbeat("g", "a", LEAVE_EPOCH, None, None, "client", "/127.0.0.1", 0)
    state = coordinator.leader.partitions[("g", *TP)].state
    coordinator.tick(500)
    assert state.acquired_by("a") == [0, 1, 2]  # neither lock (1 s) nor session idle yet
    coordinator.tick(5001)
    assert ("g", "a") not in coordinator.leader.sessions
    assert state.acquired_by("a") == []


def test_state_reloaded_from_its_records_keeps_acknowledgements(coordinator) -> None:  # type: ignore[no-untyped-def]
    join(coordinator, "a")
    fetch(coordinator, "a", max_records=6)
    ack(coordinator, "a", AckBatch(0, 5, (1, 1, 2, 1, 1, 1)))  # offset 2 released
    records = [(state_key(k), v) for k, (v, _) in coordinator.leader.take_dirty().items()]
    fake = FakeLog()
    reloaded = ShareCoordinator(ShareConfig(record_lock_ms=LOCK), fake, fake)
    reloaded.leader.load(records)
    join(reloaded, "z")
    answer = fetch(reloaded, "z")
    offsets = [
        o for r in answer.partitions[TP].acquired for o in range(r.first_offset, r.last_offset + 1)
    ]
    assert offsets == [2, 6, 7, 8, 9]


def test_by_duration_starts_at_the_first_record_of_that_age(coordinator) -> None:  # type: ignore[no-untyped-def]
    coordinator.set_group_configs("g", {"share.auto.offset.reset": "by_duration:PT1H"})
    join(coordinator, "a")
    got = fetch(coordinator, "a")
    assert got.partitions[TP].acquired[0].first_offset == 7


def test_durations_are_read_as_iso_8601() -> None:
    assert parse_duration_ms("PT1H30M") == 5_400_000
    assert parse_duration_ms("P1DT0.5S") == 86_400_500
    with pytest.raises(ValueError):
        parse_duration_ms("1h")


def test_a_malformed_by_duration_reset_is_refused(coordinator) -> None:  # type: ignore[no-untyped-def]
    assert coordinator.configs.validate("share.auto.offset.reset", "by_duration:1h")
    assert coordinator.configs.validate("share.auto.offset.reset", "by_duration:PT") is not None
    assert coordinator.configs.validate("share.auto.offset.reset", "by_duration:PT5M") is None


def test_a_deleted_topics_share_state_is_dropped_with_a_tombstone(coordinator) -> None:  # type: ignore[no-untyped-def]
    join(coordinator, "a")
    fetch(coordinator, "a")
    coordinator.leader.take_dirty()
    coordinator.forget_topic(TOPIC.topic_id)
    assert coordinator.leader.partitions == {}
    assert [value for value, _ in coordinator.leader.take_dirty().values()] == [None]


def test_share_sessions_beyond_the_limit_are_refused_and_idle_ones_of_no_member_evicted() -> None:
    fake = FakeLog()
    c = ShareCoordinator(ShareConfig(max_share_sessions=2, session_timeout_ms=5000), fake, fake)
    for member in ("a", "b"):
        assert c.leader.open_session("g", member, 0, [TP], [], False, FetchAnswer(), now_ms=0)
    refused = FetchAnswer()
    assert c.leader.open_session("g", "c", 0, [TP], [], False, refused, now_ms=0) is None
    assert refused.error == SHARE_SESSION_LIMIT_REACHED
    c.tick(6000)  # a and b never joined the group and have been idle past its timeout
    assert c.leader.open_session("g", "c", 0, [TP], [], False, FetchAnswer(), now_ms=6000)


def test_group_configs_stay_within_the_brokers_bounds(coordinator) -> None:  # type: ignore[no-untyped-def]
    check = coordinator.configs.validate
    assert check("share.session.timeout.ms", "45000") is None
    assert check("share.session.timeout.ms", "1000") is not None  # below the 45 s minimum
    assert check("share.heartbeat.interval.ms", "60000") is not None  # above 15 s
    assert check("share.record.lock.duration.ms", "999999999") is not None
    assert check("share.delivery.count.limit", "11") is not None
    assert check("no.such.config", "1") is not None


def test_a_state_nobody_reads_with_nothing_in_flight_is_read_again_by_a_new_session(
    coordinator,
) -> None:  # type: ignore[no-untyped-def]
    key = ("g", TOPIC.topic_id, 0)
    join(coordinator, "a")
    fetch(coordinator, "a", max_records=3)
    coordinator.leader.refresh_unshared("g", "b", [TP])
    assert key in coordinator.leader.partitions  # records 0-2 are in flight
    ack(coordinator, "a", AckBatch(0, 2, (1,)))
    coordinator.leader.take_dirty()
    coordinator.leader.refresh_unshared("g", "b", [TP])
    assert key in coordinator.leader.partitions  # a's session still reads it
    coordinator.leader.close_session("g", "a")
    coordinator.leader.take_dirty()
    coordinator.leader.refresh_unshared("g", "b", [TP])
    assert key not in coordinator.leader.partitions  # to be read again from its share coordinator


def _write(c: ShareCoordinator, log: list[KeyValue]) -> list[KeyValue]:
    """Append the coordinator's changed groups' records to `log`, stored: the records."""
    written = c.membership.take_group_records()
    c.membership.group_records_stored(written, True)
    records = [r for group_records in written.values() for r in group_records]
    assert all(is_share_group_record(key) for key, _ in records)
    log += records
    return records


def _reloaded(c: ShareCoordinator, log: list[KeyValue], now: int = 0) -> ShareCoordinator:
    """A new coordinator of the group's offsets partition, loading `log` at `now` after
    `c` appended its changed groups' records to it."""
    _write(c, log)
    fresh = ShareCoordinator(c.config, FakeLog(), FakeLog())
    fresh.membership.load_groups(fold_share_groups(log, lambda error: pytest.fail(str(error))), now)
    return fresh


def test_a_share_group_and_its_epoch_are_loaded_from_its_records_without_members(
    coordinator,
) -> None:  # type: ignore[no-untyped-def]
    join(coordinator, "a")
    coordinator.membership.heartbeat("g", "a", LEAVE_EPOCH, None, None, "client", "/127.0.0.1", 0)
    fresh = _reloaded(coordinator, [])
    assert fresh.membership.groups["g"].group_epoch == 2
    assert fresh.membership.groups["g"].state == "Empty"
    assert fresh.share_group_ids() == {"g"}
    assert (
        fresh.membership.heartbeat("g", "b", 0, None, (TOPIC.name,), "c", "/h", 0).member_epoch == 3
    )


def test_a_deleted_share_group_is_not_loaded_again(coordinator) -> None:  # type: ignore[no-untyped-def]
    join(coordinator, "a")
    coordinator.membership.heartbeat("g", "a", LEAVE_EPOCH, None, None, "client", "/127.0.0.1", 0)
    log: list[KeyValue] = []
    _write(coordinator, log)
    assert coordinator.delete_group("g") == 0
    fresh = _reloaded(coordinator, log)
    assert fresh.membership.groups == {}
    assert fresh.share_group_ids() == set()


def _uvarint(n: int) -> bytes:
    out = b""
    while True:
        byte, n = n & 0x7F, n >> 7
        if not n:
            return out + bytes([byte])
        out += bytes([byte | 0x80])


def _compact_string(text: str) -> bytes:
    return _uvarint(len(text.encode()) + 1) + text.encode()


def test_share_group_records_have_kafkas_record_types_and_value_layouts(coordinator) -> None:  # type: ignore[no-untyped-def]
    join(coordinator, "a")
    records = dict(_write(coordinator, []))
    keyed = {struct.unpack_from(">h", k)[0]: (k, v) for k, v in records.items()}
    assert sorted(keyed) == [10, 11, 12, 13, 14]
    group_key = struct.pack(">h", 11) + struct.pack(">h", 1) + b"g"
    member_key = struct.pack(">h", 14) + struct.pack(">h", 1) + b"g" + struct.pack(">h", 1) + b"a"
    assert keyed[11][0] == group_key and keyed[14][0] == member_key
    # ShareGroupMetadataValue v0: Epoch int32, MetadataHash int64, tags.
    hashed = metadata_hash([(TOPIC.topic_id, TOPIC.name, TOPIC.partitions)])
    assert keyed[11][1] == struct.pack(">hiq", 0, 1, hashed) + b"\0"
    # ShareGroupTargetAssignmentMetadataValue v0: AssignmentEpoch int32, tags.
    assert keyed[12][1] == struct.pack(">hi", 0, 1) + b"\0"
    # ShareGroupMemberMetadataValue v0: RackId (null), ClientId, ClientHost,
    # SubscribedTopicNames, tags.
    assert keyed[10][1] == (
        struct.pack(">h", 0)
        + _uvarint(0)
        + _compact_string("client")
        + _compact_string("/127.0.0.1")
        + _uvarint(2)
        + _compact_string(TOPIC.name)
        + b"\0"
    )
    partitions = _uvarint(2) + TOPIC.topic_id.bytes + _uvarint(2) + struct.pack(">i", 0) + b"\0"
    # ShareGroupTargetAssignmentMemberValue v0: TopicPartitions, tags.
    assert keyed[13][1] == struct.pack(">h", 0) + partitions + b"\0"
    # ShareGroupCurrentMemberAssignmentValue v0: MemberEpoch, PreviousMemberEpoch,
    # State (STABLE), AssignedPartitions, tags.
    assert keyed[14][1] == struct.pack(">hiib", 0, 1, 0, 0) + partitions + b"\0"


def test_a_loaded_member_heartbeats_on_at_its_epoch_without_joining_again(coordinator) -> None:  # type: ignore[no-untyped-def]
    join(coordinator, "a")
    epoch = join(coordinator, "b")
    fresh = _reloaded(coordinator, [])
    group = fresh.membership.groups["g"]
    assert (group.group_epoch, group.assignment_epoch, group.state) == (2, 2, "Stable")
    assert group.members["b"].assignment == {TOPIC.topic_id: frozenset({0})}
    answer = fresh.membership.heartbeat("g", "b", epoch, None, None, "client", "/127.0.0.1", 100)
    assert (answer.error, answer.member_epoch, answer.assignment) == (0, epoch, None)
    assert fresh.membership.groups["g"].group_epoch == 2


def test_a_loaded_member_that_stays_silent_expires_and_its_records_get_tombstones(
    coordinator,
) -> None:  # type: ignore[no-untyped-def]
    join(coordinator, "a")
    log: list[KeyValue] = []
    fresh = _reloaded(coordinator, log, now=1000)
    fresh.tick(1000 + 5000)
    assert "a" in fresh.membership.groups["g"].members  # its session started when it was loaded
    fresh.tick(1000 + 5001)
    assert (
        fresh.membership.groups["g"].members == {} and fresh.membership.groups["g"].group_epoch == 2
    )
    tombstones = {struct.unpack_from(">h", k)[0] for k, v in _write(fresh, log) if v is None}
    assert tombstones == {10, 13, 14}
    assert _reloaded(fresh, log).membership.groups["g"].members == {}


def test_a_member_that_left_is_not_loaded_again(coordinator) -> None:  # type: ignore[no-untyped-def]
    join(coordinator, "a")
    join(coordinator, "b")
    coordinator.membership.heartbeat("g", "b", LEAVE_EPOCH, None, None, "client", "/127.0.0.1", 0)
    assert (
        coordinator.membership.heartbeat("g", "a", 1, None, None, "client", "/h", 0).member_epoch
        == 3
    )
    fresh = _reloaded(coordinator, [])
    assert set(fresh.membership.groups["g"].members) == {"a"}
    assert fresh.membership.groups["g"].members["a"].member_epoch == 3


def test_group_records_whose_write_failed_are_written_again(coordinator) -> None:  # type: ignore[no-untyped-def]
    join(coordinator, "a")
    first = coordinator.membership.take_group_records()
    coordinator.membership.group_records_stored(first, False)
    again = coordinator.membership.take_group_records()
    assert again == first


def test_a_share_group_record_without_a_metadata_hash_is_still_read() -> None:
    """kbroker once wrote ShareGroupMetadata with the epoch alone."""
    key = struct.pack(">h", 11) + struct.pack(">h", 1) + b"g"
    value = struct.pack(">hi", 0, 7) + b"\0"
    stored = fold_share_groups([(key, value)], lambda error: pytest.fail(str(error)))
    group = stored["g"]
    assert group is not None and group.epoch == 7


def test_a_group_whose_partition_is_unloaded_loses_its_members_and_releases_nothing(
    coordinator,
) -> None:  # type: ignore[no-untyped-def]
    """Another broker coordinates the group now: its members do not expire here."""
    coordinator.set_group_configs("g", {"share.record.lock.duration.ms": "60000"})
    join(coordinator, "a")
    assert fetch(coordinator, "a", max_records=3).acquired_any
    coordinator.membership.unload_groups(lambda group_id: group_id == "g")
    assert "g" not in coordinator.membership.groups
    session = coordinator.leader.sessions[("g", "a")]  # the member goes on fetching here
    assert coordinator.leader.open_session(
        "g", "a", session.epoch, [], [], False, FetchAnswer(), 9000
    )
    coordinator.tick(10_000)  # past its session timeout as a member, within the lock
    held = coordinator.leader.partitions[("g", TOPIC.topic_id, 0)]
    assert held.state.holds("a")


def test_acknowledgements_dropped_with_their_partition_before_being_stored_are_lost(
    coordinator,
) -> None:  # type: ignore[no-untyped-def]
    """The data partition's leadership moves on (the state is dropped unwritten) between
    an acknowledgement and the write that would store it: the writer learns so and the
    request is not answered as stored, for the next leader never sees it."""
    key = ("g", TOPIC.topic_id, 0)
    join(coordinator, "a")
    fetch(coordinator, "a", max_records=4)
    ack(coordinator, "a", AckBatch(0, 1, (1,)))
    coordinator.leader.take_dirty()  # stored in time: not lost when dropped later
    ack(coordinator, "a", AckBatch(2, 3, (1,)))
    coordinator.leader.drop(key)
    assert coordinator.leader.take_dirty() == {}
    assert coordinator.leader.lost_acknowledgements() == {key}
    assert coordinator.leader.lost_acknowledgements() == set()


def test_kip_1240_group_configs_are_checked_against_the_brokers_bounds() -> None:
    fake = FakeLog()
    c = ShareCoordinator(
        ShareConfig(max_delivery_count_limit=6, min_max_record_locks=200), fake, fake
    )
    check = c.configs.validate
    assert check("share.delivery.count.limit", "6") is None
    assert check("share.delivery.count.limit", "7") == (
        "share.delivery.count.limit must be less than or equal to "
        "group.share.max.delivery.count.limit"
    )
    assert check("share.delivery.count.limit", "1") == (
        "Invalid value 1 for configuration share.delivery.count.limit: Value must be at least 2"
    )
    assert check("share.delivery.count.limit", "x") is not None
    assert check("share.partition.max.record.locks", "2000") is None
    assert check("share.partition.max.record.locks", "2001") == (
        "share.partition.max.record.locks must be less than or equal to "
        "group.share.max.partition.max.record.locks"
    )
    assert check("share.partition.max.record.locks", "150") == (
        "share.partition.max.record.locks must be greater than or equal to "
        "group.share.min.partition.max.record.locks"
    )
    assert check("share.renew.acknowledge.enable", "false") is None
    assert check("share.renew.acknowledge.enable", "1") is not None


def _released_twice(c: ShareCoordinator) -> FetchAnswer:
    join(c, "a")
    for _ in range(2):
        got = fetch(c, "a", max_records=1)
        assert [(r.first_offset, r.last_offset) for r in got.partitions[TP].acquired] == [(0, 0)]
        assert ack(c, "a", AckBatch(0, 0, (int(AckType.RELEASE),))).partitions[TP].ack_error == 0
    return fetch(c, "a", max_records=1)


def test_a_groups_lower_delivery_count_limit_archives_records_sooner(coordinator) -> None:  # type: ignore[no-untyped-def]
    coordinator.set_group_configs("g", {"share.delivery.count.limit": "2"})
    third = _released_twice(coordinator)
    # delivered twice, the limit: archived, so the next fetch starts at offset 1
    assert [(r.first_offset, r.last_offset) for r in third.partitions[TP].acquired] == [(1, 1)]


def test_the_brokers_delivery_count_limit_applies_without_a_group_config(coordinator) -> None:  # type: ignore[no-untyped-def]
    third = _released_twice(coordinator)
    assert [(r.first_offset, r.last_offset) for r in third.partitions[TP].acquired] == [(0, 0)]


def test_a_groups_max_record_locks_caps_the_records_in_flight(coordinator) -> None:  # type: ignore[no-untyped-def]
    # stored group configs are applied as they are (they were checked when set); a cap
    # below the records the log holds shows it
    coordinator.set_group_configs("g", {"share.partition.max.record.locks": "3"})
    join(coordinator, "a")
    got = fetch(coordinator, "a")
    assert [(r.first_offset, r.last_offset) for r in got.partitions[TP].acquired] == [(0, 2)]
    coordinator.set_group_configs("g", {"share.partition.max.record.locks": "5"})
    more = fetch(coordinator, "a")  # the held share-partition follows the change
    assert [(r.first_offset, r.last_offset) for r in more.partitions[TP].acquired] == [(3, 4)]


@pytest.mark.parametrize("enabled", ["true", "false"])
def test_renew_acknowledgements_are_refused_when_the_group_disables_them(
    coordinator, enabled: str
) -> None:  # type: ignore[no-untyped-def]
    coordinator.set_group_configs("g", {"share.renew.acknowledge.enable": enabled})
    join(coordinator, "a")
    fetch(coordinator, "a", max_records=3)
    answer = ack(coordinator, "a", AckBatch(0, 2, (int(AckType.RENEW),)))
    expected = 0 if enabled == "true" else INVALID_RECORD_STATE
    assert answer.partitions[TP].ack_error == expected
    assert coordinator.leader.partitions[("g", *TP)].state.acquired_by("a") == [0, 1, 2]
