"""Argument parsing and the order of the runs (bench/run.py is the entry point)."""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench import report as report_mod
from bench.peers import (
    KafkaPeer,
    KbrokerPeer,
    MockPeer,
    Peer,
    PeerUnavailable,
    RedisPeer,
    kbroker_snapshot,
    kbroker_tree_state,
)
from bench.procs import (
    cpu_snapshot,
    foreign_cpu_seconds,
    loadavg,
    machine_busy_seconds,
    process_tree,
    self_cpu_seconds,
    wait_for_quiet,
)
from bench.results import Report

ALL_PEERS = ("kbroker", "kafka", "mock", "redis")
ALL_WORKLOADS = ("produce", "consume", "oneatatime", "memory", "partitions")
SIZES = {"100 B": 100, "1 KiB": 1024}
TOPICS = {"100 B": "bench-100b", "1 KiB": "bench-1kib"}
ONE_AT_A_TIME_TOPIC = "bench-oneatatime"
MANY_TOPIC = "bench-many"
# Kafka's own defaults but for what a one-node test cluster needs.
KAFKA_SETTINGS = {
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
}
MANY_PER_PARTITION = 10  # 100-byte records written to each partition of the many-partition topic


@dataclass
class Plan:
    """What to run, resolved from the command line."""

    peers: list[str]
    workloads: set[str]
    counts: dict[str, int]  # size label -> records for produce/consume
    one_count: int
    one_seconds: float
    time_limit: float
    partitions: int
    workdir: Path
    quiet_wait: float = 10.0
    repeat: int = 1
    budget: float = 540.0
    kbroker_source: Path | None = None

    def settings(self) -> dict:
        from bench import kafka_load, redis_load

        return {
            "peers": self.peers,
            "workloads": sorted(self.workloads),
            "records": self.counts,
            "oneatatime_records": self.one_count,
            "oneatatime_seconds": self.one_seconds,
            "bulk_time_limit_s": self.time_limit,
            "partitions": self.partitions,
            "repeat": self.repeat,
            "producer_batched": _printable(kafka_load.PRODUCER_BATCHED),
            "producer_one_at_a_time": _printable(kafka_load.PRODUCER_ONE_AT_A_TIME),
            "consumer": _printable(kafka_load.CONSUMER_FETCH),
            "consume_batch": kafka_load.CONSUME_BATCH,
            "redis_pipeline_batch": redis_load.PIPELINE_BATCH,
            "redis_read_chunk": redis_load.READ_CHUNK,
        }


def _printable(conf: dict) -> dict:
    return {k: v for k, v in conf.items() if not callable(v)}


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, Plan]:
    p = argparse.ArgumentParser(
        prog="bench/run.py",
        description="Same-run throughput/latency/memory comparison: kbroker vs librdkafka's "
        "mock cluster vs Redis Streams, all on loopback.",
    )
    p.add_argument("--peers", default=",".join(ALL_PEERS), help="comma list of %(default)s")
    p.add_argument(
        "--workloads",
        default=",".join(ALL_WORKLOADS),
        help="comma list of %(default)s (consume implies produce: it reads what produce wrote)",
    )
    p.add_argument(
        "--scale", type=float, default=1.0, help="multiplies every record count (0.1: quick run)"
    )
    p.add_argument(
        "--records-100b",
        type=int,
        default=1_000_000,
        help="produce/consume records of 100 B (before --scale)",
    )
    p.add_argument(
        "--records-1kib",
        type=int,
        default=300_000,
        help="produce/consume records of 1 KiB (before --scale)",
    )
    p.add_argument(
        "--oneatatime-records",
        type=int,
        default=5_000,
        help="one-at-a-time records (before --scale)",
    )
    p.add_argument(
        "--oneatatime-seconds", type=float, default=10.0, help="one-at-a-time time cap per peer"
    )
    p.add_argument(
        "--time-limit", type=float, default=30.0, help="cap in seconds on each bulk produce/consume"
    )
    p.add_argument(
        "--partitions",
        type=int,
        default=1000,
        help="partition count for the kbroker partitions workload",
    )
    p.add_argument(
        "--budget",
        type=float,
        default=540.0,
        help="start no further --repeat round once the next would likely end past this many seconds",
    )
    p.add_argument(
        "--kbroker-rev",
        help="run kbroker as committed at this git revision (a snapshot in the work dir) "
        "instead of the work tree, which others may be editing",
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run every peer's suite this many times, interleaved; figures are the median round",
    )
    p.add_argument(
        "--json", type=Path, help="also write every figure, the machine and the settings here"
    )
    p.add_argument(
        "--workdir", type=Path, help="parent for the temporary data dirs (default: system temp)"
    )
    p.add_argument("--keep-workdir", action="store_true", help="keep data dirs and broker logs")
    p.add_argument(
        "--skip-machine", action="store_true", help="do not measure loopback/disk limits"
    )
    p.add_argument(
        "--quiet-wait",
        type=float,
        default=10.0,
        help="before each peer, wait up to this many seconds for other processes to "
        "use < 0.3 CPU (the machine is shared)",
    )
    args = p.parse_args(argv)  # fmt: skip

    peers = [x.strip() for x in args.peers.split(",") if x.strip()]
    workloads = {x.strip() for x in args.workloads.split(",") if x.strip()}
    for name, allowed, given in (
        ("peer", ALL_PEERS, peers),
        ("workload", ALL_WORKLOADS, workloads),
    ):
        unknown = set(given) - set(allowed)
        if unknown:
            p.error(
                f"unknown {name}(s): {', '.join(sorted(unknown))}; choose from {', '.join(allowed)}"
            )
    if "consume" in workloads:
        workloads.add("produce")
    counts = {
        "100 B": max(1000, int(args.records_100b * args.scale)),
        "1 KiB": max(1000, int(args.records_1kib * args.scale)),
    }
    parent = args.workdir
    if parent is not None:
        parent.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="kbroker-bench-", dir=parent))
    plan = Plan(
        peers=peers,
        workloads=workloads,
        counts=counts,
        one_count=max(100, int(args.oneatatime_records * args.scale)),
        one_seconds=args.oneatatime_seconds,
        time_limit=args.time_limit,
        partitions=args.partitions,
        workdir=workdir,
        quiet_wait=args.quiet_wait,
        repeat=max(1, args.repeat),
        budget=args.budget,
    )
    return args, plan


class Runner:
    """Runs the plan peer by peer, adding rows to one Report."""

    def __init__(self, plan: Plan, report: Report) -> None:
        self.plan = plan
        self.report = report

    def measure(
        self, peer: Peer, label: str, workload: str, variant: str, fn: Callable, note: str = ""
    ) -> bool:
        """Runs one workload with CPU accounting; a failure becomes a row note, not a crash.

        Besides the broker's and the client's CPU, it records `other_cpu_s`, what other
        user processes on the shared machine used meanwhile (the noise in the figure), and
        `kernel_cpu_s`, the rest of the machine's busy time (kernel threads, interrupts).
        """
        load = loadavg()
        snap0 = cpu_snapshot()
        busy0, broker0, client0 = machine_busy_seconds(), peer.cpu_seconds(), self_cpu_seconds()
        try:
            result = fn()
        except Exception as exc:  # a broker under development may fail any workload
            self.report.add(label, workload, variant, {}, note=f"failed: {exc}")
            print(f"  {label:14} {workload:11} {variant:6} FAILED: {exc}", flush=True)
            traceback.print_exc()
            return False
        busy = machine_busy_seconds() - busy0
        ours = {os.getpid(), *process_tree(peer.pid)}
        other = foreign_cpu_seconds(snap0, cpu_snapshot(), ours)
        metrics = result.metrics()
        broker_cpu = peer.cpu_seconds() - broker0
        client_cpu = self_cpu_seconds() - client0
        metrics["broker_cpu_s"] = round(broker_cpu, 3)
        metrics["client_cpu_s"] = round(client_cpu, 3)
        metrics["other_cpu_s"] = round(other, 3)
        # Kernel threads and interrupt time: journal/writeback for fsync, loopback softirqs.
        metrics["kernel_cpu_s"] = round(max(busy - broker_cpu - client_cpu - other, 0.0), 3)
        metrics["loadavg_1m_before"] = load
        self.report.add(label, workload, variant, metrics, note)
        rate = metrics.get("msg_per_s", metrics.get("acks_per_s"))
        extra = (
            f", p50 {metrics['p50_ms']} ms, p99 {metrics['p99_ms']} ms"
            if "p50_ms" in metrics
            else ""
        )
        print(
            f"  {label:14} {workload:11} {variant:6} {metrics['records']:>9,} rec "
            f"{metrics['seconds']:8.2f} s {rate:>12,.0f} /s{extra}",
            flush=True,
        )
        return True

    def record_memory(self, peer: Peer, label: str) -> None:
        mem = peer.memory()
        self.report.add(
            label,
            "memory",
            "after runs",
            {"rss_mib": round(mem.rss_mib, 1), "hwm_mib": round(mem.hwm_mib, 1)},
        )
        print(
            f"  {label:14} memory      RSS {mem.rss_mib:,.1f} MiB (peak {mem.hwm_mib:,.1f} MiB)",
            flush=True,
        )

    # -- Kafka peers -------------------------------------------------------------------

    def kafka_workloads(self, peer: Peer, label: str) -> None:
        from bench import kafka_load

        plan = self.plan
        for variant, size in SIZES.items():
            topic, count = TOPICS[variant], plan.counts[variant]
            if "produce" in plan.workloads:
                ok = self.measure(peer, label, "produce", variant, lambda t=topic, c=count, s=size:
                                  kafka_load.produce_batched(peer.bootstrap, t, c, s, plan.time_limit))  # fmt: skip
                if ok and "consume" in plan.workloads:
                    produced = int(self.report.current(label, "produce", variant, "records") or 0)
                    rewind = isinstance(peer, MockPeer)
                    note = "re-reads the mock's retained 5 MiB window" if rewind else ""
                    self.measure(peer, label, "consume", variant, lambda t=topic, c=produced, r=rewind:
                                 kafka_load.consume_all(peer.bootstrap, t, c, plan.time_limit, rewind=r),
                                 note)  # fmt: skip
        if "oneatatime" in plan.workloads:
            self.one_at_a_time(peer, label)
        if "memory" in plan.workloads:
            self.record_memory(peer, label)

    def one_at_a_time(self, peer: Peer, label: str) -> None:
        from bench import kafka_load

        plan = self.plan
        self.measure(peer, label, "oneatatime", "100 B", lambda: kafka_load.produce_one_at_a_time(
            peer.bootstrap, ONE_AT_A_TIME_TOPIC, plan.one_count, 100, plan.one_seconds))  # fmt: skip

    def bench_topics(self) -> dict[str, int]:
        return {**{t: 1 for t in TOPICS.values()}, ONE_AT_A_TIME_TOPIC: 1}

    def run_mock(self) -> None:
        peer = MockPeer("mock", self.plan.workdir, topics=list(self.bench_topics()))
        try:
            peer.start()
        except PeerUnavailable as exc:
            self.skip("mock", str(exc))
            return
        print(f"mock cluster at {peer.bootstrap} (pid {peer.pid})", flush=True)
        try:
            self.kafka_workloads(peer, "mock")
        finally:
            peer.stop()
        if self.wants_partitions():
            self.mock_partitions()

    def mock_partitions(self) -> None:
        """The mock's memory with the same many-partition topic, as a reference figure."""
        from bench import kafka_load

        n = self.plan.partitions
        peer = MockPeer("mock-partitions", self.plan.workdir, topics=[f"{MANY_TOPIC}:{n}"])
        peer.start()
        try:
            idle = peer.memory()
            written = kafka_load.produce_spread(
                peer.bootstrap, MANY_TOPIC, n, MANY_PER_PARTITION, 100
            )
            mem = peer.memory()
            self.report.add("mock", "partitions", f"{n} partitions", {
                "records": written, "rss_fresh_mib": round(idle.rss_mib, 1), "rss_mib": round(mem.rss_mib, 1),
            })  # fmt: skip
            print(
                f"  mock           partitions {n} partitions: RSS {mem.rss_mib:,.1f} MiB",
                flush=True,
            )
        finally:
            peer.stop()

    def run_kbroker(self) -> None:
        from bench import kafka_load

        plan = self.plan
        peer = KbrokerPeer("kbroker", plan.workdir, source=self.plan.kbroker_source)
        try:
            first, _ = peer.start()
        except PeerUnavailable as exc:
            self.skip("kbroker", str(exc))
            return
        self.record_startup(peer, "kbroker", first)
        print(f"kbroker at {peer.bootstrap} (pid {peer.pid})", flush=True)
        try:
            kafka_load.create_topics(peer.bootstrap, self.bench_topics())
            self.kafka_workloads(peer, "kbroker")
        except Exception as exc:
            self.report.add("kbroker", "setup", "-", {}, note=f"failed: {exc}")
            traceback.print_exc()
        finally:
            peer.stop()
        if self.wants_partitions():
            self.kbroker_partitions()
        if "oneatatime" in plan.workloads:
            self.kbroker_fsync()

    def kbroker_fsync(self) -> None:
        """One-at-a-time again on a broker that fsyncs every append before acknowledging."""
        from bench import kafka_load

        peer = KbrokerPeer(
            "kbroker-fsync",
            self.plan.workdir,
            overrides={"log.flush.interval.messages": "1"},
            source=self.plan.kbroker_source,
        )
        try:
            peer.start()
        except PeerUnavailable as exc:
            self.skip("kbroker-fsync", str(exc))
            return
        print(
            f"kbroker (log.flush.interval.messages=1) at {peer.bootstrap} (pid {peer.pid})",
            flush=True,
        )
        try:
            kafka_load.create_topics(peer.bootstrap, {ONE_AT_A_TIME_TOPIC: 1})
            self.one_at_a_time(peer, "kbroker-fsync")
            if "memory" in self.plan.workloads:
                self.record_memory(peer, "kbroker-fsync")
        except Exception as exc:
            self.report.add("kbroker-fsync", "setup", "-", {}, note=f"failed: {exc}")
            traceback.print_exc()
        finally:
            peer.stop()

    def kbroker_partitions(self) -> None:
        """RSS with many partitions holding a little data, then restart time over that data."""
        from bench import kafka_load

        n = self.plan.partitions
        peer = KbrokerPeer("kbroker-partitions", self.plan.workdir, source=self.plan.kbroker_source)
        try:
            peer.start()
        except PeerUnavailable as exc:
            self.skip("kbroker-partitions", str(exc))
            return
        figures: dict[str, float] = {}
        try:
            figures["rss_fresh_mib"] = round(peer.memory().rss_mib, 1)
            t0 = time.perf_counter()
            kafka_load.create_topics(peer.bootstrap, {MANY_TOPIC: n}, timeout=120)
            figures["create_topic_s"] = round(time.perf_counter() - t0, 3)
            figures["records"] = kafka_load.produce_spread(
                peer.bootstrap, MANY_TOPIC, n, MANY_PER_PARTITION, 100
            )
            mem = peer.memory()
            figures["rss_mib"] = round(mem.rss_mib, 1)
            figures["shutdown_s"] = round(peer.stop(), 3)
            first, full = peer.start(topic=MANY_TOPIC, partitions=n)
            figures["startup_first_metadata_s"] = round(first, 3)
            if full is not None:
                figures["startup_all_partitions_led_s"] = round(full, 3)
            figures["rss_after_restart_mib"] = round(peer.memory().rss_mib, 1)
            print(f"  kbroker        partitions {n}: {figures}", flush=True)
            self.report.add("kbroker", "partitions", f"{n} partitions", figures)
        except Exception as exc:
            self.report.add(
                "kbroker", "partitions", f"{n} partitions", figures, note=f"failed: {exc}"
            )
            traceback.print_exc()
        finally:
            peer.stop()

    def record_startup(self, peer: Peer, label: str, first: float) -> None:
        """Seconds from launch to the first answered Metadata, and RSS then (first round)."""
        if self.report.round:
            return
        figures = {
            "first_metadata_s": round(first, 3),
            "rss_idle_mib": round(peer.memory().rss_mib, 1),
        }
        self.report.add(label, "startup", "empty", figures)
        print(f"  {label:14} startup     {figures}", flush=True)

    # -- Apache Kafka ------------------------------------------------------------------

    def run_kafka(self) -> None:
        """Apache Kafka 4.3 as a peer: the same workloads as kbroker, then fsync-before-ack."""
        from bench import kafka_load

        plan = self.plan
        peer = KafkaPeer("kafka", plan.workdir, overrides=KAFKA_SETTINGS)
        try:
            first, _ = peer.start()
        except PeerUnavailable as exc:
            self.skip("kafka", str(exc))
            return
        self.record_startup(peer, "kafka", first)
        print(f"Apache Kafka at {peer.bootstrap} (pid {peer.pid})", flush=True)
        try:
            kafka_load.create_topics(peer.bootstrap, self.bench_topics())
            self.kafka_workloads(peer, "kafka")
        except Exception as exc:
            self.report.add("kafka", "setup", "-", {}, note=f"failed: {exc}")
            traceback.print_exc()
        finally:
            peer.stop()
        if "oneatatime" in plan.workloads:
            self.kafka_fsync()

    def kafka_fsync(self) -> None:
        from bench import kafka_load

        peer = KafkaPeer(
            "kafka-fsync",
            self.plan.workdir,
            overrides={**KAFKA_SETTINGS, "log.flush.interval.messages": "1"},
        )
        try:
            peer.start()
        except PeerUnavailable as exc:
            self.skip("kafka-fsync", str(exc))
            return
        try:
            kafka_load.create_topics(peer.bootstrap, {ONE_AT_A_TIME_TOPIC: 1})
            self.one_at_a_time(peer, "kafka-fsync")
        except Exception as exc:
            self.report.add("kafka-fsync", "setup", "-", {}, note=f"failed: {exc}")
            traceback.print_exc()
        finally:
            peer.stop()

    # -- Redis ---------------------------------------------------------------------------

    def run_redis(self) -> None:
        plan = self.plan
        peer = RedisPeer("redis", plan.workdir)
        try:
            from bench import redis_load

            peer.start()
        except (PeerUnavailable, ImportError) as exc:
            self.skip("redis", str(exc))
            return
        print(f"redis-server at {peer.bootstrap} (pid {peer.pid}), appendfsync always", flush=True)
        try:
            client = peer.client()
            for variant, size in SIZES.items():
                key, count = TOPICS[variant], plan.counts[variant]
                if "produce" in plan.workloads:
                    ok = self.measure(peer, "redis", "produce", variant, lambda k=key, c=count, s=size:
                                      redis_load.xadd_pipelined(client, k, c, s, plan.time_limit))  # fmt: skip
                    if ok and "consume" in plan.workloads:
                        stored = int(
                            self.report.current("redis", "produce", variant, "records") or 0
                        )
                        self.measure(peer, "redis", "consume", variant, lambda k=key, c=stored:
                                     redis_load.xrange_all(client, k, c, plan.time_limit))  # fmt: skip
            if "oneatatime" in plan.workloads:
                self.measure(peer, "redis", "oneatatime", "100 B", lambda: redis_load.xadd_one_at_a_time(
                    client, ONE_AT_A_TIME_TOPIC, plan.one_count, 100, plan.one_seconds))  # fmt: skip
            if "memory" in plan.workloads:
                self.record_memory(peer, "redis")
        finally:
            peer.stop()

    def wants_partitions(self) -> bool:
        """Memory and start-up figures are not rates: measured in the first round only."""
        return "partitions" in self.plan.workloads and self.report.round == 0

    def settle(self, peer: str) -> None:
        """Lets a neighbour's CPU burst pass before a peer's runs; records what was left."""
        if self.plan.quiet_wait <= 0:
            return
        load = wait_for_quiet(self.plan.quiet_wait)
        waits = self.report.settings.setdefault("other_load_cores_before", [])
        waits.append({"round": self.report.round, "peer": peer, "cores": round(load, 2)})
        if load >= 0.3:
            print(
                f"note: other processes still use {load:.2f} CPUs; figures will be noisy",
                flush=True,
            )

    def skip(self, peer: str, why: str) -> None:
        if self.report.round:
            why = f"from round {self.report.round + 1} on: {why}"
        self.report.skipped[peer] = why
        print(f"SKIPPING {peer}: {why}", flush=True)


def main(argv: list[str] | None = None) -> int:
    args, plan = parse_args(argv)
    report = Report(settings=plan.settings())
    started = time.perf_counter()
    try:
        if not args.skip_machine:
            from bench.machine import describe

            print("measuring machine limits ...", flush=True)
            report.machine = describe(plan.workdir, quick=args.scale < 1)
        if "kbroker" in plan.peers:
            if args.kbroker_rev:
                plan.kbroker_source = plan.workdir / "kbroker-src"
                commit = kbroker_snapshot(args.kbroker_rev, plan.kbroker_source)
                report.settings["kbroker_source"] = f"{commit} (snapshot)"
            else:
                report.settings["kbroker_source"] = kbroker_tree_state()
        runner = Runner(plan, report)
        for round_ in range(plan.repeat):
            elapsed = time.perf_counter() - started
            if round_ and elapsed + elapsed / round_ > plan.budget:
                print(f"stopping after {round_} rounds: another would pass --budget", flush=True)
                report.settings["rounds_done"] = round_
                break
            report.round = round_
            if plan.repeat > 1:
                print(f"-- round {round_ + 1} of {plan.repeat}", flush=True)
            for name in plan.peers:
                if name in report.skipped:
                    continue
                runner.settle(name)
                getattr(runner, f"run_{name}")()
    finally:
        report.settings["wall_seconds"] = round(time.perf_counter() - started, 1)
        if args.keep_workdir:
            print(f"data dirs and logs kept in {plan.workdir}")
        else:
            shutil.rmtree(plan.workdir, ignore_errors=True)
    print()
    print(report_mod.render(report))
    if args.json:
        report_mod.write_json(report, args.json)
        print(f"\nJSON written to {args.json}")
    return 0
