"""Node capacity: many connections, each sending one small request at a time.

    PYTHONPATH=$PWD .venv/bin/python -m bench.node_capacity
    PYTHONPATH=$PWD .venv/bin/python -m bench.node_capacity --peers kbroker,kbroker-2,mock,kafka \\
        --connections 10,100,1000 --workloads produce,fetch --seconds 10

Each connection of one client process sends a request, waits for its answer and sends
the next; the client's own CPU per request is printed. The client is bench/load_client.c
(`--client c`, the default: one epoll loop, 23-41 us a request here, most of it the
kernel's loopback send; built with `make -C bench`) or Python's asyncio (`--client
python`, an asyncio Protocol per connection, 32-60 us a request). On a machine whose
cores the brokers share with the client, a client that takes less leaves more to the
brokers, which is what a two-nodes-against-one comparison needs. Connections open one
(C) or a few (asyncio) at a time and measuring starts once every one has had an answer:

- produce: Produce, acks=1, one batch of one 100 B record, to partition i mod P;
- fetch: Fetch at the log end with max_wait_ms 5 and min_bytes 1: every request waits
  out its 5 ms and answers empty, the parked-fetch path of an idle consumer.

Peers: `kbroker` (one node), `kbroker-2` (two nodes of one cluster, one partition
leader each: the "a host with N cores runs N nodes" layout) and `mock` (librdkafka's
in-memory mock cluster, C, one broker; bench/build/mock_cluster) and `kafka` (Apache Kafka
4.3, one KRaft node, bench.peers.KafkaPeer: its JVM's every thread counts). The topic has two
partitions, one replica each, on every peer. For each peer, connection count and
workload: requests per second, the broker processes' CPU per request and requests per
broker-CPU-second (utime + stime from /proc), client-side latency p50/p99/p999, and the
brokers' resident memory per connection (RSS with the connections open, less RSS
before they opened, over the connection count), and the client process's own CPU per
request. The load average is printed with each row: on a shared machine the per-CPU
figures hold where the rates do not. `--override NAME=VALUE` sets a broker property of
the kbroker peers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import resource
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kio.index import load_request_schema

from bench import kafka_load
from bench.peers import KafkaPeer, MockPeer, PeerUnavailable, add_settings_option
from bench.request_cost import cpu_seconds, load
from kbroker.admin.client import cluster
from kbroker.protocol.client_frames import encode_request
from kbroker.protocol.messages import build
from kbroker.protocol.one_shot import fetch_fields, produce_fields
from kbroker.testing import kafka_broker, kafka_cluster
from kbroker.testing.records import Record, encode_batch

PRODUCE, FETCH, METADATA = 0, 1, 3
PARTITIONS = 2
TOPIC = "capacity"
BENCH_DIR = Path(__file__).resolve().parent
LOAD_CLIENT = BENCH_DIR / "build" / "load_client"


@dataclass
class Run:
    """One measured part: answers, its wall and broker CPU seconds, client latency
    percentiles (seconds), the brokers' RSS growth and the client's own CPU seconds."""

    answers: int
    wall: float
    cpu: float
    p50: float
    p99: float
    p999: float
    rss: int
    client_cpu: float


@dataclass
class Target:
    """A running peer: its broker pids and, per partition, the leader's address."""

    name: str
    pids: list[int]
    leaders: dict[int, tuple[str, int]]
    versions: dict[int, int]

    def rss_bytes(self) -> int:
        total = 0
        for pid in self.pids:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        return total

    def cpu_seconds(self) -> float:
        return sum(cpu_seconds(pid) for pid in self.pids)


def _discover(name: str, bootstrap: str, pids: list[int]) -> Target:
    """Leaders of the topic's partitions and the Produce/Fetch versions both sides speak."""
    with cluster(bootstrap) as c:
        conn = c.any().negotiate()
        versions = {
            PRODUCE: conn.version_for(PRODUCE, (3, 9)),
            FETCH: conn.version_for(FETCH, (4, 11)),
        }
        deadline = time.monotonic() + 30
        while True:
            answer = conn.call(METADATA, {"topics": [{"name": TOPIC}]}, versions=(1, 9))
            brokers = {int(b.node_id): (b.host, int(b.port)) for b in answer.brokers}
            (topic,) = answer.topics
            leaders = {int(p.partition_index): int(p.leader_id) for p in topic.partitions}
            if len(leaders) == PARTITIONS and all(n in brokers for n in leaders.values()):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name}: {TOPIC} has no leader for every partition")
            time.sleep(0.1)
    return Target(name, pids, {p: brokers[n] for p, n in leaders.items()}, versions)


@contextlib.contextmanager
def peer(name: str, workdir: Path, overrides: dict[str, str] | None = None) -> Iterator[Target]:
    if name == "mock":
        mock = MockPeer("mock", workdir, topics=[f"{TOPIC}:{PARTITIONS}"])
        mock.start()
        try:
            yield _discover(name, mock.bootstrap, [mock.pid])
        finally:
            mock.stop()
        return
    if name == "kafka":
        kafka = KafkaPeer("kafka", workdir)
        kafka.start()
        try:
            kafka_load.create_topics(kafka.bootstrap, {TOPIC: PARTITIONS})
            yield _discover(name, kafka.bootstrap, [kafka.pid])
        finally:
            kafka.stop()
        return
    nodes = 2 if name == "kbroker-2" else 1
    settings = {"log.flush.interval.messages": str(2**63 - 1), **(overrides or {})}
    running = (
        kafka_cluster(nodes, workdir / name, settings=settings)
        if nodes > 1
        else kafka_broker(workdir / name, settings=settings)
    )
    with running as server:
        server.create_topic(TOPIC, PARTITIONS, replication_factor=1)
        pids = [n.proc.pid for n in server.nodes if n.proc is not None]
        yield _discover(name, server.bootstrap, pids)


def request_bytes(target: Target, workload: str, partition: int, fetch_offset: int) -> bytes:
    if workload == "produce":
        batch = encode_batch([Record(None, b"x" * 100)], int(time.time() * 1000))
        fields = produce_fields(TOPIC, batch, partition=partition, acks=1, timeout_ms=30_000)
        key = PRODUCE
    else:
        fields = fetch_fields(
            TOPIC, max_wait=5, min_bytes=1, partition=partition, offset=fetch_offset
        )
        key = FETCH
    version = target.versions[key]
    return encode_request(build(load_request_schema(key, version), fields), 1, "capacity")


class _Client(asyncio.Protocol):
    """One connection sending `request`, waiting for its answer and sending it again
    until `until`: an asyncio Protocol (no streams, no per-request task or future), so
    the client's own CPU per request stays small beside the broker's."""

    def __init__(self, request: bytes, latencies: list[float]) -> None:
        self.request = request
        self.latencies = latencies
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.sent_at = 0.0
        self.start = float("inf")  # answers before it are not counted
        self.until = float("inf")
        self.answered = self.loop.create_future()  # the first answer: the broker accepted us
        self.done = self.loop.create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self._send()

    def _send(self) -> None:
        assert self.transport is not None
        self.sent_at = self.loop.time()
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        while len(buffer) >= 4:
            (size,) = struct.unpack_from(">i", buffer)
            if len(buffer) < 4 + size:
                return
            del buffer[: 4 + size]
            now = self.loop.time()
            if not self.answered.done():
                self.answered.set_result(None)
            elif self.sent_at >= self.start:
                self.latencies.append(now - self.sent_at)
            if now >= self.until:
                if not self.done.done():
                    self.done.set_result(None)
                return
            self._send()

    def connection_lost(self, exc: Exception | None) -> None:
        for future in (self.answered, self.done):
            if not future.done():
                future.set_exception(exc or ConnectionError("closed by the broker"))


OPENING = 4  # connections opened at once: under the mock's listen backlog of 5


def ensure_load_client() -> Path:
    """bench/build/load_client, built with make if it is missing or older than its source."""
    source = BENCH_DIR / "load_client.c"
    if LOAD_CLIENT.exists() and LOAD_CLIENT.stat().st_mtime >= source.stat().st_mtime:
        return LOAD_CLIENT
    if shutil.which("make") is None or shutil.which("cc") is None:
        raise SystemExit("cannot build bench/build/load_client: make/cc missing (--client python)")
    done = subprocess.run(
        ["make", "-C", str(BENCH_DIR), "build/load_client"], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit("building bench/build/load_client failed:\n" + done.stderr)
    return LOAD_CLIENT


def _run_c(
    target: Target, workload: str, connections: int, seconds: float, warm: float, workdir: Path
) -> Run:
    """The same workload driven by bench/load_client.c; the brokers' CPU and RSS are
    sampled when it says its measured part starts and stops."""
    rss_before = target.rss_bytes()
    arguments = [str(ensure_load_client()), str(seconds), str(warm), str(connections)]
    for partition, (host, port) in sorted(target.leaders.items()):
        offset = _log_end(target, partition) if workload == "fetch" else 10**12
        request = workdir / f"request-{workload}-{partition}"
        request.write_bytes(request_bytes(target, workload, partition, offset))
        arguments += [socket.gethostbyname(host), str(port), str(request)]
    client = subprocess.Popen(
        arguments, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1
    )
    assert client.stdout is not None and client.stderr is not None
    figures: dict[str, float] = {}
    try:
        line = client.stdout.readline()
        if line != "start\n":
            raise RuntimeError(f"load_client: {client.stderr.read().strip() or line!r}")
        cpu, rss = target.cpu_seconds(), target.rss_bytes()
        line = client.stdout.readline()
        cpu = target.cpu_seconds() - cpu
        if line != "stop\n":
            raise RuntimeError(f"load_client: {client.stderr.read().strip() or line!r}")
        for line in client.stdout:
            name, value = line.split()
            figures[name] = float(value)
    finally:
        if client.wait(timeout=60) != 0:
            raise RuntimeError(f"load_client failed: {client.stderr.read().strip()}")
    return Run(
        int(figures["answers"]),
        figures["wall_s"],
        cpu,
        figures["p50_ms"] / 1e3,
        figures["p99_ms"] / 1e3,
        figures["p999_ms"] / 1e3,
        rss - rss_before,
        figures["cpu_s"],
    )


async def _open_and_run(
    target: Target, workload: str, connections: int, seconds: float, warm: float
) -> Run:
    """The workload driven by this process's asyncio loop.

    Connections open a few at a time, each counted open once its first request is
    answered: a burst of 1,000 connects overflows a small listen backlog (the mock's is
    5), and the connects the kernel drops are retried after 1, 3, 7... s, which left
    whole runs waiting. Measuring starts `warm` seconds after the last one is open."""
    rss_before = target.rss_bytes()
    latencies: list[float] = []
    loop = asyncio.get_running_loop()
    requests = {p: request_bytes(target, workload, p, 10**12) for p in target.leaders}
    if workload == "fetch":
        requests = {p: request_bytes(target, workload, p, _log_end(target, p)) for p in requests}
    clients: list[_Client] = []
    transports: list[asyncio.BaseTransport] = []
    gate = asyncio.Semaphore(OPENING)

    async def open_one(i: int) -> None:
        partition = i % PARTITIONS
        async with gate:
            transport, client = await loop.create_connection(
                lambda: _Client(requests[partition], latencies), *target.leaders[partition]
            )
            transports.append(transport)
            clients.append(client)
            await client.answered

    try:
        await asyncio.gather(*(open_one(i) for i in range(connections)))
        start = loop.time() + warm
        for client in clients:
            client.start, client.until = start, start + seconds
        await asyncio.sleep(max(0.0, start - loop.time()))
        cpu, wall, rss = target.cpu_seconds(), time.perf_counter(), target.rss_bytes()
        mine = _own_cpu()
        await asyncio.gather(*(c.done for c in clients))
        cpu, wall = target.cpu_seconds() - cpu, time.perf_counter() - wall
        mine = _own_cpu() - mine
        return Run(
            len(latencies),
            wall,
            cpu,
            statistics.median(latencies),
            percentile(latencies, 0.99),
            percentile(latencies, 0.999),
            rss - rss_before,
            mine,
        )
    finally:
        for transport in transports:
            transport.close()


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _log_end(target: Target, partition: int) -> int:
    """The offset a fetch at the log end asks for: one record is produced first, so the
    answer of a fetch past it waits (an empty partition would answer at once on some peers)."""
    host, port = target.leaders[partition]
    with cluster(f"{host}:{port}") as c:
        conn = c.any().negotiate()
        batch = encode_batch([Record(None, b"y")], int(time.time() * 1000))
        fields = produce_fields(TOPIC, batch, partition=partition, acks=1)
        answer = conn.call(PRODUCE, fields, versions=(3, target.versions[PRODUCE]))
        return int(answer.responses[0].partition_responses[0].base_offset) + 1


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--peers", default="kbroker,kbroker-2,mock,kafka")
    parser.add_argument("--connections", default="10,100,1000")
    parser.add_argument("--workloads", default="produce,fetch")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warm", type=float, default=2.0)
    parser.add_argument(
        "--client",
        choices=("c", "python"),
        default="c",
        help="bench/load_client.c (default) or this process's asyncio loop",
    )
    add_settings_option(parser, "--override")
    args = parser.parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # brokers inherit it
    counts = [int(c) for c in args.connections.split(",")]
    overrides = dict(args.override)
    print(
        "peer       workload conns     req/s   µs CPU/req  req/CPU-s   p50 ms   p99 ms  p999 ms"
        "  KiB RSS/conn  client µs/req  load"
    )
    with tempfile.TemporaryDirectory(prefix="kbroker-capacity-") as tmp:
        for name in args.peers.split(","):
            try:
                context = peer(name, Path(tmp), overrides)
                target = context.__enter__()
            except PeerUnavailable as exc:
                print(f"{name:10} unavailable: {exc}")
                continue
            try:
                for workload in args.workloads.split(","):
                    for connections in counts:
                        if args.client == "c":
                            run = _run_c(
                                target, workload, connections, args.seconds, args.warm, Path(tmp)
                            )
                        else:
                            run = asyncio.run(
                                _open_and_run(
                                    target, workload, connections, args.seconds, args.warm
                                )
                            )
                        n = run.answers
                        print(
                            f"{name:10} {workload:8} {connections:5} {n / run.wall:9.0f} "
                            f"{1e6 * run.cpu / max(n, 1):11.1f} {n / max(run.cpu, 1e-9):10.0f} "
                            f"{1e3 * run.p50:8.2f} {1e3 * run.p99:8.2f} {1e3 * run.p999:8.2f} "
                            f"{run.rss / 1024 / connections:12.1f}"
                            f" {1e6 * run.client_cpu / max(n, 1):11.1f}  {load()}",
                            flush=True,
                        )
            finally:
                context.__exit__(None, None, None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
