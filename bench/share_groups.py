"""Queue consumption: a share group (KIP-932) against a classic group, RabbitMQ and
Apache Kafka 4.3's own share groups.

    .venv/bin/python -m bench.share_groups [--records 200000] [--consumers 1,4,16]
                                           [--peers kbroker,kafka,rabbitmq] [--rounds 3]

`kafka` (bench.peers.KafkaPeer: one KRaft node, share groups on by default in 4.3, where
share.version is finalized at 1 on a new cluster) runs the same readers as kbroker on the
same records, its rows labelled "Kafka ...", with the kbroker/Kafka ratio of each figure.

kbroker: one topic of one partition holds `records` records of 100 bytes, written by one
confluent-kafka Producer with librdkafka's default settings, as an application using it
would write them (linger.ms 5, batch.size 1,000,000, batch.num.messages 10,000: from a
tight loop, batches of 1 MB, 9,082 of these records, smaller while the producer starts).
For each consumer count a fresh share group reads them all with confluent-kafka
ShareConsumers (one thread each, as separate workers would be; implicit acknowledgement,
so every record is accepted by the consumer's next poll, one acknowledgement per record
on the broker), and is deleted after its round (a broker holds at most
group.share.max.groups, 10 by default); then again with each consumer a process of its
own, as workers are deployed ("(processes)" rows): the threads of one process take
turns at the interpreter lock to make Python objects of their records, and while one
consumer holds the records the share-partition's in-flight window allows, the others
wait for it to get its turn. The reference is one classic-group consumer reading the
same partition and committing once at the end, with `fetch.queue.backoff.ms` 10
(librdkafka's 1 s pause once its prefetch passes 100,000 messages stalled some rounds
for ~0.9 s with the queue long drained). Each figure is records/s from the first
subscribe to the last record received (joining included: a heartbeat for the share
group, JoinGroup and SyncGroup for the classic one, whose initial rebalance delay is set
to 0).

RabbitMQ (Debian's rabbitmq-server, pika clients): for each round and consumer count a
durable classic queue is filled with `records` persistent messages of 100 bytes (not
timed), then that many consumers, one process each (pika is pure Python: threads would
share one interpreter lock), consume with manual acknowledgement, one basic.ack per
message, and a prefetch of `--max-poll-records` (what a ShareConsumer asks per fetch).
Timed from the start signal (connections already open) to the last acknowledgement
sent. Durable and persistent because that is what kbroker's side promises: the records
are in its log and each acknowledgement is in `__share_group_state` before it is
answered, both surviving a broker restart, written to the page cache without an fsync
per acknowledgement; RabbitMQ's persistent messages and their acks go to its message
store and queue index the same way (no fsync per ack; publisher confirms are not used).

Rounds are interleaved (classic, share 1/4/16 as threads and processes, RabbitMQ 1/4/16,
then again) with both brokers up, so a neighbour's burst on the shared machine lands on
every reader alike; each figure is the median over `--rounds`, with its ratio to the
classic figure and to RabbitMQ's at the same consumer count. Broker and client CPU per
record come from /proc.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.peers import KafkaPeer, KbrokerPeer, Peer, PeerUnavailable, RabbitMQPeer
from bench.procs import loadavg, self_cpu_seconds, wait_for_quiet

TIMEOUT_S = 300.0
# A classic group's first rebalance waits this long for more members; it measures
# nothing about reading, so it is off (a share group has no such delay).
OVERRIDES = {"group.initial.rebalance.delay.ms": "0"}
VALUE = b"x" * 100
QUEUE = "share-bench"
PROCESSES = " (processes)"  # label suffix of share consumers run one process each
KAFKA = "Kafka "  # label prefix of the readers run against Kafka


@dataclass(frozen=True)
class Timing:
    """What a runner measured, in seconds (time.monotonic: one clock for all processes)."""

    seconds: float  # start to the last record
    first: float  # start to the first record (joining, connecting)
    client_cpu: float = 0.0  # CPU of consumer processes other than this one


@dataclass
class Measure:
    """One timed read of all records."""

    records_s: float  # start to the last record
    steady_records_s: float  # from the first record to the last
    first_record_ms: float
    broker_cpu_us: float  # broker process tree CPU per record
    client_cpu_us: float  # consuming clients' CPU per record


Runner = Callable[[], Timing]


def _timed(peer: Peer, records: int, run: Runner) -> Measure:
    broker0, client0 = peer.cpu_seconds(), self_cpu_seconds()
    t = run()
    broker = peer.cpu_seconds() - broker0
    client = self_cpu_seconds() - client0 + t.client_cpu
    return Measure(
        records / t.seconds,
        (records - 1) / max(t.seconds - t.first, 1e-6),
        t.first * 1000,
        broker / records * 1e6,
        client / records * 1e6,
    )


# -- kbroker ----------------------------------------------------------------------------


def prepare_topic(bootstrap: str, records: int) -> str:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"share-bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap})  # librdkafka's defaults
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, VALUE)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(60)
    return topic


def new_share_group(bootstrap: str) -> str:
    """A share group id, set to start from the earliest offset."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    group = f"share-bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    reset = ConfigEntry(
        "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource("GROUP", group, incremental_configs=[reset])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    return group


def delete_group(bootstrap: str, group: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_consumer_groups([group]).values():
        future.result(30)


def share_round(bootstrap: str, topic: str, records: int, consumers: int, max_poll: int) -> Timing:
    from confluent_kafka import ShareConsumer

    group = new_share_group(bootstrap)
    lock = threading.Lock()
    seen = [0]
    first: list[float] = []
    done = threading.Event()

    def work() -> None:
        consumer = ShareConsumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "max.poll.records": max_poll}
        )
        consumer.subscribe([topic])
        deadline = time.monotonic() + TIMEOUT_S
        while not done.is_set() and time.monotonic() < deadline:
            got = sum(1 for m in consumer.poll(0.1) if m.error() is None)
            if got:
                with lock:
                    if not first:
                        first.append(time.monotonic())
                    seen[0] += got
                    if seen[0] >= records:
                        done.set()
        consumer.close()

    threads = [threading.Thread(target=work, daemon=True) for _ in range(consumers)]
    started = time.monotonic()
    for t in threads:
        t.start()
    done.wait(TIMEOUT_S)
    elapsed = time.monotonic() - started
    for t in threads:
        t.join(30)
    delete_group(bootstrap, group)
    if seen[0] < records:
        raise TimeoutError(f"{consumers} share consumers read {seen[0]} of {records}")
    return Timing(elapsed, first[0] - started)


def _share_worker(bootstrap, group, topic, max_poll, ready, go, done, counter, first, cpu) -> None:  # noqa: ANN001
    """One share consumer process: subscribe at the start signal, poll until told to stop."""
    from confluent_kafka import ShareConsumer

    consumer = ShareConsumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "max.poll.records": max_poll}
    )
    ready.release()
    go.wait()
    t0 = os.times()
    consumer.subscribe([topic])
    while not done.is_set():
        got = sum(1 for m in consumer.poll(0.1) if m.error() is None)
        if got:
            if first.value == float("inf"):
                with first.get_lock():
                    first.value = min(first.value, time.monotonic())
            with counter.get_lock():
                counter.value += got
    t1 = os.times()
    cpu.put((t1.user - t0.user) + (t1.system - t0.system))
    consumer.close()


def share_process_round(
    bootstrap: str, topic: str, records: int, consumers: int, max_poll: int
) -> Runner:
    """Share consumers as processes, one each, the way workers are deployed: the
    threads of one process take turns at the interpreter lock to turn the records
    librdkafka hands over into Python objects (about 0.5 us a record), and a consumer
    holding records the others wait for (the share-partition's in-flight window is
    full) can wait its turn. Started here (not timed); the runner sets them going."""
    group = new_share_group(bootstrap)
    return process_round(
        _share_worker,
        (bootstrap, group, topic, max_poll),
        consumers,
        records,
        f"{consumers} share consumer processes",
        after=lambda: delete_group(bootstrap, group),
    )


def process_round(
    worker: Callable[..., None],
    head: tuple,
    consumers: int,
    records: int,
    what: str,
    after: Callable[[], None] | None = None,
) -> Runner:
    """Starts `consumers` processes of `worker(*head, ready, go, done, counter, first,
    cpu)`, waits until each is ready, and returns the runner that sets them going and
    times them to the `records`th record counted."""
    ctx = multiprocessing.get_context("spawn")  # no fork of a process with client threads
    ready, go, done = ctx.Semaphore(0), ctx.Event(), ctx.Event()
    counter, first, cpu = ctx.Value("q", 0), ctx.Value("d", float("inf")), ctx.Queue()
    args = (*head, ready, go, done, counter, first, cpu)
    workers = [ctx.Process(target=worker, args=args, daemon=True) for _ in range(consumers)]
    for w in workers:
        w.start()
    for _ in workers:
        if not ready.acquire(timeout=60):
            raise TimeoutError(f"one of {what} did not start")

    def run() -> Timing:
        started = time.monotonic()
        go.set()
        deadline = started + TIMEOUT_S
        while counter.value < records and time.monotonic() < deadline:
            time.sleep(0.001)
        elapsed = time.monotonic() - started
        done.set()
        used = sum(cpu.get(timeout=60) for _ in workers)
        for w in workers:
            w.join(30)
        if after is not None:
            after()
        if counter.value < records:
            raise TimeoutError(f"{what} counted {counter.value} of {records} records")
        return Timing(elapsed, first.value - started, used)

    return run


def classic_round(bootstrap: str, topic: str, records: int) -> Timing:
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"classic-bench-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            # librdkafka's default, 1000 ms, pauses fetching that long once the prefetch
            # passes queued.min.messages (100,000), though this loop drains the queue in
            # a tenth of that: a stall of ~0.9 s in some rounds, no part of the broker's
            # reading. Shorter, the reference reads at its pace, a stricter comparison.
            "fetch.queue.backoff.ms": 10,
        }
    )
    started = time.monotonic()
    consumer.subscribe([topic])
    seen = 0
    first = 0.0
    deadline = started + TIMEOUT_S
    while seen < records and time.monotonic() < deadline:
        seen += sum(1 for m in consumer.consume(1000, 0.1) if m.error() is None)
        if seen and not first:
            first = time.monotonic()
    elapsed = time.monotonic() - started
    consumer.commit(asynchronous=False)
    consumer.close()
    if seen < records:
        raise TimeoutError(f"classic consumer read {seen} of {records}")
    return Timing(elapsed, first - started)


# -- RabbitMQ ---------------------------------------------------------------------------


def fill_queue(host: str, port: int, records: int) -> None:
    """A durable queue holding exactly `records` persistent messages."""
    import pika

    connection = pika.BlockingConnection(pika.ConnectionParameters(host, port))
    channel = connection.channel()
    channel.queue_declare(QUEUE, durable=True)
    channel.queue_purge(QUEUE)
    persistent = pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent)
    for i in range(records):
        channel.basic_publish("", QUEUE, VALUE, persistent)
        if i % 10_000 == 9_999:
            connection.process_data_events(0)  # lets a flow-control block show up
    deadline = time.perf_counter() + TIMEOUT_S
    while channel.queue_declare(QUEUE, durable=True, passive=True).method.message_count < records:
        if time.perf_counter() > deadline:
            raise TimeoutError("RabbitMQ did not enqueue every published message")
        time.sleep(0.05)
    connection.close()


def _rabbit_worker(host, port, prefetch, ready, go, done, counter, first, cpu) -> None:  # noqa: ANN001
    """One consumer process: connect, wait for the start, ack each message singly."""
    import pika

    connection = pika.BlockingConnection(pika.ConnectionParameters(host, port))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=prefetch)
    acked = [0]

    def on_message(ch, method, _properties, _body) -> None:  # noqa: ANN001
        ch.basic_ack(method.delivery_tag)
        if not acked[0]:
            with first.get_lock():
                first.value = min(first.value, time.monotonic())
        acked[0] += 1

    ready.release()
    go.wait()
    t0 = os.times()
    channel.basic_consume(QUEUE, on_message)
    reported = 0
    while not done.is_set():
        connection.process_data_events(time_limit=0.01)
        if acked[0] != reported:
            with counter.get_lock():
                counter.value += acked[0] - reported
            reported = acked[0]
    t1 = os.times()
    cpu.put((t1.user - t0.user) + (t1.system - t0.system))
    connection.close()


def rabbit_round(host: str, port: int, records: int, consumers: int, prefetch: int) -> Runner:
    """Starts the consumer processes and returns the runner that sets them going."""
    return process_round(
        _rabbit_worker,
        (host, port, prefetch),
        consumers,
        records,
        f"{consumers} RabbitMQ consumers",
    )


# -- the comparison ---------------------------------------------------------------------


@dataclass
class Reader:
    """One row of the table: `prepare` sets a round up and returns what is timed."""

    label: str
    peer: Peer
    prepare: Callable[[], Runner]


def kafka_readers(peer: Peer, args: argparse.Namespace, counts: list[int]) -> list[Reader]:
    """kbroker's readers, run against Kafka, each labelled "Kafka ..."."""
    readers = kbroker_readers(peer, args, counts)
    for reader in readers:
        reader.label = KAFKA + reader.label
    return readers


def kbroker_readers(peer: Peer, args: argparse.Namespace, counts: list[int]) -> list[Reader]:
    topic = prepare_topic(peer.bootstrap, args.records)
    boot, records = peer.bootstrap, args.records

    def classic() -> Runner:
        return lambda: classic_round(boot, topic, records)

    def share(n: int) -> Callable[[], Runner]:
        return lambda: lambda: share_round(boot, topic, records, n, args.max_poll_records)

    def share_processes(n: int) -> Callable[[], Runner]:
        return lambda: share_process_round(boot, topic, records, n, args.max_poll_records)

    readers = [Reader("classic group, 1 consumer", peer, classic)]
    for n in counts:
        readers.append(Reader(f"share group, {n} consumers", peer, share(n)))
        readers.append(Reader(f"share group, {n} consumers{PROCESSES}", peer, share_processes(n)))
    return readers


def rabbit_readers(peer: Peer, args: argparse.Namespace, counts: list[int]) -> list[Reader]:
    def queue(n: int) -> Callable[[], Runner]:
        def prepare() -> Runner:
            fill_queue(peer.host, peer.port, args.records)
            return rabbit_round(peer.host, peer.port, args.records, n, args.max_poll_records)

        return prepare

    return [Reader(f"RabbitMQ, {n} consumers", peer, queue(n)) for n in counts]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--consumers", default="1,4,16")
    parser.add_argument("--peers", default="kbroker,rabbitmq", help="comma list of %(default)s")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--max-poll-records",
        type=int,
        default=500,
        help="ShareConsumer max.poll.records, and RabbitMQ's prefetch count",
    )
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=5.0,
        help="before each measurement wait up to S seconds for other work to quieten",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.consumers.split(",")]
    wanted = set(args.peers.split(","))
    figures: dict[str, list[Measure]] = {}
    loads: list[float] = []
    with tempfile.TemporaryDirectory(prefix="kbroker-share-bench-") as tmp:
        kbroker = KbrokerPeer("kbroker", Path(tmp), overrides=OVERRIDES)
        kafka = KafkaPeer("kafka", Path(tmp), overrides=OVERRIDES)
        rabbit = RabbitMQPeer("rabbitmq", Path(tmp))
        readers: list[Reader] = []
        try:
            for name, peer, make in (
                ("kbroker", kbroker, kbroker_readers),
                ("kafka", kafka, kafka_readers),
                ("rabbitmq", rabbit, rabbit_readers),
            ):
                if name in wanted:
                    try:
                        peer.start()
                        readers += make(peer, args, counts)
                    except PeerUnavailable as exc:
                        print(f"{name} skipped: {exc}")
            for round_no in range(args.rounds):
                for reader in readers:
                    run = reader.prepare()  # filling a queue, starting processes: not timed
                    if args.quiet_wait > 0:
                        wait_for_quiet(args.quiet_wait)
                    loads.append(loadavg())
                    m = _timed(reader.peer, args.records, run)
                    figures.setdefault(reader.label, []).append(m)
                    print(
                        f"round {round_no + 1} {reader.label:38} {m.records_s:10.0f} records/s "
                        f"broker {m.broker_cpu_us:6.1f} us/rec client {m.client_cpu_us:6.1f} us/rec",
                        flush=True,
                    )
        finally:
            kbroker.stop()
            kafka.stop()
            rabbit.stop()
    rows = _rows(figures)
    _print(rows)
    if loads:
        print(f"load average {min(loads):.1f}-{max(loads):.1f} during the rounds")
    if args.json:
        settings = vars(args) | {"json": str(args.json), "loadavg": loads}
        args.json.write_text(json.dumps({"settings": settings, "rows": rows}, indent=1))
    return 0


def _median(ms: list[Measure]) -> Measure:
    """The round with the median rate (its CPU figures belong to it)."""
    ordered = sorted(ms, key=lambda m: m.records_s)
    return ordered[(len(ordered) - 1) // 2]


def _rows(figures: dict[str, list[Measure]]) -> list[dict[str, object]]:
    """Per reader its median round, and ratios of medians: to the classic group (kbroker
    readers: the same broker's) and to RabbitMQ at the same consumer count (share groups),
    both for the whole read and from the first record on; kbroker's to Kafka's."""
    medians = {label: _median(ms) for label, ms in figures.items()}
    rows: list[dict[str, object]] = []
    for label, m in medians.items():
        own = KAFKA if label.startswith(KAFKA) else ""
        classic = medians.get(own + "classic group, 1 consumer")
        row: dict[str, object] = {"reader": label, **asdict(m)}
        row["rounds_records_s"] = [round(x.records_s) for x in figures[label]]
        if classic is not None and not label.startswith("RabbitMQ"):
            row["vs_classic"] = m.records_s / classic.records_s
            row["steady_vs_classic"] = m.steady_records_s / classic.steady_records_s
        kafka = medians.get(KAFKA + label)
        if kafka is not None:
            row["vs_kafka"] = m.records_s / kafka.records_s
            row["broker_cpu_vs_kafka"] = m.broker_cpu_us / kafka.broker_cpu_us
        rabbit = medians.get(label.removesuffix(PROCESSES).replace("share group", "RabbitMQ"))
        if label.startswith("share group") and rabbit is not None:
            row["vs_rabbitmq"] = m.records_s / rabbit.records_s
            row["steady_vs_rabbitmq"] = m.steady_records_s / rabbit.steady_records_s
        rows.append(row)
    return rows


def _print(rows: list[dict[str, object]]) -> None:
    def ratio(row: dict[str, object], key: str) -> str:
        value = row.get(key)
        return f"{value:.2f}x" if isinstance(value, float) else "-"

    print()
    print(
        f"{'reader':38} {'records/s':>10} {'vs classic':>10} {'vs RabbitMQ':>11} "
        f"{'1st rec ms':>10} {'steady/s':>10} {'vs classic':>10} {'vs RabbitMQ':>11} "
        f"{'broker us/rec':>13} {'client us/rec':>13} {'vs Kafka':>9} {'CPU vs Kafka':>12}"
    )
    for row in rows:
        print(
            f"{row['reader']:38} {row['records_s']:10.0f} {ratio(row, 'vs_classic'):>10} "
            f"{ratio(row, 'vs_rabbitmq'):>11} {row['first_record_ms']:10.0f} "
            f"{row['steady_records_s']:10.0f} {ratio(row, 'steady_vs_classic'):>10} "
            f"{ratio(row, 'steady_vs_rabbitmq'):>11} "
            f"{row['broker_cpu_us']:13.1f} {row['client_cpu_us']:13.1f} "
            f"{ratio(row, 'vs_kafka'):>9} {ratio(row, 'broker_cpu_vs_kafka'):>12}"
        )


if __name__ == "__main__":
    raise SystemExit(main())
