"""spark_examples.streaming_etl end to end on PySpark against a real kbroker process.

One run of the pipeline serves every test here, as a data engineer would run it: orders
from the generator (simulated event time, a share of bad records) plus one record of
each kind the pipeline must reject go into a two-partition topic. The pipeline is
stopped in the middle of its first run (a micro-batch may be cut short), more orders
arrive, and it is started again on the same checkpoints. Then its three outputs must
hold exactly what the input implies: every window total once in Parquet, the same totals
on the Kafka sink topic, and every rejected record on the dead-letter topic with its
reason in a header.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from compat_tests.broker_process import BrokerProcess, running_broker
from compat_tests.confluent_helpers import create_topic, produce_all, unique_topic
from compat_tests.spark_support import (
    TEST_SPARK_CONF,
    header,
    offsets_of,
    read_topic,
    spark_session_or_skip,
)
from spark_examples import connector, generate_orders, orders, streaming_etl

pytestmark = pytest.mark.timeout(240)

START = datetime(2026, 1, 1, tzinfo=UTC)
PARTITIONS = 2
FIRST_RUN = 90  # generated orders before the first (interrupted) run
SECOND_RUN = 60  # generated orders before the second run

# Records the pipeline must reject, and the reason it must give for each.
GOOD = {
    "order_id": "o-x",
    "customer_id": "c-x",
    "product_id": "p-001",
    "quantity": 1,
    "unit_price": 4.5,
    "currency": "EUR",
    "country": "DE",
    "ts": "2026-01-01T00:02:10Z",
}
MALFORMED: list[tuple[bytes | None, str]] = [
    (
        b'{"order_id": "o-1", "quantity": ',
        "not an order: malformed JSON or a field of the wrong type",
    ),
    (b"\x00\xffnot json at all", "not an order: malformed JSON or a field of the wrong type"),
    (
        json.dumps({**GOOD, "quantity": "two"}).encode(),
        "not an order: malformed JSON or a field of the wrong type",
    ),
    (None, "empty record value"),
    (
        json.dumps({k: v for k, v in GOOD.items() if k != "product_id"}).encode(),
        "missing field product_id",
    ),
    (json.dumps({**GOOD, "quantity": 0}).encode(), "quantity must be positive"),
    (json.dumps({**GOOD, "unit_price": -1}).encode(), "unit_price must not be negative"),
]
# An order far ahead in event time: it moves the watermark past every window before it.
CLOSER = {**GOOD, "order_id": "o-closer", "ts": "2026-01-01T00:10:00Z"}


@dataclass
class EtlOutcome:
    cfg: streaming_etl.EtlConfig
    generated: list[tuple[bytes, bytes]]
    parquet_rows: list[dict[str, Any]]
    second_run_start_offsets: dict[str, int]
    first_run_batches: int
    extra: dict[str, Any] = field(default_factory=dict)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("spark-etl-broker")) as node:
        yield node


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    yield from spark_session_or_skip("test-streaming-etl")


def _generated(count: int, seed: int, start: datetime) -> list[tuple[bytes, bytes]]:
    source = generate_orders.OrderSource(
        random.Random(seed), generate_orders.simulated_clock(start, rate=1.0), bad_ratio=0.1
    )
    records = source.records()
    return [next(records) for _ in range(count)]


def _produce(
    bootstrap: str, topic: str, pairs: Iterable[tuple[bytes | None, bytes | None]]
) -> None:
    produce_all(bootstrap, topic, ({"key": k, "value": v} for k, v in pairs))


def _stop_after_first_batches(queries: list[Any], timeout: float = 120.0) -> int:
    """Stop every query once the Parquet one has committed a batch (others may be mid-batch)."""
    parquet = queries[-1]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if parquet.exception() is not None:
            raise AssertionError(f"ETL query failed: {parquet.exception()}")
        if len(parquet.recentProgress) >= 1:
            break
        time.sleep(0.2)
    else:
        raise AssertionError("the ETL's first run committed no batch")
    for query in queries:
        query.stop()
    return len(parquet.recentProgress)


@pytest.fixture(scope="module")
def outcome(
    spark: Any, broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory
) -> EtlOutcome:
    output: Path = tmp_path_factory.mktemp("etl-output")
    source = unique_topic("orders")
    create_topic(broker.bootstrap, source, partitions=PARTITIONS)
    cfg = streaming_etl.EtlConfig(
        bootstrap=broker.bootstrap,
        output=output,
        source=source,
        sink=unique_topic("order-revenue"),
        dead_letter=unique_topic("orders-dead-letter"),
        watermark="1 minute",
        available_now=True,
        max_offsets_per_trigger=30,
    )
    generated = _generated(FIRST_RUN + SECOND_RUN, seed=11, start=START)
    _produce(broker.bootstrap, source, generated[:FIRST_RUN])

    first = streaming_etl.start(spark, cfg)
    first_run_batches = _stop_after_first_batches(first)

    _produce(broker.bootstrap, source, [*generated[FIRST_RUN:], *((None, v) for v, _ in MALFORMED)])
    _produce(broker.bootstrap, source, [(b"c-x", json.dumps(CLOSER).encode())])
    second_cfg = streaming_etl.EtlConfig(**{**cfg.__dict__, "max_offsets_per_trigger": 100_000})
    second = streaming_etl.start(spark, second_cfg)
    for query in second:
        query.awaitTermination(180)
        assert query.exception() is None, f"{query.name} failed: {query.exception()}"
    parquet_progress = second[-1].recentProgress
    start_offsets = offsets_of(parquet_progress[0]["sources"][0]["startOffset"])[source]
    rows = [row.asDict() for row in spark.read.parquet(str(cfg.parquet_dir)).collect()]
    return EtlOutcome(cfg, generated, rows, start_offsets, first_run_batches)


def _expected_totals(
    generated: list[tuple[bytes, bytes]],
) -> dict[tuple[str, str], tuple[int, int, Decimal]]:
    """(window start, product) → (orders, units, revenue) from the valid generated orders."""
    totals: dict[tuple[str, str], tuple[int, int, Decimal]] = {}
    for _key, value in generated:
        try:
            order = json.loads(value)
        except ValueError:
            continue
        if not all(order.get(name) is not None for name in orders.REQUIRED):
            continue
        if not isinstance(order["quantity"], int) or order["quantity"] <= 0:
            continue
        ts = datetime.fromisoformat(order["ts"].replace("Z", "+00:00"))
        window = ts.replace(second=0, microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
        n, units, revenue = totals.get((window, order["product_id"]), (0, 0, Decimal(0)))
        line = Decimal(str(order["unit_price"])).quantize(Decimal("0.01")) * order["quantity"]
        totals[(window, order["product_id"])] = (n + 1, units + order["quantity"], revenue + line)
    return totals


def test_parquet_output_counts_every_valid_order_once_across_a_restart(outcome: EtlOutcome) -> None:
    got = {
        (
            row["window_start"].replace(tzinfo=UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            row["product_id"],
        ): (
            row["orders"],
            row["units"],
            row["revenue"],
        )
        for row in outcome.parquet_rows
    }
    assert len(got) == len(outcome.parquet_rows), "a window and product written twice"
    assert got == _expected_totals(outcome.generated)


def test_restart_resumes_from_the_checkpointed_offsets(outcome: EtlOutcome) -> None:
    assert outcome.first_run_batches >= 1
    resumed = sum(outcome.second_run_start_offsets.values())
    assert 0 < resumed <= FIRST_RUN


def test_kafka_sink_topic_carries_each_window_total_keyed_by_window_and_product(
    broker: BrokerProcess, outcome: EtlOutcome
) -> None:
    latest: dict[str, dict[str, Any]] = {}
    for record in read_topic(broker.bootstrap, outcome.cfg.sink):
        assert record.key is not None and record.value is not None
        value = json.loads(record.value)
        key = record.key.decode()
        # At least once: a rewrite of a window must repeat its value exactly.
        assert latest.setdefault(key, value) == value
    got = {
        tuple(key.split("|")): (v["orders"], v["units"], Decimal(str(v["revenue"])))
        for key, v in latest.items()
    }
    expected = {k: (n, u, r) for k, (n, u, r) in _expected_totals(outcome.generated).items()}
    assert got == expected


def test_malformed_input_goes_to_the_dead_letter_topic_with_its_reason_in_a_header(
    broker: BrokerProcess, outcome: EtlOutcome
) -> None:
    dead = read_topic(broker.bootstrap, outcome.cfg.dead_letter)
    by_source: dict[tuple[int, int], tuple[bytes | None, str]] = {}
    for record in dead:
        why = header(record, orders.REASON_HEADER)
        assert why, f"dead letter without a {orders.REASON_HEADER} header: {record}"
        assert header(record, "dlq.topic") == outcome.cfg.source.encode()
        where = (
            int(header(record, "dlq.partition") or b"-1"),
            int(header(record, "dlq.offset") or b"-1"),
        )
        by_source[where] = (record.value, why.decode())
    reasons = Counter(by_source.values())
    for value, reason in MALFORMED:
        assert reasons[(value, reason)] == 1, (
            f"{value!r} not dead-lettered as {reason!r}: {reasons}"
        )
    generated_bad = [v for _k, v in outcome.generated if _expected_totals([(b"", v)]) == {}]
    assert len(by_source) == len(MALFORMED) + len(generated_bad)
    assert {value for value, _reason in by_source.values()} >= set(generated_bad)


def test_the_etl_command_stops_on_sigterm_and_says_how_to_resume(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    source = unique_topic("orders-cli")
    create_topic(broker.bootstrap, source)
    _produce(broker.bootstrap, source, _generated(20, seed=3, start=START))
    command = [
        sys.executable, "-m", "spark_examples.streaming_etl",
        "--bootstrap", broker.bootstrap, "--output", str(tmp_path),
        "--source", source, "--sink", unique_topic("rev"), "--dead-letter", unique_topic("dlq"),
        "--interval", "1 second",
    ]  # fmt: skip
    committed = tmp_path / "checkpoints" / "revenue-to-parquet" / "commits" / "0"
    # The test session's JVM settings, through the variable PySpark reads at launch.
    java = TEST_SPARK_CONF["spark.driver.extraJavaOptions"]
    env = {
        **os.environ,
        "PYSPARK_SUBMIT_ARGS": f'--driver-java-options "{java}" --conf spark.ui.enabled=false '
        "--conf spark.sql.shuffle.partitions=2 pyspark-shell",
    }
    with subprocess.Popen(
        command,
        cwd=connector.REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as etl:
        try:
            deadline = time.monotonic() + 120
            while not committed.exists():
                assert etl.poll() is None, (
                    f"the ETL exited early: {etl.stderr.read() if etl.stderr else ''}"
                )
                assert time.monotonic() < deadline, "the ETL committed no batch in 120 s"
                time.sleep(0.5)
            etl.send_signal(signal.SIGTERM)
            _out, err = etl.communicate(timeout=60)
        finally:
            etl.kill()
    assert etl.returncode == 0, err[-3000:]
    assert f"run again with --output {tmp_path} to resume" in err
