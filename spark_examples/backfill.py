"""Batch backfill: re-enrich the orders of a time range and write them back to Kafka.

    python -m spark_examples.backfill --bootstrap 127.0.0.1:9092 \\
        --from 2026-11-24T09:00:00Z --until 2026-11-24T10:00:00Z

A bounded ``spark.read.format("kafka")``: each partition is read from the first record
whose Kafka timestamp is at or after ``--from`` (``startingOffsetsByTimestamp``, which
Spark resolves with ListOffsets by timestamp) up to the first at or after ``--until``
(``endingOffsetsByTimestamp``), or to the end offsets of the moment the job starts
(``endingOffsets=latest``) without ``--until``. A partition with nothing at or after
``--from`` contributes nothing. Valid orders are joined with a static product table
(a CSV given with --products; spark_examples/catalogue.py by default) for name and category, and
written to ``--sink`` keyed by order id; what fails validation is counted and skipped
(the streaming ETL has already dead-lettered it).

Spark's Kafka sink writes with the Java client's idempotent producer, so a retried
request never duplicates a record; a re-run backfill writes its range again, and a
consumer (or a compacted sink topic) keeps the last record per order id.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

from spark_examples import connector, orders
from spark_examples.catalogue import PRODUCTS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True)
class BackfillConfig:
    bootstrap: str
    since: datetime
    until: datetime | None = None
    source: str = "orders"
    sink: str = "orders-enriched"
    products: Path | None = None  # a CSV; None: spark_examples.catalogue


@dataclass(frozen=True)
class BackfillResult:
    read: int  # records in the range
    rejected: int  # not valid orders, skipped
    written: int  # enriched orders written to the sink


def millis(moment: datetime) -> int:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def source_partitions(bootstrap: str, topic: str) -> list[int]:
    """The topic's partition ids (startingOffsetsByTimestamp names every partition)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    described = admin.list_topics(topic=topic, timeout=15).topics.get(topic)
    if described is None or described.error is not None or not described.partitions:
        raise SystemExit(f"topic {topic} not found on {bootstrap}")
    return sorted(described.partitions)


def read_range(spark: SparkSession, cfg: BackfillConfig, partitions: list[int]) -> DataFrame:
    def by_timestamp(moment: datetime) -> str:
        return json.dumps({cfg.source: {str(p): millis(moment) for p in partitions}})

    reader = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", cfg.bootstrap)
        .option("subscribe", cfg.source)
        .option("startingOffsetsByTimestamp", by_timestamp(cfg.since))
        # A partition with no record at or after --from starts at its end: reads nothing.
        .option("startingOffsetsByTimestampStrategy", "latest")
        .option("includeHeaders", "true")
    )
    if cfg.until is not None:
        reader = reader.option("endingOffsetsByTimestamp", by_timestamp(cfg.until))
    else:
        reader = reader.option("endingOffsets", "latest")
    return reader.load()


PRODUCT_SCHEMA = "product_id string, name string, category string, list_price decimal(10,2)"


def load_products(spark: SparkSession, path: Path | None) -> DataFrame:
    """The product table: a CSV with a header row, or the built-in catalogue."""
    if path is not None:
        return spark.read.option("header", "true").csv(str(path), schema=PRODUCT_SCHEMA)
    rows = [(p.product_id, p.name, p.category, Decimal(p.list_price)) for p in PRODUCTS]
    return spark.createDataFrame(rows, schema=PRODUCT_SCHEMA)


def enrich(valid: DataFrame, products: DataFrame) -> DataFrame:
    """Orders with their product's name and category ("unknown" for a product not listed)."""
    from pyspark.sql import functions as F

    joined = valid.join(F.broadcast(products), on="product_id", how="left")
    return joined.select(
        "order_id",
        "customer_id",
        "product_id",
        F.coalesce("name", F.lit("unknown")).alias("product_name"),
        F.coalesce("category", F.lit("unknown")).alias("category"),
        "quantity",
        "unit_price",
        "line_total",
        "currency",
        "country",
        "ts",
    )


def run(spark: SparkSession, cfg: BackfillConfig) -> BackfillResult:
    from pyspark.sql import functions as F

    partitions = source_partitions(cfg.bootstrap, cfg.source)
    parsed = orders.parse_orders(read_range(spark, cfg, partitions)).cache()
    try:
        read = parsed.count()
        rejected = parsed.where(F.col("reason").isNotNull()).count()
        enriched = enrich(orders.valid_orders(parsed), load_products(spark, cfg.products))
        (
            enriched.select(F.col("order_id").alias("key"), F.to_json(F.struct("*")).alias("value"))
            .write.format("kafka")
            .option("kafka.bootstrap.servers", cfg.bootstrap)
            .option("topic", cfg.sink)
            .save()
        )
    finally:
        parsed.unpersist()
    return BackfillResult(read=read, rejected=rejected, written=read - rejected)


def parse_moment(text: str) -> datetime:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def parse_args(argv: list[str] | None = None) -> BackfillConfig:
    parser = argparse.ArgumentParser(
        prog="python -m spark_examples.backfill",
        description="Re-enrich the orders of a time range with a product table and write "
        "them back to Kafka.",
    )
    parser.add_argument("--bootstrap", default="127.0.0.1:9092", help="Kafka bootstrap servers")
    parser.add_argument(
        "--from", dest="since", type=parse_moment, required=True, help="ISO 8601, inclusive"
    )
    parser.add_argument(
        "--until", type=parse_moment, default=None, help="ISO 8601, exclusive (default: now)"
    )
    parser.add_argument("--source", default="orders", help="topic of JSON orders")
    parser.add_argument("--sink", default="orders-enriched", help="topic for enriched orders")
    parser.add_argument(
        "--products", type=Path, help="product table CSV (default: the built-in catalogue)"
    )
    args = parser.parse_args(argv)
    if args.until is not None and args.until <= args.since:
        parser.error("--until must be after --from")
    return BackfillConfig(
        bootstrap=args.bootstrap,
        since=args.since,
        until=args.until,
        source=args.source,
        sink=args.sink,
        products=args.products,
    )


def main(argv: list[str] | None = None) -> None:
    cfg = parse_args(argv)
    result = run(connector.session("kbroker-orders-backfill"), cfg)
    print(
        f"{result.read} records between {cfg.since.isoformat()} and "
        f"{cfg.until.isoformat() if cfg.until else 'now'}: {result.written} enriched orders "
        f"written to {cfg.sink}, {result.rejected} rejected"
    )


if __name__ == "__main__":
    main()
