"""Another broker on loopback that answers WriteTxnMarkers, for the tests of what sends
them (tests/test_txn_marker_links.py) and of the connection they go over
(tests/test_broker_link.py).

It reads one request at a time and answers it, as a Kafka broker answers a connection:
every marker's partitions with no error, after `delay` seconds (or `delays[producer id]`
for the request whose first marker is that producer's). With `one_answer_per_connection`
it closes each connection after its first answer, as a broker that restarts between two
requests; at the request of producer id `close_at` it closes the connection unanswered.
It counts connections, requests, the markers each request carries and the requests in
flight at once."""

from __future__ import annotations

import asyncio
import struct

from kio.index import load_response_schema

from kbroker.protocol.messages import build, decode_request, encode

WRITE_TXN_MARKERS = 27


class MarkerPeer:
    def __init__(
        self,
        delay: float = 0.0,
        one_answer_per_connection: bool = False,
        delays: dict[int, float] | None = None,
        close_at: int | None = None,
    ) -> None:
        self.delay = delay
        self.delays = delays or {}
        self.one_answer = one_answer_per_connection
        self.close_at = close_at
        self.connections = 0
        self.requests = 0
        self.markers_per_request: list[int] = []
        self.in_flight = 0
        self.most_in_flight = 0
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
                (correlation, client_id_size) = struct.unpack_from(">ih", frame, 4)
                # Request header v2: key, version, correlation id, client id, tagged fields.
                request = decode_request(WRITE_TXN_MARKERS, 1, frame, 10 + client_id_size + 1)
                first = int(request.markers[0].producer_id)
                if first == self.close_at:
                    break
                self.requests += 1
                self.in_flight += 1
                self.most_in_flight = max(self.most_in_flight, self.in_flight)
                self.markers_per_request.append(len(request.markers))
                await asyncio.sleep(self.delays.get(first, self.delay))  # a slow broker
                self.in_flight -= 1
                body = encode(
                    build(
                        load_response_schema(WRITE_TXN_MARKERS, 1),
                        {
                            "markers": [
                                {
                                    "producer_id": m.producer_id,
                                    "topics": [
                                        {
                                            "name": t.name,
                                            "partitions": [
                                                {"partition_index": i, "error_code": 0}
                                                for i in t.partition_indexes
                                            ],
                                        }
                                        for t in m.topics
                                    ],
                                }
                                for m in request.markers
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
