"""Streaming word count: lines from one topic, running counts per word to another.

    python spark_examples/word_count.py --source lines --sink word-counts

The sink topic is keyed by word with the count as value, so a compacted topic keeps
exactly the latest count per word.
"""

from __future__ import annotations

import argparse

from common import bootstrap, session
from pyspark.sql import functions as F


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", default="lines")
    parser.add_argument("--sink", default="word-counts")
    parser.add_argument("--checkpoint", default="/tmp/kbroker-word-count-checkpoint")
    parser.add_argument("--seconds", type=int, default=0, help="stop after this long (0: never)")
    args = parser.parse_args()

    spark = session("kbroker-word-count")
    lines = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap())
        .option("subscribe", args.source)
        .option("startingOffsets", "earliest")
        .load()
        .select(F.col("value").cast("string").alias("line"))
    )
    counts = (
        lines.select(F.explode(F.split(F.lower("line"), r"\W+")).alias("word"))
        .where(F.length("word") > 0)
        .groupBy("word")
        .count()
    )
    query = (
        counts.select(F.col("word").alias("key"), F.col("count").cast("string").alias("value"))
        .writeStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap())
        .option("topic", args.sink)
        .option("checkpointLocation", args.checkpoint)
        .outputMode("update")
        .start()
    )
    query.awaitTermination(args.seconds or None)
    query.stop()


if __name__ == "__main__":
    main()
