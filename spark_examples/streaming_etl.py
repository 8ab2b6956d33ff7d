"""Streaming ETL: orders in, revenue per product, currency and minute out, bad records set aside.

    python -m spark_examples.streaming_etl --bootstrap 127.0.0.1:9092 --output /tmp/etl

    orders ─parse (schema)─┬─ rejected ─────────────────────────────────────┐
                           │   (original record + dlq.reason header)        │ one query,
                           └─ valid ─ watermark ─ drop duplicate order_ids ─┤ one offset
                                      ─ window(ts) per product and currency ┘ range a batch
                                                                            │
                      foreachBatch ─┬→ orders-dead-letter (rejected records)
                                    ├→ order-revenue (window totals, keyed)
                                    └→ Parquet, one directory per batch

One streaming query with one checkpoint (``--output``/checkpoints/orders-etl) feeds
every sink: each micro-batch is one range of source offsets, both branches (revenue
and dead letters) are computed from it, and ``foreachBatch`` writes the batch's rows to
the three sinks, so they advance together. (Spark executes the two branches of the
plan as two scans of that same range; a query cannot share one scan between a
stateful and a stateless branch.) Stopping the job at any moment and starting it again
with the same ``--output`` resumes where it stopped: the source offsets and the
deduplication and aggregation state are in the checkpoint, and a batch that did not
finish runs again with the same input and state, so it produces the same output.

The figures are right for an at-least-once producer and a shop that sells in several
currencies:

- Revenue is summed per currency (EUR, GBP and USD are kept apart, never added), so a
  row is (window, product, currency) → orders, units, revenue in that currency.
- An order produced twice (a producer retry, a replayed batch) is counted once: orders
  are deduplicated by ``order_id`` within the watermark
  (``dropDuplicatesWithinWatermark``); a copy arriving later than the watermark is
  dropped as late data, as every late order is.

What a restart guarantees, per sink:

- Parquet (``--output``/revenue): exactly once. Each batch's rows are written to a
  staging directory and renamed to ``revenue/batch_id=<n>`` (replacing what an earlier
  attempt of the same batch left), so a re-run batch replaces, never adds. Read it with
  ``spark.read.parquet`` (``batch_id`` becomes a column; directories starting with
  ``_`` are skipped).
- Kafka (``order-revenue``): at least once, as Spark's Kafka sink promises. A window's
  row is keyed ``<window start>|<product>|<currency>`` and carries the same value if
  written twice, so a compacted topic or a consumer that keeps the last value per key
  sees it once.
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

QUERY_NAME = "orders-etl"
REVENUE, DEAD_LETTER = "revenue", "dead-letter"  # the kinds of row the one query emits
REVENUE_COLUMNS = (
    "window_start",
    "window_end",
    "product_id",
    "currency",
    "orders",
    "units",
    "revenue",
)


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
    """Orders, units and revenue per product, currency and event-time window, each
    order_id counted once within the watermark."""
    from pyspark.sql import functions as F

    return (
        valid.withWatermark("ts", cfg.watermark)
        .dropDuplicatesWithinWatermark(["order_id"])
        .groupBy(F.window("ts", cfg.window).alias("window"), "product_id", "currency")
        .agg(
            F.count("*").alias("orders"),
            F.sum("quantity").alias("units"),
            F.sum("line_total").cast("decimal(18,2)").alias("revenue"),
        )
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "product_id",
            "currency",
            "orders",
            "units",
            "revenue",
        )
    )


def as_kafka_records(revenue: DataFrame) -> DataFrame:
    """One record per window, product and currency, keyed so a rewrite replaces rather
    than adds."""
    from pyspark.sql import functions as F

    key = F.concat_ws(
        "|",
        F.date_format("window_start", "yyyy-MM-dd'T'HH:mm:ssXXX"),
        F.col("product_id"),
        F.col("currency"),
    )
    return revenue.select(key.alias("key"), F.to_json(F.struct("*")).alias("value"))


def etl_stream(spark: SparkSession, cfg: EtlConfig) -> DataFrame:
    """The one stream the query runs: window totals and rejected records of the same
    source offsets, told apart by ``kind``."""
    from pyspark.sql import functions as F

    parsed = read_orders(spark, cfg)
    revenue = revenue_per_window(orders.valid_orders(parsed), cfg)
    dead = orders.dead_letters(parsed)
    return revenue.withColumn("kind", F.lit(REVENUE)).unionByName(
        dead.withColumn("kind", F.lit(DEAD_LETTER)), allowMissingColumns=True
    )


def write_parquet_batch(batch: DataFrame, directory: str, batch_id: int) -> None:
    """Write one batch's rows as ``directory/batch_id=<n>``, whole or not at all: into
    a staging directory first, then renamed into place (through Hadoop's FileSystem, so
    any path Spark can write works), replacing an earlier attempt of the same batch."""
    spark = batch.sparkSession
    jvm = spark._jvm  # type: ignore[attr-defined]
    hadoop_path = jvm.org.apache.hadoop.fs.Path
    target = hadoop_path(f"{directory}/batch_id={batch_id}")
    staging = hadoop_path(f"{directory}/_staging/batch_id={batch_id}")
    batch.write.mode("overwrite").parquet(staging.toString())
    fs = target.getFileSystem(spark._jsc.hadoopConfiguration())  # type: ignore[attr-defined]
    if fs.exists(target):
        fs.delete(target, True)
    if not fs.rename(staging, target):
        raise OSError(f"could not rename {staging.toString()} to {target.toString()}")


def write_batch(cfg: EtlConfig, batch: DataFrame, batch_id: int) -> None:
    """foreachBatch: one micro-batch of the stream to its three sinks."""
    from pyspark.sql import functions as F

    batch.persist()
    try:
        kafka = {"kafka.bootstrap.servers": cfg.bootstrap}
        dead = batch.where(F.col("kind") == DEAD_LETTER).select("key", "value", "headers")
        if not dead.isEmpty():
            dead.write.format("kafka").options(**kafka).option("topic", cfg.dead_letter).save()
        revenue = batch.where(F.col("kind") == REVENUE).select(*REVENUE_COLUMNS)
        if revenue.isEmpty():
            return
        write_parquet_batch(revenue, str(cfg.parquet_dir), batch_id)
        as_kafka_records(revenue).write.format("kafka").options(**kafka).option(
            "topic", cfg.sink
        ).save()
    finally:
        batch.unpersist()


def start(spark: SparkSession, cfg: EtlConfig) -> StreamingQuery:
    """Start the query (one source, one checkpoint, three sinks) and return it."""
    writer = (
        etl_stream(spark, cfg)
        .writeStream.queryName(QUERY_NAME)
        .option("checkpointLocation", cfg.checkpoint(QUERY_NAME))
        .outputMode("append")
        .foreachBatch(lambda batch, batch_id: write_batch(cfg, batch, batch_id))
    )
    if cfg.available_now:
        return writer.trigger(availableNow=True).start()
    return writer.trigger(processingTime=cfg.interval).start()


def run(spark: SparkSession, cfg: EtlConfig, stop: threading.Event | None = None) -> bool:
    """Run until ``stop`` is set (or, with ``available_now``, until the input read at start
    is done); return whether it finished rather than was stopped. A failed query raises.

    Waiting is in short slices so that a signal handler setting ``stop`` is seen at once:
    a blocking wait inside the JVM cannot be interrupted cleanly.
    """
    stop = stop or threading.Event()
    query = start(spark, cfg)
    try:
        while not stop.is_set():
            if query.awaitTermination(1):
                return True  # it ended without an error: nothing more to wait for
        return False
    finally:
        query.stop()


def parse_args(argv: list[str] | None = None) -> EtlConfig:
    parser = argparse.ArgumentParser(
        prog="python -m spark_examples.streaming_etl",
        description="Orders → dead letters, and revenue per product, currency and window "
        "(each order_id counted once) to Kafka and Parquet; restart with the same --output "
        "to resume.",
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
        # The query has stopped; its checkpoint holds where it was.
        print(f"stopped; run again with --output {cfg.output} to resume", file=sys.stderr)


if __name__ == "__main__":
    main()
