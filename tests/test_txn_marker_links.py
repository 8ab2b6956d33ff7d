"""How the transaction coordinator sends markers to the brokers leading other partitions:
one WriteTxnMarkers at a time per broker, carrying the markers of every transaction that
ended while the previous one was in flight, to every broker at once, and a connection the
broker closed since its last use (it restarted) replaced at once rather than at the next
retry."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from kio.schema.errors import ErrorCode
from marker_peer import MarkerPeer

from compat_tests.waiting import eventually_async
from kbroker.security.inter_broker import PLAINTEXT
from kbroker.txn.markers import LocalMarkerWriter

LEADER = 2


def writer_towards(port: int, **others: int) -> LocalMarkerWriter:
    """A writer on node 1 whose metadata has broker LEADER at `port`, and each topic of
    `others` led by a broker at the port given (topic "t" by LEADER)."""
    ports = {LEADER: port}
    leaders = {"t": LEADER}
    for topic, at in others.items():
        node_id = LEADER + len(ports)
        ports[node_id] = at
        leaders[topic] = node_id

    def node(at: int) -> SimpleNamespace:
        return SimpleNamespace(fenced=False, endpoint=lambda listener: ("127.0.0.1", at))

    state = SimpleNamespace(
        brokers={node_id: node(at) for node_id, at in ports.items()},
        partition=lambda topic, _index: SimpleNamespace(leader=leaders[topic]),
    )
    broker = SimpleNamespace(
        node_id=1, inter_broker=PLAINTEXT, controller=SimpleNamespace(state=state)
    )
    return LocalMarkerWriter(broker)  # type: ignore[arg-type]


async def send(
    writer: LocalMarkerWriter, producer_id: int = 7, partitions: tuple[int, ...] = (0,)
) -> dict[tuple[str, int], ErrorCode]:
    return await writer._send(LEADER, producer_id, 0, 3, True, [("t", p) for p in partitions])


def test_markers_go_to_a_broker_one_request_at_a_time() -> None:
    async def scenario() -> tuple[list[dict[tuple[str, int], ErrorCode]], MarkerPeer]:
        peer = MarkerPeer(delay=0.05)
        writer = writer_towards(await peer.start())
        try:
            # The same producer's markers cannot share a request (answers are keyed by it).
            return await asyncio.gather(*(send(writer) for _ in range(4))), peer
        finally:
            await peer.stop()

    outcomes, peer = asyncio.run(scenario())
    assert outcomes == [{("t", 0): ErrorCode.none}] * 4
    assert peer.requests == 4
    assert peer.most_in_flight == 1


def test_markers_of_transactions_ending_while_a_request_is_in_flight_share_the_next() -> None:
    async def scenario() -> tuple[list[dict[tuple[str, int], ErrorCode]], MarkerPeer]:
        peer = MarkerPeer(delay=0.1)
        writer = writer_towards(await peer.start())
        try:
            first = asyncio.create_task(send(writer, 7, (0,)))
            await eventually_async(lambda: peer.in_flight, timeout=5, what="the first request")
            later = await asyncio.gather(send(writer, 8, (1, 2)), send(writer, 9, (3,)))
            return [await first, *later], peer
        finally:
            await peer.stop()

    outcomes, peer = asyncio.run(scenario())
    assert outcomes == [
        {("t", 0): ErrorCode.none},
        {("t", 1): ErrorCode.none, ("t", 2): ErrorCode.none},
        {("t", 3): ErrorCode.none},
    ]
    assert peer.markers_per_request == [1, 2]
    assert peer.most_in_flight == 1


def test_a_connection_the_broker_closed_since_its_last_use_is_replaced_at_once() -> None:
    async def scenario() -> tuple[list[dict[tuple[str, int], ErrorCode]], int]:
        peer = MarkerPeer(one_answer_per_connection=True)
        writer = writer_towards(await peer.start())
        try:
            first = await send(writer)
            link = writer._links[LEADER]
            await eventually_async(  # the peer's close reaches this side
                lambda: not link.connected,
                timeout=5,
                what="the end of the connection",
            )
            second = await send(writer)
            return [first, second], peer.connections
        finally:
            await peer.stop()

    outcomes, connections = asyncio.run(scenario())
    assert outcomes == [{("t", 0): ErrorCode.none}] * 2
    assert connections == 2


def test_markers_to_a_broker_that_cannot_be_reached_are_left_for_the_retry() -> None:
    async def scenario() -> dict[tuple[str, int], ErrorCode]:
        peer = MarkerPeer()
        port = await peer.start()
        await peer.stop()  # nothing listens there any more
        return await send(writer_towards(port))

    assert asyncio.run(scenario()) == {}


def test_markers_go_to_every_leading_broker_at_once() -> None:
    """A transaction over partitions of two other leaders is complete when the slower
    answers, not when each has answered in turn: its producer's next transaction waits
    (CONCURRENT_TRANSACTIONS) only that long."""

    async def scenario() -> tuple[set[tuple[str, int]], MarkerPeer, MarkerPeer]:
        first, second = MarkerPeer(delay=0.3), MarkerPeer(delay=0.3)
        writer = writer_towards(await first.start(), other=await second.start())
        try:
            writing = asyncio.create_task(writer.write(7, 0, 3, True, [("t", 0), ("other", 0)]))
            await eventually_async(
                lambda: first.in_flight and second.in_flight,
                timeout=5,
                what="both brokers' WriteTxnMarkers in flight together",
            )
            return await writing, first, second
        finally:
            await first.stop()
            await second.stop()

    retry, first, second = asyncio.run(scenario())
    assert retry == set()
    assert (first.requests, second.requests) == (1, 1)
