"""What every pipeline here shares: a SparkSession that can reach the Kafka connector."""

from __future__ import annotations

import os

from pyspark.sql import SparkSession

# Spark's Kafka source and sink live in a separate artifact; Spark resolves it from a
# Maven repository (or a local ivy cache) by this coordinate unless jars are given.
KAFKA_PACKAGE = os.environ.get(
    "SPARK_KAFKA_PACKAGE", "org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.1"
)


def session(app_name: str) -> SparkSession:
    builder = SparkSession.builder.appName(app_name).master(
        os.environ.get("SPARK_MASTER", "local[2]")
    )
    jars = os.environ.get("SPARK_KAFKA_JARS")  # comma-separated paths, for offline machines
    if jars:
        builder = builder.config("spark.jars", jars)
    else:
        builder = builder.config("spark.jars.packages", KAFKA_PACKAGE)
    return builder.config("spark.sql.shuffle.partitions", "4").getOrCreate()


def bootstrap() -> str:
    return os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092")
