"""A request's Python alone: a real Broker in this process, its connection fed frames.

    PYTHONPATH=$PWD .venv/bin/python -m bench.inprocess_cost
    PYTHONPATH=$PWD .venv/bin/python -m bench.inprocess_cost --requests 20000 --parked 3000

bench.request_cost measures a broker process from outside, the kernel's socket work and
wake-ups included. This measures what is left once those are gone: one kbroker Broker
started in this process's event loop (tests/inprocess.py's way, on a loopback port, with
`socket.busy.poll.us=0`), a KafkaConnection on a transport that only collects what is
written, and request frames handed to its `data_received`:

- produce, hot: Produce v9 of one 100 B record, acks=-1, back to back;
- fetch, hot: Fetch v11 at the log end with max wait 0, answered at once, back to back;
- fetch, parked: the same Fetch with max wait 1 ms, each answered by its timer before the
  next is sent, so each runs after the loop slept, as a parked fetch does; the time
  inside its phases (the dispatch, the decode, the handler, the expiry with its second
  read, its encode and the answer's completion) is timed by wrapping those functions;
- answers written from descriptions (protocol.response_writer): ApiVersions v3, which
  every client connection sends first, and Metadata v12 for a topic of 50 partitions,
  back to back.

Per request: wall time and this process's user and system CPU (`os.times`, every thread:
the raft thread and the workers are idle here). The stall watch is stopped, since a loop
held for seconds on purpose would have it sample the loop's thread all along.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kio.index import load_request_schema

from kbroker.broker import Broker
from kbroker.config import load_broker_config
from kbroker.protocol.client_frames import encode_request
from kbroker.protocol.fetch_request import fetch_partition, sessionless_fetch
from kbroker.protocol.messages import build
from kbroker.protocol.one_shot import produce_fields
from kbroker.server.connection import KafkaConnection
from kbroker.testing.nodes import free_ports
from kbroker.testing.records import Record, encode_batch
from kbroker.testing.transport import CollectingTransport

PRODUCE, FETCH, METADATA, API_VERSIONS = 0, 1, 3, 18
TOPIC = "inprocess"
WIDE_TOPIC, WIDE_PARTITIONS = "inprocess-wide", 50


def frames(api_key: int, version: int, fields: dict[str, Any], count: int) -> list[bytes]:
    request = build(load_request_schema(api_key, version), fields)
    return [encode_request(request, i, "inprocess") for i in range(count)]


def report(name: str, count: int, wall: float, before: Any, after: Any) -> None:
    print(
        f"{name:16} {1e6 * wall / count:7.1f} µs wall, user {1e6 * (after.user - before.user) / count:6.1f},"
        f" system {1e6 * (after.system - before.system) / count:5.1f} per request ({count})"
    )


def timed(owner: Any, name: str, totals: dict[str, float]) -> Callable[[], None]:
    """Wrap owner.name so that the time inside it adds up in totals[name]; the undo."""
    original = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            totals[name] = totals.get(name, 0.0) + time.perf_counter() - started

    setattr(owner, name, wrapper)
    return lambda: setattr(owner, name, original)


async def measure(broker: Broker, args: argparse.Namespace) -> None:
    broker.stall_watch.stop()
    await broker.controller.create_topic(TOPIC, 1, 1, {})
    while broker.replicas.get(TOPIC, 0) is None:
        await asyncio.sleep(0.01)
    connection = KafkaConnection(broker)
    transport = CollectingTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]

    batch = encode_batch([Record(None, b"x" * 100)], int(time.time() * 1000))
    produce = frames(PRODUCE, 9, produce_fields(TOPIC, batch, acks=-1), args.requests)
    for frame in produce[:500]:  # warm: first-use imports and caches
        connection.data_received(frame)
    before, started = os.times(), time.perf_counter()
    for frame in produce[500:]:
        connection.data_received(frame)
    report("produce, hot", len(produce) - 500, time.perf_counter() - started, before, os.times())

    end = broker.replicas.get(TOPIC, 0).log.log_end_offset
    topics = [{"topic": TOPIC, "partitions": [fetch_partition(0, end, 1 << 20)]}]
    for wait, count, name in ((0, args.requests, "fetch, hot"), (1, args.parked, "fetch, parked")):
        fields = sessionless_fetch(topics, max_wait=wait, min_bytes=1, max_bytes=50 << 20)
        fetches = frames(FETCH, 11, fields, count + 300)
        totals: dict[str, float] = {}
        undo: list[Callable[[], None]] = []
        loop = asyncio.get_running_loop()
        for i, frame in enumerate(fetches):
            if i == 300:
                before, started = os.times(), time.perf_counter()
                if wait:
                    undo = _time_phases(totals)
            written = transport.written
            transport.waiter = loop.create_future()
            connection.data_received(frame)
            if transport.written == written:
                await transport.waiter
        report(name, count, time.perf_counter() - started, before, os.times())
        for restore in undo:
            restore()
        for phase, seconds in totals.items():
            print(f"    inside {phase:18} {1e6 * seconds / count:7.1f} µs per request")
    await _answers(broker, connection, args.answers)


async def _answers(broker: Broker, connection: KafkaConnection, count: int) -> None:
    """Answers of the APIs a client asks first, written from the handlers' descriptions."""
    await broker.controller.create_topic(WIDE_TOPIC, WIDE_PARTITIONS, 1, {})
    while broker.replicas.get(WIDE_TOPIC, WIDE_PARTITIONS - 1) is None:
        await asyncio.sleep(0.01)
    software = {"client_software_name": "inprocess", "client_software_version": "1"}
    metadata = {
        "topics": [{"name": WIDE_TOPIC, "topic_id": None}],
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False,
    }
    for name, api_key, version, fields in (
        ("apiversions v3", API_VERSIONS, 3, software),
        (f"metadata {WIDE_PARTITIONS} p.", METADATA, 12, metadata),
    ):
        requests = frames(api_key, version, fields, count + 100)
        for frame in requests[:100]:
            connection.data_received(frame)
        before, started = os.times(), time.perf_counter()
        for frame in requests[100:]:
            connection.data_received(frame)
        report(name, count, time.perf_counter() - started, before, os.times())


def _time_phases(totals: dict[str, float]) -> list[Callable[[], None]]:
    from kbroker.handlers import fetch as fetch_handler
    from kbroker.handlers.registry import APIS
    from kbroker.protocol import messages

    undo = [
        timed(KafkaConnection, "_dispatch", totals),
        timed(messages, "decode_request", totals),
        timed(fetch_handler, "_read_all", totals),
        timed(fetch_handler, "_encode", totals),
        timed(fetch_handler._ParkedFetch, "_expired", totals),
        timed(KafkaConnection, "_complete", totals),
    ]
    api = APIS[FETCH]
    handler = api.handler

    def timed_handler(ctx: Any, body: Any) -> Any:
        started = time.perf_counter()
        try:
            return handler(ctx, body)
        finally:
            totals["handler"] = totals.get("handler", 0.0) + time.perf_counter() - started

    object.__setattr__(api, "handler", timed_handler)
    undo.append(lambda: object.__setattr__(api, "handler", handler))
    return undo


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=20000, help="hot produces and fetches")
    parser.add_argument("--parked", type=int, default=3000, help="parked fetches")
    parser.add_argument("--answers", type=int, default=2000, help="ApiVersions and Metadata")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kbroker-inprocess-") as tmp:
        port, http_port = free_ports(2)
        config = load_broker_config(
            None,
            [
                f"listeners=PLAINTEXT://127.0.0.1:{port}",
                f"http.listeners=http://127.0.0.1:{http_port}",
                f"log.dirs={Path(tmp) / 'data'}",
                "socket.busy.poll.us=0",
            ],
            {},
        )

        async def run() -> None:
            broker = Broker(config)
            await broker.start()
            try:
                await measure(broker, args)
            finally:
                await broker.stop()

        asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
