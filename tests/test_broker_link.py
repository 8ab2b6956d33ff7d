"""One connection from this broker to another, shared by the requests of a service
(implicit AddPartitionsToTxn, the share-group persister and dead letters, schema reads):
requests that overlap each get their own answer, a caller that gives up does not hand
its answer to the next one, and a connection that ends fails every waiting request at
once. The other broker is tests/marker_peer.py's, which answers in order, one request at
a time, as a Kafka broker answers a connection."""

from __future__ import annotations

import asyncio

import pytest
from kio.index import load_request_schema
from marker_peer import WRITE_TXN_MARKERS, MarkerPeer

from kbroker.protocol.messages import build
from kbroker.replica.broker_link import BrokerLink
from kbroker.security.inter_broker import PLAINTEXT


def markers_of(producer_id: int) -> object:
    return build(
        load_request_schema(WRITE_TXN_MARKERS, 1),
        {
            "markers": [
                {
                    "producer_id": producer_id,
                    "producer_epoch": 0,
                    "transaction_result": True,
                    "topics": [{"name": "t", "partition_indexes": [0]}],
                    "coordinator_epoch": 0,
                }
            ]
        },
    )


async def answered_pid(link: BrokerLink, producer_id: int, timeout: float = 5.0) -> int:
    response = await link.call(markers_of(producer_id), timeout)
    return int(response.markers[0].producer_id)


def run_with_peer(peer: MarkerPeer, body) -> object:  # type: ignore[no-untyped-def]
    async def scenario() -> object:
        port = await peer.start()
        link = BrokerLink("127.0.0.1", port, "test", PLAINTEXT)
        try:
            return await body(link)
        finally:
            link.close()
            await peer.stop()

    return asyncio.run(scenario())


def test_overlapping_requests_each_get_their_own_answer_on_one_connection() -> None:
    peer = MarkerPeer(delays={1: 0.05, 4: 0.02})

    async def body(link: BrokerLink) -> list[int]:
        return await asyncio.gather(*(answered_pid(link, pid) for pid in range(1, 21)))

    assert run_with_peer(peer, body) == list(range(1, 21))
    assert peer.connections == 1


def test_a_caller_that_gave_up_leaves_its_late_answer_unread_by_the_next() -> None:
    peer = MarkerPeer(delays={1: 0.3})

    async def body(link: BrokerLink) -> tuple[int, bool]:
        with pytest.raises(TimeoutError):
            await answered_pid(link, 1, timeout=0.05)
        # The answer to 1 arrives while 2 waits: 2 gets its own.
        return await answered_pid(link, 2), link.connected

    assert run_with_peer(peer, body) == (2, True)
    assert peer.connections == 1


def test_a_connection_that_ends_fails_every_waiting_request_and_the_next_call_reconnects() -> None:
    peer = MarkerPeer(delays={1: 0.1}, close_at=2)

    async def body(link: BrokerLink) -> tuple[list[object], int]:
        waiting = await asyncio.wait_for(
            asyncio.gather(
                *(answered_pid(link, pid, timeout=30) for pid in (1, 2, 3)),
                return_exceptions=True,
            ),
            timeout=5,  # not each request's own 30 s
        )
        return waiting, await answered_pid(link, 4)

    waiting, after = run_with_peer(peer, body)  # type: ignore[misc]
    assert waiting[0] == 1
    assert all(isinstance(outcome, ConnectionError) for outcome in waiting[1:])
    assert after == 4
    assert peer.connections == 2
