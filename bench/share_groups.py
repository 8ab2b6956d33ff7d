"""Share-group consumption (KIP-932 queues) against a classic consumer group.

    .venv/bin/python -m bench.share_groups [--records 200000] [--consumers 1,4,16]

One topic of one partition holds `records` records of 100 bytes. For each consumer
count a fresh share group reads them all with confluent-kafka ShareConsumers (one
thread each, as separate workers would be; implicit acknowledgement, so every record is
accepted by the consumer's next poll, one acknowledgement per record on the broker);
the reference is one classic-group consumer reading the same partition and committing
once at the end. Each figure is records/s from the first subscribe to the last record
received (joining included: a heartbeat for the share group, JoinGroup and SyncGroup
for the classic one, whose initial rebalance delay is set to 0), the median over
`--rounds`, with its ratio to the classic figure of the same run. RabbitMQ is not
measured: neither rabbitmq-server nor an AMQP client is installed on this machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from bench.peers import KbrokerPeer, PeerUnavailable

TIMEOUT_S = 300.0
# A classic group's first rebalance waits this long for more members; it measures
# nothing about reading, so it is off (a share group has no such delay).
OVERRIDES = {"group.initial.rebalance.delay.ms": "0"}
VALUE = b"x" * 100


def prepare(bootstrap: str, records: int) -> str:
    topic = f"share-bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, VALUE)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(60)
    return topic


def share_round(bootstrap: str, topic: str, records: int, consumers: int) -> float:
    group = f"share-bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(
        "GROUP",
        group,
        incremental_configs=[
            ConfigEntry(
                "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET
            )
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    lock = threading.Lock()
    seen = [0]
    done = threading.Event()

    def work() -> None:
        consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
        consumer.subscribe([topic])
        deadline = time.perf_counter() + TIMEOUT_S
        while not done.is_set() and time.perf_counter() < deadline:
            got = sum(1 for m in consumer.poll(0.1) if m.error() is None)
            if got:
                with lock:
                    seen[0] += got
                    if seen[0] >= records:
                        done.set()
        consumer.close()

    threads = [threading.Thread(target=work, daemon=True) for _ in range(consumers)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    done.wait(TIMEOUT_S)
    elapsed = time.perf_counter() - started
    for t in threads:
        t.join(30)
    if seen[0] < records:
        raise TimeoutError(f"{consumers} share consumers read {seen[0]} of {records}")
    return records / elapsed


def classic_round(bootstrap: str, topic: str, records: int) -> float:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"classic-bench-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    started = time.perf_counter()
    consumer.subscribe([topic])
    seen = 0
    deadline = started + TIMEOUT_S
    while seen < records and time.perf_counter() < deadline:
        seen += sum(1 for m in consumer.consume(1000, 0.1) if m.error() is None)
    elapsed = time.perf_counter() - started
    consumer.commit(asynchronous=False)
    consumer.close()
    if seen < records:
        raise TimeoutError(f"classic consumer read {seen} of {records}")
    return records / elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--consumers", default="1,4,16")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.consumers.split(",")]
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="kbroker-share-bench-") as tmp:
        peer = KbrokerPeer("kbroker", Path(tmp), overrides=OVERRIDES)
        try:
            peer.start()
            topic = prepare(peer.bootstrap, args.records)
            classic = statistics.median(
                classic_round(peer.bootstrap, topic, args.records) for _ in range(args.rounds)
            )
            rows.append({"reader": "classic group, 1 consumer", "records_s": classic, "ratio": 1.0})
            print(f"{'classic group, 1 consumer':28} {classic:10.0f} records/s", flush=True)
            for n in counts:
                rate = statistics.median(
                    share_round(peer.bootstrap, topic, args.records, n) for _ in range(args.rounds)
                )
                label = f"share group, {n} consumers"
                rows.append({"reader": label, "records_s": rate, "ratio": rate / classic})
                print(f"{label:28} {rate:10.0f} records/s  {rate / classic:5.2f}x", flush=True)
        except PeerUnavailable as exc:
            print(f"kbroker skipped: {exc}")
        finally:
            peer.stop()
    if args.json:
        args.json.write_text(
            json.dumps({"settings": vars(args) | {"json": str(args.json)}, "rows": rows}, indent=1)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
