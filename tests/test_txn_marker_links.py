"""How the transaction coordinator sends markers to the brokers leading other partitions:
one WriteTxnMarkers at a time per broker, and a connection the broker closed since its
last use (it restarted) replaced at once rather than at the next retry."""

from __future__ import annotations

import asyncio
import struct
from types import SimpleNamespace

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode

from kbroker.protocol.messages import build, encode
from kbroker.security.inter_broker import PLAINTEXT
from kbroker.txn.markers import LocalMarkerWriter

LEADER = 2


class PeerBroker:
    """A broker's WriteTxnMarkers on loopback: answers every partition with no error,
    after `delay` seconds; with `one_answer_per_connection` it closes each connection
    after its first answer, as a broker that restarts between two requests."""

    def __init__(self, delay: float = 0.0, one_answer_per_connection: bool = False) -> None:
        self.delay = delay
        self.one_answer = one_answer_per_connection
        self.connections = 0
        self.requests = 0
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
                self.requests += 1
                (correlation,) = struct.unpack_from(">i", frame, 4)
                await asyncio.sleep(self.delay)
                body = encode(
                    build(
                        load_response_schema(27, 1),
                        {
                            "markers": [
                                {
                                    "producer_id": 7,
                                    "topics": [
                                        {
                                            "name": "t",
                                            "partitions": [{"partition_index": 0, "error_code": 0}],
                                        }
                                    ],
                                }
                            ]
                        },
                    )
                )
                # Response header v1 (flexible): correlation id, no tagged fields.
                writer.write(struct.pack(">ii", len(body) + 5, correlation) + b"\x00" + body)
                await writer.drain()
                if self.one_answer:
                    break
        except asyncio.IncompleteReadError:
            pass
        finally:
            writer.close()


def writer_towards(port: int) -> LocalMarkerWriter:
    node = SimpleNamespace(fenced=False, endpoint=lambda listener: ("127.0.0.1", port))
    broker = SimpleNamespace(
        node_id=1,
        inter_broker=PLAINTEXT,
        controller=SimpleNamespace(state=SimpleNamespace(brokers={LEADER: node})),
    )
    return LocalMarkerWriter(broker)  # type: ignore[arg-type]


async def send(writer: LocalMarkerWriter) -> dict[tuple[str, int], ErrorCode]:
    return await writer._send(LEADER, 7, 0, 3, True, [("t", 0)])


def test_markers_of_transactions_ending_together_go_to_a_broker_one_request_at_a_time() -> None:
    async def scenario() -> list[dict[tuple[str, int], ErrorCode]]:
        peer = PeerBroker(delay=0.05)
        writer = writer_towards(await peer.start())
        try:
            return await asyncio.gather(*(send(writer) for _ in range(4)))
        finally:
            await peer.stop()

    outcomes = asyncio.run(scenario())
    assert outcomes == [{("t", 0): ErrorCode.none}] * 4


def test_a_connection_the_broker_closed_since_its_last_use_is_replaced_at_once() -> None:
    async def scenario() -> tuple[list[dict[tuple[str, int], ErrorCode]], int]:
        peer = PeerBroker(one_answer_per_connection=True)
        writer = writer_towards(await peer.start())
        try:
            first = await send(writer)
            await asyncio.sleep(0.05)  # the peer's close reaches this side
            second = await send(writer)
            return [first, second], peer.connections
        finally:
            await peer.stop()

    outcomes, connections = asyncio.run(scenario())
    assert outcomes == [{("t", 0): ErrorCode.none}] * 2
    assert connections == 2


def test_markers_to_a_broker_that_cannot_be_reached_are_left_for_the_retry() -> None:
    async def scenario() -> dict[tuple[str, int], ErrorCode]:
        peer = PeerBroker()
        port = await peer.start()
        await peer.stop()  # nothing listens there any more
        return await send(writer_towards(port))

    assert asyncio.run(scenario()) == {}
