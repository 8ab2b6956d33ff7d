"""Idempotent and transactional produce against kbroker, in one run.

    .venv/bin/python -m bench.transactions [--records 500000] [--transactions 500] [--rounds 3]

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
from bench.peers import KbrokerPeer

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--transactions", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rounds = []
    with tempfile.TemporaryDirectory(prefix="kbroker-txbench-") as tmp:
        peer = KbrokerPeer("kbroker", Path(tmp))
        peer.start()
        try:
            for _ in range(args.rounds):
                row = {
                    "plain_rec_s": bulk(peer.bootstrap, args.records, idempotent=False),
                    "idempotent_rec_s": bulk(peer.bootstrap, args.records, idempotent=True),
                    "txn_s": transactional(peer.bootstrap, args.transactions),
                }
                row["idempotent_over_plain"] = row["idempotent_rec_s"] / row["plain_rec_s"]
                rounds.append(row)
                print(
                    f"plain {row['plain_rec_s']:>10,.0f} rec/s   idempotent "
                    f"{row['idempotent_rec_s']:>10,.0f} rec/s   ratio "
                    f"{row['idempotent_over_plain']:.2f}   100-record transactions "
                    f"{row['txn_s']:>6,.0f}/s",
                    flush=True,
                )
        finally:
            peer.stop()
    summary = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    print(
        f"median: plain {summary['plain_rec_s']:,.0f} rec/s, idempotent "
        f"{summary['idempotent_rec_s']:,.0f} rec/s (ratio {summary['idempotent_over_plain']:.2f}), "
        f"{summary['txn_s']:,.0f} transactions/s = {summary['txn_s'] * 100:,.0f} rec/s"
    )
    if args.json:
        args.json.write_text(json.dumps({"rounds": rounds, "median": summary}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
