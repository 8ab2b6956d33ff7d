"""The follower side of replication, without sockets: which fetched bytes are appended
and where a follower truncates after a leader change."""

from __future__ import annotations

import asyncio
import datetime
import uuid
from dataclasses import replace
from pathlib import Path

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v15.response import (
    EpochEndOffset,
    FetchableTopicResponse,
    FetchResponse,
    PartitionData,
)
from kio.schema.types import BrokerId
from kio.serial import entity_reader
from kio.static.primitive import i32, i64

from kbroker.controller.state import MetadataState, PartitionInfo, TopicInfo
from kbroker.protocol.batch import encode_batch
from kbroker.replica.delayed import DataWaiters
from kbroker.replica.fetcher import (
    FetcherSettings,
    FetchState,
    ReplicaFetcher,
    ReplicaFetchers,
    whole_batches,
)
from kbroker.replica.partition import Partition
from kbroker.storage import LogConfig, PartitionLog

NOW = 1_700_000_000_000


def replica(tmp_path: Path, node_id: int) -> Partition:
    log = PartitionLog.open(tmp_path / f"n{node_id}" / "t-0", LogConfig(), NOW)
    return Partition("t", 0, log, node_id, DataWaiters())


def test_a_trailing_partial_batch_is_left_for_the_next_fetch() -> None:
    first = bytes(encode_batch([(None, b"a")], NOW))
    second = bytes(encode_batch([(None, b"b" * 100)], NOW))
    assert whole_batches(first + second) == len(first) + len(second)
    assert whole_batches(first + second[:-1]) == len(first)
    assert whole_batches(second[:30]) == 0


def test_a_follower_cuts_its_tail_where_its_epoch_ended_on_the_leader(tmp_path: Path) -> None:
    follower = replica(tmp_path, 2)
    follower.become_leader(1, 0, (1, 2), (2,), NOW)
    follower.append_as_leader(encode_batch([(None, b"a"), (None, b"b")], NOW), NOW)
    follower.become_leader(2, 1, (1, 2), (2,), NOW)
    follower.append_as_leader(encode_batch([(None, b"lone")], NOW), NOW)  # never replicated
    follower.become_follower(1, 3, 2, (1, 2), (1,))
    # The leader's answer to OffsetForLeaderEpoch(2): its epoch 1 ended at offset 2.
    ReplicaFetcher._truncate_to(FetchState(follower), 2, 1, 2)
    assert follower.log_end_offset == 2
    assert follower.log.leader_epoch_entries() == [(1, 0)]


def test_a_follower_keeps_its_log_when_the_leader_has_all_of_its_epoch(tmp_path: Path) -> None:
    follower = replica(tmp_path, 2)
    follower.become_leader(1, 0, (1, 2), (2,), NOW)
    follower.append_as_leader(encode_batch([(None, b"a"), (None, b"b")], NOW), NOW)
    follower.become_follower(1, 2, 1, (1, 2), (1,))
    state = FetchState(follower)
    ReplicaFetcher._truncate_to(state, 1, 1, 5)  # the leader has more of epoch 1
    assert follower.log_end_offset == 2
    assert not state.truncating


def fetch_answer(leader: Partition, follower: Partition) -> PartitionData:
    """The leader's Fetch v15 answer to the follower's next fetch, as the fetcher decodes it."""
    read = leader.read(
        follower.log_end_offset,
        1 << 20,
        replica_id=follower.node_id,
        now_ms=NOW,
        last_fetched_epoch=follower.log.latest_epoch,
    )
    records = None
    if read.records is not None:
        with read.records as region:
            records = bytes(region.read())
    fields: dict = {}
    if read.diverging_epoch is not None:
        epoch, end = read.diverging_epoch
        fields["diverging_epoch"] = EpochEndOffset(epoch=i32(epoch), end_offset=i64(end))
    return PartitionData(
        partition_index=i32(0),
        error_code=read.error,
        high_watermark=i64(read.high_watermark),
        last_stable_offset=i64(read.last_stable_offset),
        log_start_offset=i64(read.log_start_offset),
        aborted_transactions=(),
        preferred_read_replica=BrokerId(-1),
        records=records,
        **fields,
    )


def test_a_follower_with_a_divergent_tail_truncates_from_the_fetch_answer(tmp_path: Path) -> None:
    leader, follower = replica(tmp_path, 1), replica(tmp_path, 2)
    leader.become_leader(1, 0, (1, 2), (1, 2), NOW)
    follower.become_follower(1, 1, 0, (1, 2), (1, 2))
    leader.append_as_leader(encode_batch([(None, b"a"), (None, b"b")], NOW), NOW)
    fetcher = ReplicaFetcher(2, 1, MetadataState, FetcherSettings())
    state = FetchState(follower)
    fetcher._apply(state, fetch_answer(leader, follower), NOW)
    assert follower.log_end_offset == 2
    # Broker 2 leads epoch 2 alone for a moment and writes a tail nobody else gets.
    follower.become_leader(2, 1, (1, 2), (2,), NOW)
    follower.append_as_leader(encode_batch([(None, b"lost")], NOW), NOW)
    leader.become_leader(3, 2, (1, 2), (1,), NOW)
    leader.append_as_leader(encode_batch([(None, b"c")], NOW), NOW)
    follower.become_follower(1, 3, 2, (1, 2), (1,))
    state = FetchState(follower)
    assert not state.truncating  # no OffsetForLeaderEpoch first: the fetch answer says
    answer = fetch_answer(leader, follower)
    assert (answer.diverging_epoch.epoch, answer.diverging_epoch.end_offset) == (1, 2)
    fetcher._apply(state, answer, NOW)
    assert follower.log_end_offset == 2
    assert follower.log.leader_epoch_entries() == [(1, 0)]
    fetcher._apply(state, fetch_answer(leader, follower), NOW)  # now it fetches on
    assert follower.log_end_offset == leader.log_end_offset == 3
    assert follower.log.leader_epoch_entries() == leader.log.leader_epoch_entries()


def test_an_epoch_begun_as_leader_and_never_written_goes_when_the_follower_truncates(
    tmp_path: Path,
) -> None:
    follower = replica(tmp_path, 2)
    follower.become_leader(1, 0, (1, 2), (2,), NOW)
    follower.append_as_leader(encode_batch([(None, b"a")], NOW), NOW)
    follower.become_leader(2, 1, (1, 2), (2,), NOW)  # begins epoch 2 at 1, writes nothing
    follower.become_follower(1, 3, 2, (1, 2), (1,))
    ReplicaFetcher._truncate_to(FetchState(follower), 2, 1, 5)
    assert follower.log_end_offset == 1
    assert follower.log.latest_epoch == 1


def test_a_role_change_applied_during_shutdown_starts_no_fetcher(tmp_path: Path) -> None:
    """The controller may commit a change to a followed partition (its ISR, after this
    broker's controlled shutdown) once the fetchers have stopped and before the logs
    close: no fetcher may start then, to fail on the closed log and outlive the broker."""
    follower = replica(tmp_path, 2)
    follower.become_follower(1, 1, 0, (1, 2), (1, 2))

    async def shut_down() -> None:
        fetchers = ReplicaFetchers(2, MetadataState)
        fetchers.follow(follower)
        assert fetchers.fetching(follower)
        await fetchers.stop()
        fetchers.follow(follower)
        assert fetchers.fetchers == {}
        assert not [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]

    asyncio.run(shut_down())


class RecordingLink:
    """A leader that answers each Fetch with the next of `answers` and keeps the requests."""

    connected = True

    def __init__(self, answers: list[FetchResponse]) -> None:
        self.answers = answers
        self.requests: list = []  # type: ignore[type-arg]

    async def call(self, request, timeout: float) -> FetchResponse:  # type: ignore[no-untyped-def]
        self.requests.append(request)
        return self.answers.pop(0)

    async def call_body(
        self, api_key: int, version: int, body: bytes, timeout: float
    ) -> FetchResponse:
        """A request written by hand, kept as kio reads it (what the leader would read)."""
        request, _ = entity_reader(load_request_schema(api_key, version))(body, 0)
        return await self.call(request, timeout)


def answer(
    session_id: int, topic_id: uuid.UUID, *parts: PartitionData, error: int = 0
) -> FetchResponse:
    return FetchResponse(
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode(error),
        session_id=i32(session_id),
        responses=(FetchableTopicResponse(topic_id=topic_id, partitions=parts),) if parts else (),
    )


def nothing_new(index: int, high_watermark: int) -> PartitionData:
    return PartitionData(
        partition_index=i32(index),
        error_code=ErrorCode.none,
        high_watermark=i64(high_watermark),
        last_stable_offset=i64(high_watermark),
        log_start_offset=i64(0),
        aborted_transactions=(),
        preferred_read_replica=BrokerId(-1),
        records=None,
    )


def named(request) -> list[tuple[int, int]]:  # type: ignore[no-untyped-def]
    """(partition, fetch offset) of each partition a Fetch names."""
    return [(int(p.partition), int(p.fetch_offset)) for t in request.topics for p in t.partitions]


def test_a_fetcher_names_only_what_moved_within_its_fetch_session(tmp_path: Path) -> None:
    topic_id = uuid.uuid4()
    followed = []
    for index in range(3):
        log = PartitionLog.open(tmp_path / f"t-{index}", LogConfig(), NOW)
        p = Partition("t", index, log, 2, DataWaiters())
        p.become_follower(1, 1, 0, (1, 2), (1, 2))
        followed.append(p)
    partitions = tuple(PartitionInfo(i, 1, (1, 2), (1, 2), 1) for i in range(3))
    metadata = MetadataState(topics={"t": TopicInfo("t", topic_id, partitions)})
    fetcher = ReplicaFetcher(2, 1, lambda: metadata, FetcherSettings())
    for p in followed:
        fetcher.partitions[p.key] = FetchState(p)
    records = bytes(encode_batch([(None, b"a"), (None, b"b")], NOW, partition_leader_epoch=1))
    link = RecordingLink(
        [
            answer(42, topic_id, *(nothing_new(i, 0) for i in range(3))),  # a session begins
            answer(42, topic_id),  # nothing new anywhere
            answer(42, topic_id, replace(nothing_new(1, 2), records=records)),
            answer(42, topic_id),
            answer(0, topic_id, error=70),  # FETCH_SESSION_ID_NOT_FOUND: the leader restarted
            answer(43, topic_id, *(nothing_new(i, 2 if i == 1 else 0) for i in range(3))),
        ]
    )

    async def rounds() -> None:
        for _ in range(6):
            assert await fetcher._fetch(link)  # type: ignore[arg-type]

    asyncio.run(rounds())
    sessions = [(int(r.session_id), int(r.session_epoch)) for r in link.requests]
    assert sessions == [(0, 0), (42, 1), (42, 2), (42, 3), (42, 4), (0, 0)]
    assert named(link.requests[0]) == [(0, 0), (1, 0), (2, 0)]
    assert named(link.requests[1]) == named(link.requests[2]) == []
    assert followed[1].log_end_offset == 2
    assert named(link.requests[3]) == [(1, 2)]  # only the partition that moved
    assert named(link.requests[4]) == []
    assert named(link.requests[5]) == [(0, 0), (1, 2), (2, 0)]  # in full again
    assert all(not r.forgotten_topics_data for r in link.requests)
    # A partition no longer followed is forgotten by the session.
    del fetcher.partitions[followed[2].key]
    link.answers.append(answer(43, topic_id))
    asyncio.run(fetcher._fetch(link))  # type: ignore[arg-type]
    last = link.requests[-1]
    assert (int(last.session_id), int(last.session_epoch), named(last)) == (43, 1, [])
    assert [(t.topic_id, list(t.partitions)) for t in last.forgotten_topics_data] == [
        (topic_id, [2])
    ]
    # A new leader epoch names the partition again, with the epoch.
    followed[0].become_follower(1, 2, 0, (1, 2), (1, 2))
    link.answers.append(answer(43, topic_id))
    asyncio.run(fetcher._fetch(link))  # type: ignore[arg-type]
    last = link.requests[-1]
    assert named(last) == [(0, 0)]
    assert [int(p.current_leader_epoch) for t in last.topics for p in t.partitions] == [2]
    # The topic made again under a new id: its partitions come under the new id, and the
    # session forgets them under the old one.
    new_id = uuid.uuid4()
    metadata = MetadataState(topics={"t": TopicInfo("t", new_id, partitions)})
    link.answers.append(answer(43, new_id))
    asyncio.run(fetcher._fetch(link))  # type: ignore[arg-type]
    last = link.requests[-1]
    assert [(t.topic_id, named_in(t)) for t in last.topics] == [(new_id, [(0, 0), (1, 2)])]
    assert [(t.topic_id, list(t.partitions)) for t in last.forgotten_topics_data] == [
        (topic_id, [0, 1])
    ]


def named_in(topic) -> list[tuple[int, int]]:  # type: ignore[no-untyped-def]
    return [(int(p.partition), int(p.fetch_offset)) for p in topic.partitions]
