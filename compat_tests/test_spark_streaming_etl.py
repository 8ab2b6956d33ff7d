"""spark_examples.streaming_etl end to end on PySpark against a real kbroker process.

One run of the pipeline serves every test here, as a data engineer would run it: orders
from the generator (simulated event time, three currencies, a share of bad records) plus
one record of each kind the pipeline must reject go into a two-partition topic. The
pipeline is stopped in the middle of its first run (a micro-batch may be cut short),
more orders arrive, some of them again (as an at-least-once producer sends them), and
it is started again on the same checkpoint. Then its three outputs must hold exactly
what the input implies: every total per window, product and currency once in Parquet,
each order_id counted once, the same totals on the Kafka sink topic, and every rejected
record on the dead-letter topic with its reason in a header.
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
from compat_tests.confluent_helpers import create_topic, produce_all, unique_topic, watermarks
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
    (
        json.dumps({k: v for k, v in GOOD.items() if k != "currency"}).encode(),
        "missing field currency",
    ),
]
# One product in one window sold in two currencies, one order of it produced twice: the
# pipeline must keep EUR and USD apart and count "o-eur-2" once.
MIXED = {**GOOD, "product_id": "p-900", "unit_price": 10.0, "ts": "2026-01-01T00:02:30Z"}
MIXED_ORDERS = [
    {**MIXED, "order_id": "o-eur-1", "currency": "EUR"},
    {**MIXED, "order_id": "o-eur-2", "currency": "EUR"},
    {**MIXED, "order_id": "o-eur-2", "currency": "EUR"},
    {**MIXED, "order_id": "o-usd-1", "currency": "USD", "quantity": 2},
]
MIXED_WINDOW = "2026-01-01T00:02:00Z"
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


def _stop_after_first_batches(query: Any, timeout: float = 120.0) -> int:
    """Stop the query once it has committed a batch (it may be in the middle of the next)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if query.exception() is not None:
            raise AssertionError(f"ETL query failed: {query.exception()}")
        if len(query.recentProgress) >= 1:
            break
        time.sleep(0.2)
    else:
        raise AssertionError("the ETL's first run committed no batch")
    query.stop()
    return len(query.recentProgress)


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

    # Sent again, as a producer retrying after a lost acknowledgement would: the last
    # order of the first run's input (read before the restart or not), and one of the
    # second run's own.
    again = [
        next(pair for pair in reversed(generated[:FIRST_RUN]) if _expected_totals([pair])),
        next(pair for pair in generated[FIRST_RUN + 5 :] if _expected_totals([pair])),
    ]
    _produce(
        broker.bootstrap,
        source,
        [
            *generated[FIRST_RUN:],
            *again,
            *((b"c-x", json.dumps(order).encode()) for order in MIXED_ORDERS),
            *((None, v) for v, _ in MALFORMED),
        ],
    )
    _produce(broker.bootstrap, source, [(b"c-x", json.dumps(CLOSER).encode())])
    second_cfg = streaming_etl.EtlConfig(**{**cfg.__dict__, "max_offsets_per_trigger": 100_000})
    second = streaming_etl.start(spark, second_cfg)
    second.awaitTermination(180)
    assert second.exception() is None, f"the ETL failed: {second.exception()}"
    progress = second.recentProgress
    start_offsets = offsets_of(progress[0]["sources"][0]["startOffset"])[source]
    rows = [row.asDict() for row in spark.read.parquet(str(cfg.parquet_dir)).collect()]
    produced = [
        *generated,
        *again,
        *((b"c-x", json.dumps(order).encode()) for order in MIXED_ORDERS),
    ]  # and CLOSER, whose window the watermark never passes
    outcome = EtlOutcome(cfg, produced, rows, start_offsets, first_run_batches)
    outcome.extra["second_run_progress"] = progress
    outcome.extra["again"] = again
    return outcome


Totals = dict[tuple[str, str, str], tuple[int, int, Decimal]]


def _expected_totals(produced: list[tuple[bytes, bytes]]) -> Totals:
    """(window start, product, currency) → (orders, units, revenue) from the valid
    orders produced, each order_id counted once."""
    totals: Totals = {}
    seen: set[str] = set()
    for _key, value in produced:
        try:
            order = json.loads(value)
        except ValueError:
            continue
        if not all(order.get(name) is not None for name in orders.REQUIRED):
            continue
        if not isinstance(order["quantity"], int) or order["quantity"] <= 0:
            continue
        if order["order_id"] in seen:
            continue
        seen.add(order["order_id"])
        ts = datetime.fromisoformat(order["ts"].replace("Z", "+00:00"))
        window = ts.replace(second=0, microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
        key = (window, order["product_id"], order["currency"])
        n, units, revenue = totals.get(key, (0, 0, Decimal(0)))
        line = Decimal(str(order["unit_price"])).quantize(Decimal("0.01")) * order["quantity"]
        totals[key] = (n + 1, units + order["quantity"], revenue + line)
    return totals


def _parquet_totals(outcome: EtlOutcome) -> Totals:
    return {
        (
            row["window_start"].replace(tzinfo=UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            row["product_id"],
            row["currency"],
        ): (row["orders"], row["units"], row["revenue"])
        for row in outcome.parquet_rows
    }


def test_parquet_output_counts_every_valid_order_once_across_a_restart(outcome: EtlOutcome) -> None:
    got = _parquet_totals(outcome)
    assert len(got) == len(outcome.parquet_rows), "a window, product and currency written twice"
    assert got == _expected_totals(outcome.generated)


def test_currencies_are_kept_apart_and_an_order_sent_twice_is_counted_once(
    outcome: EtlOutcome,
) -> None:
    got = _parquet_totals(outcome)
    assert got[(MIXED_WINDOW, "p-900", "EUR")] == (2, 2, Decimal("20.00"))
    assert got[(MIXED_WINDOW, "p-900", "USD")] == (1, 2, Decimal("20.00"))
    assert {k[2] for k in got} == {"EUR", "GBP", "USD"}
    # The generated orders that were produced twice are in their totals once.
    expected = _expected_totals(outcome.generated)
    for pair in outcome.extra["again"]:
        [key] = _expected_totals([pair])
        assert got[key] == expected[key]
        doubled = _expected_totals([*outcome.generated, (b"", pair[1].replace(b'"o-', b'"x-'))])
        assert got[key] != doubled[key]


def test_one_query_with_one_checkpoint_feeds_every_sink(
    broker: BrokerProcess, outcome: EtlOutcome
) -> None:
    """The three sinks advance together: one query, one checkpoint, one source whose
    last batch ends at the end of the topic."""
    checkpoints = outcome.cfg.output / "checkpoints"
    assert [d.name for d in checkpoints.iterdir()] == [streaming_etl.QUERY_NAME]
    progress = outcome.extra["second_run_progress"]
    assert all(len(p["sources"]) == 1 for p in progress)
    end = offsets_of(progress[-1]["sources"][0]["endOffset"])[outcome.cfg.source]
    topic_end = {
        str(p): watermarks(broker.bootstrap, outcome.cfg.source, p)[1] for p in range(PARTITIONS)
    }
    assert end == topic_end


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
    assert all(v["currency"] == key.split("|")[2] for key, v in latest.items())
    assert got == _expected_totals(outcome.generated)


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
    committed = tmp_path / "checkpoints" / streaming_etl.QUERY_NAME / "commits" / "0"
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
