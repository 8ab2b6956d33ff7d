"""Order generator: realistic JSON orders into a topic at a set rate, with a progress bar.

    python -m spark_examples.generate_orders --bootstrap 127.0.0.1:9092 --rate 200 --count 10000

Customers follow a long tail (a few buy often), products have fixed prices, quantities
are mostly 1-2, and a small share of orders arrive late (event time behind the clock),
as from a mobile app that was offline. ``--bad-ratio`` mixes in records a pipeline must
reject (malformed JSON, a missing field, a negative quantity) to exercise its dead-letter
path. ``--start`` replaces the wall clock with simulated time that advances by
1/rate per order, so a run is reproducible with ``--seed``.

Records are keyed by customer and produced with the idempotent producer (acks=all).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from spark_examples import catalogue

# (product id, unit price) of each product in the catalogue.
PRODUCTS = [(p.product_id, p.list_price) for p in catalogue.PRODUCTS]
COUNTRIES = [("DE", "EUR"), ("FR", "EUR"), ("NL", "EUR"), ("GB", "GBP"), ("US", "USD")]
CUSTOMERS = 500
LATE_SHARE = 0.02  # orders whose event time lags the clock by up to LATE_MAX
LATE_MAX = timedelta(seconds=20)

BAD_RECORDS: list[Callable[[dict[str, object]], bytes]] = [
    lambda order: json.dumps(order).encode()[:-7],  # cut short: not JSON
    lambda order: json.dumps({k: v for k, v in order.items() if k != "product_id"}).encode(),
    lambda order: json.dumps({**order, "quantity": -abs(int(str(order["quantity"])))}).encode(),
    lambda order: json.dumps({**order, "quantity": "two"}).encode(),
]


@dataclass
class OrderSource:
    """Endless orders; ``clock`` gives each one's event time."""

    rng: random.Random
    clock: Callable[[], datetime]
    bad_ratio: float = 0.0
    serial: int = 0

    def order(self) -> dict[str, object]:
        self.serial += 1
        product, price = self.rng.choice(PRODUCTS)
        country, currency = self.rng.choice(COUNTRIES)
        # Pareto-ish: low customer numbers buy far more often than high ones.
        customer = min(int(self.rng.paretovariate(1.2)), CUSTOMERS)
        placed = self.clock()
        if self.rng.random() < LATE_SHARE:
            placed -= LATE_MAX * self.rng.random()
        return {
            "order_id": f"o-{self.serial:08d}",
            "customer_id": f"c-{customer:04d}",
            "product_id": product,
            "quantity": self.rng.choices([1, 2, 3, 5], weights=[70, 20, 7, 3])[0],
            "unit_price": float(price),
            "currency": currency,
            "country": country,
            "ts": placed.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        }

    def records(self) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) pairs: orders, and now and then one a pipeline must reject."""
        while True:
            order = self.order()
            key = str(order["customer_id"]).encode()
            if self.bad_ratio and self.rng.random() < self.bad_ratio:
                yield key, self.rng.choice(BAD_RECORDS)(order)
            else:
                yield key, json.dumps(order).encode()


def simulated_clock(start: datetime, rate: float) -> Callable[[], datetime]:
    """Event time that starts at ``start`` and advances 1/rate seconds per call."""
    step = timedelta(seconds=1 / rate)
    state = {"now": start - step}

    def tick() -> datetime:
        state["now"] += step
        return state["now"]

    return tick


def wall_clock() -> datetime:
    return datetime.now(UTC)


def produce(
    bootstrap: str,
    topic: str,
    count: int,
    rate: float,
    source: OrderSource,
    progress: bool = True,
) -> int:
    """Produce ``count`` records (0: until Ctrl-C) at ``rate`` per second; return how many
    the broker acknowledged. Pacing sleeps to a schedule, so a slow moment is caught up
    rather than lost; on Ctrl-C the records already sent are still delivered."""
    from confluent_kafka import KafkaException, Producer
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20}
    )
    acked = 0
    failed: list[str] = []

    def on_delivery(err, _msg) -> None:  # type: ignore[no-untyped-def]
        nonlocal acked
        if err is None:
            acked += 1
        else:
            failed.append(str(err))

    columns = (
        TextColumn(f"[bold]{topic}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]:.0f}/s"),
        TimeRemainingColumn(),
    )
    began = time.monotonic()
    with Progress(*columns, disable=not progress, transient=False) as bar:
        task = bar.add_task("produce", total=count or None, rate=0.0)
        try:
            for sent, (key, value) in enumerate(source.records(), start=1):
                while True:
                    try:
                        producer.produce(topic, key=key, value=value, on_delivery=on_delivery)
                        break
                    except BufferError:  # the local queue is full: let deliveries drain
                        producer.poll(0.1)
                producer.poll(0)
                delay = began + sent / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                if sent % max(1, int(rate // 10)) == 0 or sent == count:
                    elapsed = max(time.monotonic() - began, 1e-6)
                    bar.update(task, completed=sent, rate=sent / elapsed)
                if count and sent >= count:
                    break
        except KeyboardInterrupt:
            pass  # Ctrl-C stops producing; what was sent is still delivered below
        remaining = producer.flush(30)
    if failed or remaining:
        raise KafkaException(f"{len(failed)} records failed, {remaining} unsent: {failed[:3]}")
    return acked


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m spark_examples.generate_orders",
        description="Produce realistic JSON orders at a set rate.",
    )
    parser.add_argument("--bootstrap", default="127.0.0.1:9092", help="Kafka bootstrap servers")
    parser.add_argument("--topic", default="orders")
    parser.add_argument("--rate", type=float, default=100.0, help="records per second")
    parser.add_argument("--count", type=int, default=0, help="records to produce (0: forever)")
    parser.add_argument(
        "--bad-ratio", type=float, default=0.0, help="share of records a pipeline must reject"
    )
    parser.add_argument("--seed", type=int, default=None, help="random seed, for repeatable runs")
    parser.add_argument(
        "--start",
        type=datetime.fromisoformat,
        default=None,
        help="simulated event time to start at (ISO 8601), advancing 1/rate per order",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    if args.rate <= 0:
        parser.error("--rate must be positive")
    if not 0 <= args.bad_ratio <= 1:
        parser.error("--bad-ratio must be between 0 and 1")
    start = args.start
    if start is not None and start.tzinfo is None:
        start = start.replace(tzinfo=UTC)
    clock = simulated_clock(start, args.rate) if start else wall_clock
    source = OrderSource(random.Random(args.seed), clock, args.bad_ratio)
    acked = produce(args.bootstrap, args.topic, args.count, args.rate, source, not args.quiet)
    print(f"{acked} records acknowledged on {args.topic}")


if __name__ == "__main__":
    main()
