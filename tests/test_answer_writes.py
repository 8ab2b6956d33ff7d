"""How answers leave the broker's sockets.

An answer that carries records from a segment file goes out as its head, written, then
the file range, by sendfile. With TCP_CORK set around the two, the kernel sends them in
full segments, so the client wakes once for the answer rather than once for the head
and again for the records; the cork is always cleared after, or the next small answer
would wait up to 200 ms in the kernel."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from inprocess import RawClient, run_broker

from kbroker.admin.client import fetch_fields

FETCH = 1


class RecordingSocket:
    """The connection's socket, its TCP_CORK changes noted."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.corks: list[int] = []

    def setsockopt(self, level: int, option: int, value: int) -> None:
        if level == socket.IPPROTO_TCP and option == socket.TCP_CORK:
            self.corks.append(value)
        self.real.setsockopt(level, option, value)


def test_a_fetch_answer_with_records_is_corked_and_the_socket_uncorked_after(
    tmp_path: Path,
) -> None:
    async def check(broker: Any, port: int) -> None:
        await broker.controller.create_topic("corked", 1, 1, {})
        client = await RawClient.connect(port)
        assert (await client.produce("corked", b"x" * 40)).error_code == 0
        (connection,) = broker.connections
        real = connection._sock
        spy = connection._sock = RecordingSocket(real)

        answer = await client.call(FETCH, 12, fetch_fields("corked", max_wait=0, min_bytes=1))
        assert b"x" * 40 in bytes(answer.responses[0].partitions[0].records)
        assert spy.corks == [1, 0]
        assert real.getsockopt(socket.IPPROTO_TCP, socket.TCP_CORK) == 0

        # An answer of no records has no file range: one write, nothing corked.
        spy.corks.clear()
        empty = await client.call(
            FETCH, 12, fetch_fields("corked", max_wait=0, min_bytes=1, offset=1)
        )
        assert not empty.responses[0].partitions[0].records
        assert spy.corks == []
        client.close()

    run_broker(tmp_path, check)
