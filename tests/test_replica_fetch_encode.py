"""A follower's Fetch, written by hand: byte for byte what kio writes for the same
request, whatever its topics, partitions, forgotten partitions and session."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema

from kbroker.protocol.fetch_request import (
    CONSUMER,
    REPLICA_FETCH_VERSION,
    ReplicaFetchPartition,
    encode_replica_fetch,
    fetch_partition,
    in_session,
    sessionless_fetch,
)
from kbroker.protocol.messages import build, encode

INT32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
TOPIC_IDS = st.uuids(version=4)
PARTITION: st.SearchStrategy[ReplicaFetchPartition] = st.tuples(
    INT32, INT32, INT64, INT32, INT64, INT32
)


def by_kio(
    replica_id: int,
    head: tuple[int, int, int, int, int],
    topics: dict[uuid.UUID, list[ReplicaFetchPartition]],
    forgotten: dict[uuid.UUID, list[int]],
) -> bytes:
    max_wait, min_bytes, max_bytes, session_id, session_epoch = head
    fields = sessionless_fetch(
        [
            {
                "topic_id": topic_id,
                "partitions": [
                    fetch_partition(
                        index,
                        offset,
                        partition_max,
                        current_leader_epoch=leader_epoch,
                        last_fetched_epoch=last_epoch,
                        log_start_offset=log_start,
                    )
                    for index, leader_epoch, offset, last_epoch, log_start, partition_max in ps
                ],
            }
            for topic_id, ps in topics.items()
        ],
        max_wait=max_wait,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        replica_id=replica_id,
        replica_state=True,
    )
    forgets = [{"topic_id": topic_id, "partitions": ps} for topic_id, ps in forgotten.items()]
    in_session(fields, session_id, session_epoch, forgets)
    return encode(build(load_request_schema(1, REPLICA_FETCH_VERSION), fields))


@settings(max_examples=300)
@given(
    st.one_of(st.just(CONSUMER), st.integers(min_value=0, max_value=2**31 - 1)),
    st.tuples(st.integers(min_value=0, max_value=2**31 - 1), INT32, INT32, INT32, INT32),
    st.dictionaries(TOPIC_IDS, st.lists(PARTITION, max_size=5), max_size=4),
    st.dictionaries(TOPIC_IDS, st.lists(INT32, max_size=6), max_size=3),
)
def test_a_replica_fetch_is_written_as_kio_writes_it(
    replica_id: int,
    head: tuple[int, int, int, int, int],
    topics: dict[uuid.UUID, list[ReplicaFetchPartition]],
    forgotten: dict[uuid.UUID, list[int]],
) -> None:
    mine = encode_replica_fetch(replica_id, *head, topics, forgotten)
    assert mine == by_kio(replica_id, head, topics, forgotten)


def test_a_fetch_of_two_hundred_topics_is_written_as_kio_writes_it() -> None:
    """Past 127 entries a compact array's length takes two bytes."""
    topics = {uuid.uuid4(): [(i, 1, i, 0, 0, 1 << 20)] for i in range(200)}
    forgotten = {uuid.uuid4(): list(range(130))}
    head = (500, 1, 10 << 20, 9, 4)
    assert encode_replica_fetch(3, *head, topics, forgotten) == by_kio(3, head, topics, forgotten)
