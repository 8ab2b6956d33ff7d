"""A real Broker started inside the test's event loop, and a raw Kafka client for it.

For handler behaviour that stock clients do not expose directly: tests build kio
request objects, send them over a real socket, and read kio response objects back.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from kio.index import load_request_schema

from kbroker.admin.client import produce_fields
from kbroker.broker import Broker
from kbroker.config import BrokerConfig, load_broker_config
from kbroker.protocol.batch import encode_batch
from kbroker.protocol.client_frames import decode_response, encode_request
from kbroker.protocol.messages import build
from kbroker.testing.nodes import free_ports as loopback_ports

PRODUCE, CREATE_TOPICS = 0, 19


def free_port() -> int:
    """A loopback port free a moment ago, below the kernel's ephemeral range."""
    return loopback_ports(1)[0]


def controller_only_config(metadata_dir: Path) -> BrokerConfig:
    """A lone controller-only voter on a free loopback port, its metadata in `metadata_dir`."""
    port = free_port()
    return BrokerConfig.from_settings(
        {
            "node.id": "1",
            "process.roles": "controller",
            "listeners": f"CONTROLLER://127.0.0.1:{port}",
            "controller.listener.names": "CONTROLLER",
            "controller.quorum.voters": f"1@127.0.0.1:{port}",
            "cluster.secret": "s3cret",
            "log.dirs": str(metadata_dir),
        }
    )


def run_broker(
    tmp_path: Path,
    check: Callable[[Broker, int], Awaitable[None]],
    overrides: list[str] | None = None,
    *,
    http: bool = False,
    halts: list[int] | None = None,
) -> None:
    """Start a broker on free loopback ports, run `check(broker, port)`, stop it.

    The port is the Kafka listener's, or with `http` the HTTP endpoints' listener's.
    With `halts`, the statuses the broker would halt with (its every log directory
    failed) are appended there instead of ending the test's process.
    """
    port, http_port = free_port(), free_port()
    config = load_broker_config(
        None,
        [
            f"listeners=PLAINTEXT://127.0.0.1:{port}",
            f"log.dirs={tmp_path / 'data'}",
            f"http.listeners=http://127.0.0.1:{http_port}",
            *(overrides or []),
        ],
        {},
    )

    async def main() -> None:
        broker = Broker(config)
        if halts is not None:
            broker.halt = halts.append
        await broker.start()
        try:
            await check(broker, http_port if http else port)
        finally:
            await broker.stop()

    asyncio.run(main())


class RawClient:
    """kbroker.admin.client's framing over asyncio streams, for brokers in the test's loop."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.correlation = 0

    @classmethod
    async def connect(cls, port: int) -> RawClient:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def call(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        request = build(load_request_schema(api_key, version), body)
        self.correlation += 1
        self.writer.write(encode_request(request, self.correlation, "test"))
        size = struct.unpack(">i", await self.reader.readexactly(4))[0]
        data = await self.reader.readexactly(size)
        correlation, response = decode_response(api_key, version, data)
        assert correlation == self.correlation
        return response

    async def pipeline(self, *calls: tuple[int, int, dict[str, Any]]) -> list[Any]:
        """Send every request in one write, before reading any answer (as a client with
        several in flight does), and return the answers in the order they came."""
        first = self.correlation + 1
        frames = []
        for api_key, version, body in calls:
            self.correlation += 1
            request = build(load_request_schema(api_key, version), body)
            frames.append(encode_request(request, self.correlation, "test"))
        self.writer.write(b"".join(frames))
        answers = []
        for offset, (api_key, version, _body) in enumerate(calls):
            size = struct.unpack(">i", await self.reader.readexactly(4))[0]
            correlation, response = decode_response(
                api_key, version, await self.reader.readexactly(size)
            )
            assert correlation == first + offset
            answers.append(response)
        return answers

    async def create_topic(self, name: str, configs: dict[str, str]) -> None:
        """Create a one-partition, one-replica topic with these configs, or fail the test."""
        topic = {
            "name": name,
            "num_partitions": 1,
            "replication_factor": 1,
            "assignments": [],
            "configs": [{"name": key, "value": value} for key, value in configs.items()],
        }
        created = await self.call(
            CREATE_TOPICS, 7, {"topics": [topic], "timeout": 10000, "validate_only": False}
        )
        assert created.topics[0].error_code == 0

    async def produce(self, topic: str, value: bytes, acks: int = 1) -> Any:
        """Produce one record to partition 0 of `topic`; its partition's answer."""
        batch = bytes(encode_batch([value], int(time.time() * 1000)))
        answer = await self.call(PRODUCE, 9, produce_fields(topic, batch, acks=acks))
        return answer.responses[0].partition_responses[0]

    def close(self) -> None:
        self.writer.close()
