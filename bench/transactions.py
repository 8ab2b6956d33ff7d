"""Idempotent and transactional produce against kbroker, in one run; with
`--peers kbroker,kafka` against Apache Kafka 4.3 too (one KRaft node, bench.peers.KafkaPeer),
both brokers up and each round run on one then the other (the first alternating), with
the broker's CPU per record and the kbroker/Kafka ratios.

    .venv/bin/python -m bench.transactions [--records 500000] [--transactions 500] [--rounds 3]
                                           [--peers kbroker,kafka]

Rows (medians over rounds, each on a fresh topic of 6 partitions, 100 B values,
acks=all, linger.ms=5, batch.size=1000000, delivery reports only for errors):
  plain        enable.idempotence=false
  idempotent   enable.idempotence=true (sequence numbers checked per batch by the broker)
  transactions `--transactions` transactions of 100 records each, committed one by one
The figure the issue asks for is the idempotent/plain ratio and transactions per second.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.kafka_load import PRODUCER_BULK, produce_rate
from bench.peers import KafkaPeer, KbrokerPeer, Peer, PeerUnavailable
from bench.procs import loadavg

PARTITIONS = 6
VALUE = b"x" * 100


def new_topic(bootstrap: str) -> str:
    topic = f"txbench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        future.result(30)
    return topic


def bulk(bootstrap: str, records: int, idempotent: bool) -> float:
    """Records per second produced and acknowledged."""
    topic = new_topic(bootstrap)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": idempotent, **PRODUCER_BULK}
    )
    return produce_rate(producer, topic, records, VALUE, PARTITIONS)


def transactional(bootstrap: str, transactions: int) -> float:
    """Committed 100-record transactions per second."""
    topic = new_topic(bootstrap)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"txbench-{uuid.uuid4().hex}",
            **PRODUCER_BULK,
        }
    )
    producer.init_transactions(30)
    started = time.perf_counter()
    for t in range(transactions):
        producer.begin_transaction()
        for i in range(100):
            producer.produce(topic, VALUE, partition=(t + i) % PARTITIONS)
        producer.commit_transaction(30)
    return transactions / (time.perf_counter() - started)


ROWS = (("plain", "plain_rec_s"), ("idempotent", "idempotent_rec_s"), ("txn", "txn_s"))


def one_round(peer: Peer, args: argparse.Namespace) -> dict[str, float]:
    """Each row's rate, and the broker's CPU per record (microseconds) while it ran."""
    row: dict[str, float] = {}
    for label, key in ROWS:
        cpu = peer.cpu_seconds()
        if label == "txn":
            row[key] = transactional(peer.bootstrap, args.transactions)
            records = args.transactions * 100
        else:
            row[key] = bulk(peer.bootstrap, args.records, idempotent=label == "idempotent")
            records = args.records
        row[f"{label}_cpu_us"] = (peer.cpu_seconds() - cpu) / records * 1e6
    row["idempotent_over_plain"] = row["idempotent_rec_s"] / row["plain_rec_s"]
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--transactions", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--peers", default="kbroker", help="kbroker, kafka, or both")
    parser.add_argument(
        "--warmup",
        type=int,
        default=1,
        help="uncounted rounds first: a JVM compiles its hot paths in its first seconds",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rounds: dict[str, list[dict[str, float]]] = {}
    loads: list[float] = []
    with tempfile.TemporaryDirectory(prefix="kbroker-txbench-") as tmp:
        peers: list[Peer] = []
        try:
            for name in args.peers.split(","):
                peer: Peer = (
                    KbrokerPeer(name, Path(tmp))
                    if name == "kbroker"
                    else KafkaPeer(name, Path(tmp))
                )
                try:
                    peer.start()  # type: ignore[attr-defined]
                except PeerUnavailable as exc:
                    print(f"{name} skipped: {exc}")
                    continue
                peers.append(peer)
            for round_no in range(-args.warmup, args.rounds):
                for peer in peers if round_no % 2 == 0 else peers[::-1]:
                    loads.append(loadavg())
                    row = one_round(peer, args)
                    if round_no >= 0:
                        rounds.setdefault(peer.name, []).append(row)
                    print(
                        f"{'warm-up ' if round_no < 0 else ''}{peer.name:8} plain {row['plain_rec_s']:>10,.0f} rec/s   idempotent "
                        f"{row['idempotent_rec_s']:>10,.0f} rec/s   ratio "
                        f"{row['idempotent_over_plain']:.2f}   100-record transactions "
                        f"{row['txn_s']:>6,.0f}/s   broker us/rec plain "
                        f"{row['plain_cpu_us']:.1f} idempotent {row['idempotent_cpu_us']:.1f} "
                        f"txn {row['txn_cpu_us']:.1f}",
                        flush=True,
                    )
        finally:
            for peer in peers:
                peer.stop()
    summary = {
        name: {key: statistics.median(r[key] for r in rows) for key in rows[0]}
        for name, rows in rounds.items()
    }
    print(f"load average {min(loads):.1f}-{max(loads):.1f} during the rounds")
    for name, med in summary.items():
        print(
            f"median {name}: plain {med['plain_rec_s']:,.0f} rec/s, idempotent "
            f"{med['idempotent_rec_s']:,.0f} rec/s (ratio {med['idempotent_over_plain']:.2f}), "
            f"{med['txn_s']:,.0f} transactions/s = {med['txn_s'] * 100:,.0f} rec/s; broker CPU "
            f"us/record plain {med['plain_cpu_us']:.1f}, idempotent {med['idempotent_cpu_us']:.1f},"
            f" transactional {med['txn_cpu_us']:.1f}"
        )
    if "kbroker" in summary and "kafka" in summary:
        kb, ka = summary["kbroker"], summary["kafka"]
        print("| row | kbroker/Kafka rate | kbroker/Kafka broker CPU per record |")
        print("| --- | ---: | ---: |")
        for label, key in ROWS:
            print(
                f"| {label} | {kb[key] / ka[key]:.2f}x "
                f"| {kb[label + '_cpu_us'] / ka[label + '_cpu_us']:.2f}x |"
            )
    if args.json:
        args.json.write_text(
            json.dumps({"rounds": rounds, "median": summary, "loadavg": loads}, indent=1)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
