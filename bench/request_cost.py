"""Broker CPU per request, one request at a time, by API; optionally a py-spy profile.

    PYTHONPATH=$PWD .venv/bin/python -m bench.request_cost                  # CPU µs per request
    PYTHONPATH=$PWD .venv/bin/python -m bench.request_cost --profile DIR    # + py-spy per API
    PYTHONPATH=$PWD .venv/bin/python -m bench.request_cost --workloads produce -n 20000

One kbroker node (kbroker.testing.kafka_broker), one topic of one partition, one client
connection sending one request and waiting for its answer before the next:

- produce: Produce v9, acks=-1, one batch of one 100 B record (not idempotent);
- fetch: Fetch v11 at the log end, max_wait_ms 1, min_bytes 1: every request waits
  out its 1 ms and answers empty (the parked-fetch path);
- heartbeat: ConsumerGroupHeartbeat v1 of a member that already has its assignment;
- commit: OffsetCommit v9 of one offset by that member.

kbroker's busy polling (socket.busy.poll.us, on by default) spins its loop through the
client's turnaround after each answer, so with it the CPU per request equals the wall
time per request; `--set socket.busy.poll.us=0` measures the request's own work. `--cpus
CLIENT,BROKER` binds this client and every thread of the broker to CPUs of their own.

The figure is the broker process's own CPU time (utime + stime from /proc/<pid>/stat)
over the N requests divided by N (and that less what the idle broker spends in the same
wall time, its background loops, measured first), so it holds on a loaded machine where throughput does
not; the load average is printed with it. `--peer mock` (or `--peer kbroker,mock`, one run)
measures librdkafka's mock cluster (bench.peers.MockPeer) the same way for produce and
fetch, each at the newest version both the mock and the workload speak (printed: the
mock serves Produce only up to v7 or so). `--pipeline K` sends K produce requests in one
write and then reads their K answers (librdkafka keeps up to 5 in flight). With --profile, py-spy samples the broker
(`py-spy record --native --format raw`) during a second pass of each workload and the
collapsed stacks are reduced to the frames with the largest inclusive and self share.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

from kio.index import load_request_schema

from bench.machine import interpreter_build
from bench.peers import MockPeer, PeerUnavailable, add_settings_option
from bench.procs import pin
from kbroker.admin.client import BrokerConnection, cluster
from kbroker.admin.group_consumer import GroupMember
from kbroker.protocol.client_frames import decode_response, encode_request
from kbroker.protocol.messages import build
from kbroker.protocol.one_shot import fetch_fields, produce_fields
from kbroker.testing import kafka_broker
from kbroker.testing.nodes import Node
from kbroker.testing.records import Record, encode_batch

PRODUCE, FETCH = 0, 1
CLK_TCK = os.sysconf("SC_CLK_TCK")
WORKLOADS = ("produce", "fetch", "heartbeat", "commit")
PEERS = ("kbroker", "mock")
MOCK_WORKLOADS = ("produce", "fetch")  # the mock has no consumer-group protocol to ask
PRODUCE_VERSIONS, FETCH_VERSIONS = (3, 9), (4, 11)  # the workloads' own versions: 9 and 11


def cpu_seconds(pid: int) -> float:
    """utime + stime of the process (its threads included), in seconds."""
    user, system = cpu_split(pid)
    return user + system


def cpu_split(pid: int) -> tuple[float, float]:
    """(utime, stime) of the process in seconds: in its own code, in the kernel for it."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def pipelined(
    conn: BrokerConnection, api_key: int, version: int, body: dict, depth: int
) -> Callable[[], None]:
    """`depth` requests sent in one write (librdkafka keeps up to 5 in flight and writes
    what is queued together), then their answers read, checked in order."""
    entity = build(load_request_schema(api_key, version), body)

    def some() -> None:
        first = conn.next_correlation
        conn.next_correlation += depth
        conn.send(b"".join(encode_request(entity, first + i, conn.client_id) for i in range(depth)))
        for i in range(depth):
            got, _ = decode_response(api_key, version, conn.read_frame())
            if got != first + i:
                raise RuntimeError(f"answer {got} where {first + i} was due")

    return some


def workload(
    name: str, bootstrap: str, topic: str, any_version: bool = False, depth: int = 1
) -> tuple[Callable[[], None], Callable[[], None], str]:
    """(one call, close, the version asked) for the named workload, set up and warmed:
    one request, or for produce with `depth` > 1 that many pipelined. With
    `any_version` (a peer that may not speak Produce v9 / Fetch v11), the newest
    version both sides speak from the workload's range down."""
    c = cluster(bootstrap).__enter__()
    conn = c.any()
    conn.negotiate()
    produce_versions = PRODUCE_VERSIONS if any_version else (9, 9)
    fetch_versions = FETCH_VERSIONS if any_version else (11, 11)
    asked = ""
    if name == "produce":
        batch = encode_batch([Record(None, b"x" * 100)], int(time.time() * 1000))
        body = produce_fields(topic, batch, acks=-1, timeout_ms=30_000)
        version = conn.version_for(PRODUCE, produce_versions)
        asked = f"Produce v{version}"

        def one() -> None:
            conn.call(PRODUCE, body, versions=(version, version))

        if depth > 1:
            one = pipelined(conn, PRODUCE, version, body, depth)

    elif name == "fetch":
        produce = produce_fields(topic, encode_batch([Record(None, b"y")], 0), acks=-1)
        answer = conn.call(PRODUCE, produce, versions=produce_versions)
        end = int(answer.responses[0].partition_responses[0].base_offset) + 1
        body = fetch_fields(topic, max_wait=1, min_bytes=1, offset=end)
        version = conn.version_for(FETCH, fetch_versions)
        asked = f"Fetch v{version}"

        def one() -> None:
            conn.call(FETCH, body, versions=(version, version))

    else:
        member = GroupMember(c, f"cost-{os.getpid()}-{name}", topic)
        member.join()

        def one() -> None:
            if name == "heartbeat":
                member.heartbeat()
            else:
                member.commit({0: 1})

    for _ in range(200):  # warm: first-use imports, caches, fetch sessions
        one()
    return one, c.close, asked


def profile(pid: int, out: Path, seconds: float, one: Callable[[], None]) -> Path:
    """Sample the broker with py-spy while `one` runs for `seconds`; collapsed stacks."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    raw = out.with_suffix(".txt")
    proc = subprocess.Popen(
        [spy, "record", "--pid", str(pid), "--native", "--rate", "1000", "--format", "raw",
         "--output", str(raw), "--duration", str(int(seconds) + 1)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    time.sleep(0.5)  # py-spy attaching: its first samples must see the workload
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        one()
    proc.wait(timeout=60)
    return raw


IDLE_LEAVES = {"poll", "epoll_pwait", "epoll_wait", "select"}
IDLE_FRAMES = ("PyThread_acquire_lock", "pthread_cond_", "take_gil", "select_poll_poll")
OTHER_THREADS = ("RaftThread._run", "_worker (concurrent", "StallWatch._watch")


def frame_name(frame: str) -> str:
    """'func (path/to/file.py:12)' -> 'func (file.py)'; native frames keep their library."""
    function, _, where = frame.partition(" (")
    return f"{function} ({where.rsplit('/', 1)[-1].split(':')[0].rstrip(')')})"


def summarize(raw: Path, top: int) -> list[str]:
    """The frames with the largest inclusive share (and their self share) of the event
    loop thread's busy samples: the raft and thread-pool threads and every sample
    waiting in poll/epoll or for a lock (the GIL included) are left out."""
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    busy = idle = other = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n, frames = int(count), stack.split(";")
        if frames[-1].split(" (")[0] in IDLE_LEAVES or any(
            marker in f for f in frames for marker in IDLE_FRAMES
        ):
            idle += n
            continue
        if any(marker in f for f in frames for marker in OTHER_THREADS):
            other += n
            continue
        busy += n
        for name in {frame_name(f) for f in frames}:
            inclusive[name] += n
        own[frame_name(frames[-1])] += n
    lines = [f"event loop busy samples {busy} (idle or waiting {idle}, other threads {other})"]
    shown = [(f, n) for f, n in inclusive.most_common() if n < 0.97 * busy][:top]
    for frame, n in shown:
        lines.append(
            f"{100 * n / max(busy, 1):5.1f}% incl {100 * own[frame] / max(busy, 1):5.1f}% self  {frame}"
        )
    lines.append("top self:")
    for frame, n in own.most_common(top):
        lines.append(f"{100 * n / max(busy, 1):5.1f}% self  {frame}")
    return lines


@contextlib.contextmanager
def event_loop(choice: str | None, tmp: Path) -> Iterator[None]:
    """Nodes started inside run `kbroker serve --event-loop choice`: their interpreter is
    a script that adds the option to the command line it is given."""
    if choice is None:
        yield
        return
    wrapper = tmp / "python-with-loop"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@" --event-loop {choice}\n')
    wrapper.chmod(0o755)
    spawn = Node.spawn
    Node.spawn = functools.partialmethod(spawn, str(wrapper))  # type: ignore[method-assign]
    try:
        yield
    finally:
        Node.spawn = spawn  # type: ignore[method-assign]


def measure(
    label: str, pid: int, bootstrap: str, topic: str, names: list[str], args: argparse.Namespace
) -> None:
    """The idle rate, then each workload's broker CPU per request, for one peer."""
    if args.cpus is not None:
        client, broker = args.cpus
        pin(os.getpid(), {client})
        pin(pid, {broker})
        print(f"{label}: client on CPU {client}, broker on CPU {broker}")
    print(f"{label}: load average {load()}; broker pid {pid}")
    if label.startswith("kbroker"):  # its broker runs under this interpreter
        print(f"{label}: python {interpreter_build()}")
    before = cpu_seconds(pid)
    time.sleep(args.idle_seconds)  # the input: an idle broker's own background work
    idle_rate = (cpu_seconds(pid) - before) / args.idle_seconds
    print(f"idle       {1e3 * idle_rate:8.1f} ms broker CPU per second with no requests")
    for name in names:
        depth = args.pipeline if name == "produce" else 1
        one, close, asked = workload(name, bootstrap, topic, label != "kbroker", depth)
        if depth > 1:
            asked += f", {depth} pipelined in one write"
        (user, system), wall = cpu_split(pid), time.perf_counter()
        sent = max(1, args.requests // depth) * depth
        for _ in range(sent // depth):
            one()
        user_after, system_after = cpu_split(pid)
        user, system = user_after - user, system_after - system
        cpu = user + system
        wall = time.perf_counter() - wall
        net = max(0.0, cpu - idle_rate * wall)
        print(
            f"{name:10} {1e6 * cpu / sent:8.1f} µs broker CPU/request, "
            f"{1e6 * net / sent:.1f} net of idle, {100 * system / max(cpu, 1e-9):.0f}% "
            f"in the kernel ({sent} requests of {asked or name}, "
            f"{1e6 * wall / sent:.0f} µs wall each, load {load()})"
        )
        if args.profile is not None:
            args.profile.mkdir(parents=True, exist_ok=True)
            raw = profile(pid, args.profile / f"{label}-{name}", args.profile_seconds, one)
            print("\n".join("    " + line for line in summarize(raw, args.top)))
        close()


def cpu_pair(text: str) -> tuple[int, int]:
    try:
        client, broker = (int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected CLIENT,BROKER CPU numbers, got {text!r}"
        ) from None
    return client, broker


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--peer", default="kbroker", help="kbroker, mock, or both: kbroker,mock")
    parser.add_argument("-n", "--requests", type=int, default=5000)
    parser.add_argument("--profile", type=Path, help="directory for py-spy's collapsed stacks")
    parser.add_argument("--profile-seconds", type=float, default=10.0)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--idle-seconds", type=float, default=5.0)
    parser.add_argument(
        "--event-loop",
        choices=("uvloop", "asyncio"),
        help="the loop kbroker serve runs (its --event-loop; default: the broker's default)",
    )
    parser.add_argument(
        "--pipeline", type=int, default=1, help="produce: this many requests sent in one write"
    )
    add_settings_option(parser)
    parser.add_argument(
        "--cpus",
        type=cpu_pair,
        metavar="CLIENT,BROKER",
        help="bind this client to one CPU and the broker (every thread) to another",
    )
    args = parser.parse_args(argv)
    names = [w for w in args.workloads.split(",") if w]
    peers = [p for p in args.peer.split(",") if p]
    for unknown in [w for w in names if w not in WORKLOADS] + [p for p in peers if p not in PEERS]:
        parser.error(f"unknown workload or peer {unknown!r}")
    settings = dict(args.set)
    for peer in peers:
        with tempfile.TemporaryDirectory(prefix="kbroker-cost-") as tmp:
            if peer == "kbroker":
                with (
                    event_loop(args.event_loop, Path(tmp)),
                    kafka_broker(Path(tmp) / "node", settings=settings) as server,
                ):
                    proc = server.nodes[0].proc
                    assert proc is not None
                    measure(peer, proc.pid, server.bootstrap, server.create_topic(), names, args)
                continue
            topic = "cost-mock"
            mock = MockPeer("mock", Path(tmp), topics=[topic])
            try:
                mock.start()
            except PeerUnavailable as exc:
                print(f"mock: not measured: {exc}")
                continue
            try:
                served = [w for w in names if w in MOCK_WORKLOADS]
                measure(peer, mock.pid, mock.bootstrap, topic, served, args)
            finally:
                mock.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
