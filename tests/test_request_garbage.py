"""A request's objects are freed by reference counting alone: none is left in a cycle for
the cyclic garbage collector, which otherwise runs a generation-0 collection every few
hundred requests on the event loop. Nor does a connection closed while its fetch is
parked.

One broker in the test's loop (tests/inprocess.py), a KafkaConnection on a transport
that collects what is written, and request frames handed to its `data_received`; each
kind of request is sent a few hundred times with the collector off, and
`gc.collect()` then finds (almost) nothing. A cycle is two objects at least, so one
left per request would leave more unreachable objects than requests.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import struct
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from inprocess import run_broker
from kio.index import load_request_schema

from kbroker.broker import Broker
from kbroker.protocol.client_frames import decode_response, encode_request
from kbroker.protocol.fetch_request import fetch_partition, sessionless_fetch
from kbroker.protocol.messages import build
from kbroker.protocol.one_shot import produce_fields
from kbroker.server.connection import KafkaConnection
from kbroker.testing.records import Record, encode_batch
from kbroker.testing.transport import CollectingTransport

PRODUCE, FETCH, METADATA, OFFSET_COMMIT, FIND_COORDINATOR = 0, 1, 3, 8, 10
API_VERSIONS, CREATE_TOPICS, CONSUMER_GROUP_HEARTBEAT = 18, 19, 68
TOPIC, FLUSHED = "garbage", "garbage-flushed"  # the second fsyncs every append
REQUESTS = 300
WARM = 30  # first-use imports and caches, before the collector's count starts


class Client:
    """Requests handed to one in-process connection, one at a time."""

    def __init__(self, broker: Broker) -> None:
        self.connection = KafkaConnection(broker)
        self.transport = CollectingTransport(keep=True)
        self.connection.connection_made(self.transport)  # type: ignore[arg-type]
        self.correlation = 0

    def send(self, api_key: int, version: int, fields: dict[str, Any]) -> int:
        """Hand the request to the connection; how many writes there were before it."""
        self.correlation += 1
        request = build(load_request_schema(api_key, version), fields)
        written = len(self.transport.frames)
        self.transport.waiter = asyncio.get_running_loop().create_future()
        self.connection.data_received(encode_request(request, self.correlation, "garbage"))
        return written

    async def answer(self, api_key: int, version: int, written: int) -> Any:
        """The answer to the request sent when there were `written` writes, once there."""
        transport = self.transport
        while len(transport.frames) == written:
            assert transport.waiter is not None
            await asyncio.wait_for(transport.waiter, 10)
            transport.waiter = asyncio.get_running_loop().create_future()
        data = b"".join(transport.frames[written:])
        transport.frames.clear()
        (size,) = struct.unpack_from(">i", data)
        correlation, response = decode_response(api_key, version, data[4 : 4 + size])
        assert correlation == self.correlation
        return response

    async def call(self, api_key: int, version: int, fields: dict[str, Any]) -> Any:
        return await self.answer(api_key, version, self.send(api_key, version, fields))


def left_for_the_collector(garbage: list[Any]) -> str:
    """The commonest types among the objects the collector found, for the failure."""
    kinds = collections.Counter(
        f"{type(o).__qualname__} {getattr(o, '__qualname__', '')}".strip() for o in garbage
    )
    return ", ".join(f"{count} {kind}" for kind, count in kinds.most_common(12))


async def unreachable_after(one: Callable[[], Awaitable[None]]) -> tuple[int, str]:
    """Send REQUESTS requests with the cyclic collector off: what a collection then finds."""
    for _ in range(WARM):
        await one()
    gc.collect()
    for _ in range(REQUESTS):
        await one()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        found = gc.collect()
        described = left_for_the_collector(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    return found, described


async def measure(broker: Broker) -> dict[str, tuple[int, str]]:
    broker.stall_watch.stop()
    await broker.controller.create_topic(TOPIC, 1, 1, {})
    await broker.controller.create_topic(FLUSHED, 1, 1, {"flush.messages": "1"})
    while broker.replicas.get(TOPIC, 0) is None or broker.replicas.get(FLUSHED, 0) is None:
        await asyncio.sleep(0.01)
    client, producer = Client(broker), Client(broker)
    batch = encode_batch([Record(None, b"x" * 100)], int(time.time() * 1000))

    async def produce(acks: int, topic: str = TOPIC) -> None:
        answer = await client.call(PRODUCE, 9, produce_fields(topic, batch, acks=acks))
        assert answer.responses[0].partition_responses[0].error_code == 0

    def fetch_fields(offset: int | None, max_wait: int) -> dict[str, Any]:
        if offset is None:
            offset = broker.replicas.get(TOPIC, 0).log.log_end_offset
        partitions = [fetch_partition(0, offset, 1 << 20)]
        return sessionless_fetch(
            [{"topic": TOPIC, "partitions": partitions}],
            max_wait=max_wait,
            min_bytes=1,
            max_bytes=1 << 20,
        )

    async def fetch(offset: int | None, max_wait: int) -> None:
        answer = await client.call(FETCH, 11, fetch_fields(offset, max_wait))
        assert answer.responses[0].partitions[0].error_code == 0

    async def fetch_woken() -> None:
        written = client.send(FETCH, 11, fetch_fields(None, 60_000))
        assert len(client.transport.frames) == written, "parked, not answered"
        await producer.call(PRODUCE, 9, produce_fields(TOPIC, batch, acks=1))
        answer = await client.answer(FETCH, 11, written)
        assert len(answer.responses[0].partitions[0].records) > 0

    async def closed_while_parked() -> None:
        closing = Client(broker)
        closing.send(FETCH, 11, fetch_fields(None, 60_000))
        assert broker.waiters.parked_requests() == 1
        closing.connection.connection_lost(None)
        assert broker.waiters.parked_requests() == 0

    async def metadata() -> None:
        topics = [{"topic_id": None, "name": TOPIC}]
        fields = {
            "topics": topics,
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        }
        answer = await client.call(METADATA, 12, fields)
        assert answer.topics[0].error_code == 0

    async def api_versions() -> None:
        fields = {"client_software_name": "garbage", "client_software_version": "1"}
        answer = await client.call(API_VERSIONS, 3, fields)
        assert answer.error_code == 0

    for _ in range(100):  # the group coordinator's partition, once created
        found = await client.call(FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["g"]})
        if found.coordinators[0].error_code == 0:
            break
        await asyncio.sleep(0.05)
    joined = await client.call(
        CONSUMER_GROUP_HEARTBEAT,
        0,
        {
            "group_id": "g",
            "member_id": "",
            "member_epoch": 0,
            "rebalance_timeout": 30_000,
            "subscribed_topic_names": [TOPIC],
            "server_assignor": None,
            "topic_partitions": [],
        },
    )
    assert joined.error_code == 0
    member, epoch = joined.member_id, joined.member_epoch

    async def heartbeat() -> None:
        fields = {"group_id": "g", "member_id": member, "member_epoch": epoch}
        answer = await client.call(CONSUMER_GROUP_HEARTBEAT, 0, fields)
        assert answer.error_code == 0

    async def offset_commit() -> None:
        partition = {"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}
        fields = {
            "group_id": "g",
            "generation_id_or_member_epoch": epoch,
            "member_id": member,
            "topics": [{"name": TOPIC, "partitions": [partition]}],
        }
        answer = await client.call(OFFSET_COMMIT, 9, fields)
        assert answer.topics[0].partitions[0].error_code == 0

    names = (f"created-{i}" for i in range(1 << 20))

    async def create_topics() -> None:  # a coroutine handler: a task per request
        topic = {"name": next(names), "num_partitions": 1, "replication_factor": 1}
        fields = {"topics": [topic], "timeout": 10_000, "validate_only": True}
        answer = await client.call(CREATE_TOPICS, 7, fields)
        assert answer.topics[0].error_code == 0

    workloads: dict[str, Callable[[], Awaitable[None]]] = {
        "produce acks=1": lambda: produce(1),
        "produce acks=-1": lambda: produce(-1),
        "produce acks=-1 waiting for its fsync": lambda: produce(-1, FLUSHED),
        "fetch answered at once": lambda: fetch(0, 0),
        "fetch parked until it expires": lambda: fetch(None, 1),
        "fetch parked until a produce wakes it": fetch_woken,
        "connection closed with a fetch parked": closed_while_parked,
        "metadata": metadata,
        "api versions": api_versions,
        "consumer group heartbeat": heartbeat,
        "offset commit": offset_commit,
        "create topics": create_topics,
    }
    enabled = gc.isenabled()
    gc.disable()
    try:
        return {name: await unreachable_after(one) for name, one in workloads.items()}
    finally:
        if enabled:
            gc.enable()


@pytest.fixture(scope="module")
def unreachable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Per kind of request: what the cyclic collector found after REQUESTS of them."""
    found: dict[str, tuple[int, str]] = {}

    async def check(broker: Broker, _port: int) -> None:
        found.update(await measure(broker))

    run_broker(Path(tmp_path_factory.mktemp("garbage")), check)
    yield found


def leaves_nothing(unreachable: dict[str, tuple[int, str]], name: str) -> None:
    found, described = unreachable[name]
    assert found < REQUESTS, f"{name}: {found} unreachable after {REQUESTS}: {described}"


def test_a_parked_fetch_that_expires_leaves_nothing_for_the_cyclic_collector(unreachable):
    leaves_nothing(unreachable, "fetch parked until it expires")


def test_a_parked_fetch_woken_by_a_produce_leaves_nothing_for_the_cyclic_collector(unreachable):
    leaves_nothing(unreachable, "fetch parked until a produce wakes it")


def test_a_fetch_answered_at_once_leaves_nothing_for_the_cyclic_collector(unreachable):
    leaves_nothing(unreachable, "fetch answered at once")


def test_a_connection_closed_with_a_fetch_parked_leaves_nothing_for_the_cyclic_collector(
    unreachable,
):
    leaves_nothing(unreachable, "connection closed with a fetch parked")


@pytest.mark.parametrize(
    "name", ["produce acks=1", "produce acks=-1", "produce acks=-1 waiting for its fsync"]
)
def test_a_produce_leaves_nothing_for_the_cyclic_collector(unreachable, name):
    leaves_nothing(unreachable, name)


@pytest.mark.parametrize("name", ["consumer group heartbeat", "offset commit"])
def test_a_group_request_leaves_nothing_for_the_cyclic_collector(unreachable, name):
    leaves_nothing(unreachable, name)


@pytest.mark.parametrize("name", ["metadata", "api versions"])
def test_a_metadata_request_leaves_nothing_for_the_cyclic_collector(unreachable, name):
    leaves_nothing(unreachable, name)


def test_a_coroutine_handler_leaves_nothing_for_the_cyclic_collector(unreachable):
    leaves_nothing(unreachable, "create topics")
