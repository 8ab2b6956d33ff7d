"""JSON events in, validated and enriched events out, bad ones to a dead-letter topic.

    python spark_examples/clean_events.py --source events --sink events-clean --dead dead-events

Each micro-batch is written with Kafka's idempotent producer (Spark's default), and
the query's checkpoint records the source offsets, so a restart neither loses nor
repeats a batch's input.
"""

from __future__ import annotations

import argparse

from common import bootstrap, session
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, StringType, StructField, StructType

EVENT = StructType(
    [
        StructField("user", StringType()),
        StructField("action", StringType()),
        StructField("amount", DoubleType()),
    ]
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", default="events")
    parser.add_argument("--sink", default="events-clean")
    parser.add_argument("--dead", default="dead-events")
    parser.add_argument("--checkpoint", default="/tmp/kbroker-clean-events-checkpoint")
    parser.add_argument("--seconds", type=int, default=0)
    args = parser.parse_args()

    spark = session("kbroker-clean-events")
    raw = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap())
        .option("subscribe", args.source)
        .option("startingOffsets", "earliest")
        .load()
    )
    parsed = raw.select("key", "timestamp", F.col("value").cast("string").alias("json")).withColumn(
        "event", F.from_json("json", EVENT)
    )
    valid = F.col("event.user").isNotNull() & F.col("event.action").isNotNull()

    def write_batch(batch, _batch_id: int) -> None:  # type: ignore[no-untyped-def]
        good = batch.where(valid).select(
            F.col("event.user").alias("key"),
            F.to_json(
                F.struct(
                    "event.user",
                    "event.action",
                    F.coalesce("event.amount", F.lit(0.0)).alias("amount"),
                    F.col("timestamp").alias("received_at"),
                )
            ).alias("value"),
        )
        bad = batch.where(~valid).select("key", F.col("json").alias("value"))
        options = {"kafka.bootstrap.servers": bootstrap()}
        good.write.format("kafka").options(**options).option("topic", args.sink).save()
        bad.write.format("kafka").options(**options).option("topic", args.dead).save()

    query = (
        parsed.writeStream.foreachBatch(write_batch)
        .option("checkpointLocation", args.checkpoint)
        .start()
    )
    query.awaitTermination(args.seconds or None)
    query.stop()


if __name__ == "__main__":
    main()
