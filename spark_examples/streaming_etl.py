"""Streaming ETL: orders in, revenue per product and minute out, bad records set aside.

    python -m spark_examples.streaming_etl --bootstrap 127.0.0.1:9092 --output /tmp/etl

    orders ──parse (schema)──┬─ rejected ──────────────────────────→ orders-dead-letter
                             │   (original record + dlq.reason header)
                             └─ valid ─ watermark ─ window(ts) per product ─┬→ order-revenue
                                                                            └→ Parquet files

Three streaming queries share the parsing and each keeps its own checkpoint under
``--output``/checkpoints, so stopping the job at any moment and starting it again with
the same ``--output`` resumes each of them where it stopped: the Kafka source offsets and
the aggregation state are in the checkpoint, a batch that did not finish runs again.

What a restart guarantees, per sink:

- Parquet (``--output``/revenue): exactly once. The file sink commits each batch's
  files in its ``_spark_metadata`` log; a re-run batch replaces, never adds. Read it with
  ``spark.read.parquet`` (which honours that log), not by listing files.
- Kafka (``order-revenue``): at least once, as Spark's Kafka sink promises. A window's
  row is keyed ``<window start>|<product>`` and carries the same value if written twice,
  so a compacted topic or a consumer that keeps the last value per key sees it once.
- Dead letters: at least once, with the source topic/partition/offset in headers to
  deduplicate by.

Windows are emitted once (append mode) when the watermark, the newest order time seen
minus ``--watermark``, passes their end; orders later than that are dropped, as Spark does.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from spark_examples import connector, orders

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery


@dataclass(frozen=True)
class EtlConfig:
    bootstrap: str
    output: Path
    source: str = "orders"
    sink: str = "order-revenue"
    dead_letter: str = "orders-dead-letter"
    window: str = "1 minute"
    watermark: str = "30 seconds"
    max_offsets_per_trigger: int = 10_000
    # False: run until stopped, a micro-batch every ``interval``; True: process what the
    # topic holds now (in as many batches as the limit above asks), then stop.
    available_now: bool = False
    interval: str = "5 seconds"
    starting_offsets: str = "earliest"

    @property
    def parquet_dir(self) -> Path:
        return self.output / "revenue"

    def checkpoint(self, query: str) -> str:
        return str(self.output / "checkpoints" / query)


def read_orders(spark: SparkSession, cfg: EtlConfig) -> DataFrame:
    """The source topic as a stream of parsed, classified orders."""
    raw = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", cfg.bootstrap)
        .option("subscribe", cfg.source)
        .option("startingOffsets", cfg.starting_offsets)
        .option("includeHeaders", "true")
        .option("maxOffsetsPerTrigger", str(cfg.max_offsets_per_trigger))
        .load()
    )
    return orders.parse_orders(raw)


def revenue_per_window(valid: DataFrame, cfg: EtlConfig) -> DataFrame:
    """Orders, units and revenue per product and event-time window."""
    from pyspark.sql import functions as F

    return (
        valid.withWatermark("ts", cfg.watermark)
        .groupBy(F.window("ts", cfg.window).alias("window"), "product_id")
        .agg(
            F.count("*").alias("orders"),
            F.sum("quantity").alias("units"),
            F.sum("line_total").cast("decimal(18,2)").alias("revenue"),
        )
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "product_id",
            "orders",
            "units",
            "revenue",
        )
    )


def as_kafka_records(revenue: DataFrame) -> DataFrame:
    """One record per window and product, keyed so a rewrite replaces rather than adds."""
    from pyspark.sql import functions as F

    key = F.concat_ws(
        "|", F.date_format("window_start", "yyyy-MM-dd'T'HH:mm:ssXXX"), F.col("product_id")
    )
    return revenue.select(key.alias("key"), F.to_json(F.struct("*")).alias("value"))


def start(spark: SparkSession, cfg: EtlConfig) -> list[StreamingQuery]:
    """Start the three queries (dead letters, Kafka sink, Parquet sink) and return them."""
    parsed = read_orders(spark, cfg)
    revenue = revenue_per_window(orders.valid_orders(parsed), cfg)

    def writer(frame: DataFrame, name: str):  # type: ignore[no-untyped-def]
        w = frame.writeStream.queryName(name).option("checkpointLocation", cfg.checkpoint(name))
        if cfg.available_now:
            return w.trigger(availableNow=True)
        return w.trigger(processingTime=cfg.interval)

    kafka = {"kafka.bootstrap.servers": cfg.bootstrap}
    dead = (
        writer(orders.dead_letters(parsed), "dead-letters")
        .format("kafka")
        .options(**kafka)
        .option("topic", cfg.dead_letter)
        .start()
    )
    to_kafka = (
        writer(as_kafka_records(revenue), "revenue-to-kafka")
        .format("kafka")
        .options(**kafka)
        .option("topic", cfg.sink)
        .outputMode("append")
        .start()
    )
    to_parquet = (
        writer(revenue, "revenue-to-parquet")
        .format("parquet")
        .option("path", str(cfg.parquet_dir))
        .outputMode("append")
        .start()
    )
    return [dead, to_kafka, to_parquet]


def run(spark: SparkSession, cfg: EtlConfig, stop: threading.Event | None = None) -> bool:
    """Run until ``stop`` is set (or, with ``available_now``, until the input read at start
    is done); return whether it finished rather than was stopped. A failed query raises.

    Waiting is in short slices so that a signal handler setting ``stop`` is seen at once:
    a blocking wait inside the JVM cannot be interrupted cleanly.
    """
    stop = stop or threading.Event()
    queries = start(spark, cfg)
    try:
        while not stop.is_set():
            if cfg.available_now:
                if all(query.awaitTermination(1) for query in queries):
                    return True
            elif spark.streams.awaitAnyTermination(1):
                return True  # a query ended without an error: nothing more to wait for
        return False
    finally:
        for query in queries:
            query.stop()


def parse_args(argv: list[str] | None = None) -> EtlConfig:
    parser = argparse.ArgumentParser(
        prog="python -m spark_examples.streaming_etl",
        description="Orders → dead letters, and revenue per product and window to Kafka "
        "and Parquet; restart with the same --output to resume.",
    )
    parser.add_argument("--bootstrap", default="127.0.0.1:9092", help="Kafka bootstrap servers")
    parser.add_argument("--output", type=Path, required=True, help="Parquet and checkpoints")
    parser.add_argument("--source", default="orders", help="topic of JSON orders")
    parser.add_argument("--sink", default="order-revenue", help="topic for window totals")
    parser.add_argument("--dead-letter", default="orders-dead-letter", help="rejected records")
    parser.add_argument("--window", default="1 minute", help="event-time window length")
    parser.add_argument("--watermark", default="30 seconds", help="how late an order may be")
    parser.add_argument("--interval", default="5 seconds", help="micro-batch trigger interval")
    parser.add_argument(
        "--max-offsets-per-trigger", type=int, default=10_000, help="records per micro-batch"
    )
    parser.add_argument(
        "--available-now",
        action="store_true",
        help="process what the topic holds at start, then exit (for scheduled runs)",
    )
    args = parser.parse_args(argv)
    return EtlConfig(
        bootstrap=args.bootstrap,
        output=args.output,
        source=args.source,
        sink=args.sink,
        dead_letter=args.dead_letter,
        window=args.window,
        watermark=args.watermark,
        interval=args.interval,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        available_now=args.available_now,
    )


def main(argv: list[str] | None = None) -> None:
    cfg = parse_args(argv)
    spark = connector.session("kbroker-orders-etl")
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    if not run(spark, cfg, stop):
        # The queries have stopped; their checkpoints hold where each one was.
        print(f"stopped; run again with --output {cfg.output} to resume", file=sys.stderr)


if __name__ == "__main__":
    main()
