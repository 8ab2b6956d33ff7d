"""One connection from this broker to another, shared by the requests of a service
(implicit AddPartitionsToTxn, the share-group persister and dead letters, schema reads):
requests that overlap each get their own answer, a caller that gives up does not hand
its answer to the next one, and a connection that ends fails every waiting request at
once. The other broker here is a loopback peer that answers WriteTxnMarkers in order,
one request at a time, as a Kafka broker answers a connection."""

from __future__ import annotations

import asyncio
import struct

import pytest
from kio.index import load_request_schema, load_response_schema

from kbroker.protocol.messages import build, decode_request, encode
from kbroker.replica.broker_link import BrokerLink
from kbroker.security.inter_broker import PLAINTEXT

WRITE_TXN_MARKERS = 27


class EchoPeer:
    """Answers each WriteTxnMarkers with its producer ids, after `delays[producer id]`
    seconds; closes the connection, unanswered, at the request of producer id `close_at`."""

    def __init__(self, delays: dict[int, float] | None = None, close_at: int | None = None):
        self.delays = delays or {}
        self.close_at = close_at
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                correlation, client_id_size = struct.unpack_from(">ih", frame, 4)
                request = decode_request(WRITE_TXN_MARKERS, 1, frame, 10 + client_id_size + 1)
                pid = int(request.markers[0].producer_id)
                if pid == self.close_at:
                    break
                await asyncio.sleep(self.delays.get(pid, 0.0))
                body = encode(
                    build(
                        load_response_schema(WRITE_TXN_MARKERS, 1),
                        {"markers": [{"producer_id": pid, "topics": []}]},
                    )
                )
                writer.write(struct.pack(">ii", len(body) + 5, correlation) + b"\x00" + body)
                await writer.drain()
        except asyncio.IncompleteReadError:
            pass
        finally:
            writer.close()


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


def run_with_peer(peer: EchoPeer, body) -> object:  # type: ignore[no-untyped-def]
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
    peer = EchoPeer(delays={1: 0.05, 4: 0.02})

    async def body(link: BrokerLink) -> list[int]:
        return await asyncio.gather(*(answered_pid(link, pid) for pid in range(1, 21)))

    assert run_with_peer(peer, body) == list(range(1, 21))
    assert peer.connections == 1


def test_a_caller_that_gave_up_leaves_its_late_answer_unread_by_the_next() -> None:
    peer = EchoPeer(delays={1: 0.3})

    async def body(link: BrokerLink) -> tuple[int, bool]:
        with pytest.raises(TimeoutError):
            await answered_pid(link, 1, timeout=0.05)
        # The answer to 1 arrives while 2 waits: 2 gets its own.
        return await answered_pid(link, 2), link.connected

    assert run_with_peer(peer, body) == (2, True)
    assert peer.connections == 1


def test_a_connection_that_ends_fails_every_waiting_request_and_the_next_call_reconnects() -> None:
    peer = EchoPeer(delays={1: 0.1}, close_at=2)

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
