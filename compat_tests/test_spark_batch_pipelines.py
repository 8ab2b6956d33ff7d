"""spark_examples.generate_orders and spark_examples.backfill end to end against kbroker.

The generator runs as a user runs it, as a command. The backfill runs on this module's
SparkSession over a four-partition topic whose records carry chosen Kafka timestamps:
an hour before the range, the range itself (on partitions 0 and 1 only), and after it;
partition 3 holds only records from before. So the bounds are resolved by ListOffsets
by timestamp on every partition, including one whose answer is "no such offset".
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from compat_tests.broker_process import BrokerProcess, running_broker, stored_batches
from compat_tests.confluent_helpers import create_topic, produce_all, unique_topic
from compat_tests.spark_support import read_topic, spark_session_or_skip
from spark_examples import backfill, connector, generate_orders, orders
from spark_examples.catalogue import PRODUCTS

pytestmark = pytest.mark.timeout(180)

REPO = connector.REPO
# Three hours ago, on the hour: record timestamps stay within the default retention.
RANGE_START = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
RANGE_END = RANGE_START + timedelta(hours=1)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("spark-batch-broker")) as node:
        yield node


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    yield from spark_session_or_skip("test-batch-pipelines")


def test_generator_produces_valid_orders_at_the_set_rate(broker: BrokerProcess) -> None:
    topic = unique_topic("generated")
    create_topic(broker.bootstrap, topic)
    command = [
        sys.executable, "-m", "spark_examples.generate_orders",
        "--bootstrap", broker.bootstrap, "--topic", topic,
        "--rate", "100", "--count", "150", "--seed", "5", "--start", "2026-01-01T00:00:00",
    ]  # fmt: skip
    began = time.monotonic()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60)
    elapsed = time.monotonic() - began
    assert done.returncode == 0, done.stderr
    assert "150 records acknowledged" in done.stdout
    assert "150/150" in done.stdout, "the progress bar did not reach the count"
    assert elapsed >= 1.5, f"150 records at 100/s took only {elapsed:.2f}s"
    records = read_topic(broker.bootstrap, topic)
    assert len(records) == 150
    for record in records:
        order = json.loads(record.value or b"")
        assert all(order.get(name) is not None for name in orders.REQUIRED), order
        assert order["quantity"] > 0 and order["unit_price"] >= 0
        assert record.key == order["customer_id"].encode()
    assert len({json.loads(r.value or b"")["order_id"] for r in records}) == 150


def test_generator_refuses_a_rate_that_is_not_positive() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "spark_examples.generate_orders", "--rate", "0", "--count", "1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--rate must be positive" in done.stderr


@dataclass
class BackfillOutcome:
    cfg: backfill.BackfillConfig
    result: backfill.BackfillResult
    in_range: list[dict[str, Any]]
    rejected_in_range: int


def _orders_at(start: datetime, count: int, seed: int) -> list[dict[str, Any]]:
    source = generate_orders.OrderSource(
        random.Random(seed), generate_orders.simulated_clock(start, rate=count / 600)
    )
    return [source.order() for _ in range(count)]


def _record(order: dict[str, Any] | bytes, partition: int) -> dict[str, Any]:
    """A record whose Kafka timestamp is the order's event time (or the range start)."""
    if isinstance(order, bytes):
        return {"value": order, "partition": partition, "timestamp": backfill.millis(RANGE_START)}
    placed = datetime.fromisoformat(str(order["ts"]).replace("Z", "+00:00"))
    return {
        "key": str(order["customer_id"]).encode(),
        "value": json.dumps(order).encode(),
        "partition": partition,
        "timestamp": backfill.millis(placed),
    }


@pytest.fixture(scope="module")
def backfilled(spark: Any, broker: BrokerProcess) -> BackfillOutcome:
    source, sink = unique_topic("orders"), unique_topic("orders-enriched")
    create_topic(broker.bootstrap, source, partitions=4)
    before = _orders_at(RANGE_START - timedelta(hours=1), 12, seed=1)
    during = _orders_at(RANGE_START + timedelta(minutes=1), 30, seed=2)
    during.append({**during[0], "order_id": "o-unlisted", "product_id": "p-999"})
    after = _orders_at(RANGE_END + timedelta(minutes=1), 9, seed=3)
    bad = [b"{not json", json.dumps({**during[1], "quantity": 0}).encode()]
    records = [_record(o, i % 4) for i, o in enumerate(before)]
    records += [_record(o, i % 2) for i, o in enumerate(during)]
    records += [_record(b, 0) for b in bad]
    records += [_record(o, i % 3) for i, o in enumerate(after)]
    produce_all(broker.bootstrap, source, records)

    cfg = backfill.BackfillConfig(
        bootstrap=broker.bootstrap, since=RANGE_START, until=RANGE_END, source=source, sink=sink
    )
    result = backfill.run(spark, cfg)
    return BackfillOutcome(cfg, result, during, rejected_in_range=len(bad))


def test_backfill_reads_exactly_the_records_between_its_timestamps(
    backfilled: BackfillOutcome,
) -> None:
    assert backfilled.result.read == len(backfilled.in_range) + backfilled.rejected_in_range
    assert backfilled.result.rejected == backfilled.rejected_in_range


def test_backfill_writes_each_order_of_the_range_enriched_with_its_product(
    broker: BrokerProcess, backfilled: BackfillOutcome
) -> None:
    written = read_topic(broker.bootstrap, backfilled.cfg.sink)
    by_id = {r.key.decode(): json.loads(r.value or b"") for r in written if r.key}
    assert len(written) == len(by_id) == len(backfilled.in_range)
    assert set(by_id) == {o["order_id"] for o in backfilled.in_range}
    catalogue = {p.product_id: p.category for p in PRODUCTS}
    for order in backfilled.in_range:
        out = by_id[order["order_id"]]
        assert out["category"] == catalogue.get(order["product_id"], "unknown")
        assert out["quantity"] == order["quantity"]
        assert float(out["line_total"]) == pytest.approx(order["quantity"] * order["unit_price"])
    assert by_id["o-unlisted"]["product_name"] == "unknown"


def test_backfill_sink_writes_with_the_idempotent_producer(
    broker: BrokerProcess, backfilled: BackfillOutcome
) -> None:
    batches = stored_batches(broker, backfilled.cfg.sink)
    assert batches
    assert all(b.producer_id >= 0 and b.base_sequence >= 0 for b in batches), batches


def test_backfill_refuses_a_range_that_ends_before_it_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_:
        backfill.parse_args(["--from", "2026-03-01T10:00:00Z", "--until", "2026-03-01T09:00:00Z"])
    assert exit_.value.code == 2
    assert "--until must be after --from" in capsys.readouterr().err


def test_pipeline_times_without_a_zone_are_utc() -> None:
    cfg = backfill.parse_args(["--from", "2026-03-01T09:00:00"])
    assert cfg.since == datetime(2026, 3, 1, 9, tzinfo=UTC) and cfg.until is None
