"""Decode Avro records a Confluent serializer wrote, with their schemas from kbroker's
schema registry: a bounded batch read of a topic → Confluent's framing split off (magic
byte 0, 4-byte schema id) → each schema id's records decoded with `from_avro` and that
id's schema, fetched from the registry → one table in the latest version's columns
(fields older versions lack are null) → Parquet.

    python -m spark_examples.avro_registry --topic orders-avro --output /tmp/orders-avro \\
        [--bootstrap 127.0.0.1:9092] [--registry http://127.0.0.1:8081]

Spark's Avro functions live in the spark-avro artifact: `SPARK_AVRO_JAR` names its
jar, else the copy scripts/install-test-tools.sh caches, else (with Maven)
`org.apache.spark:spark-avro_2.13:<spark version>` is resolved.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_examples import connector

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


def avro_jar() -> str | None:
    """The spark-avro jar on this machine, or None (then Maven must provide it)."""
    configured = os.environ.get("SPARK_AVRO_JAR")
    if configured:
        return configured
    cache = Path(
        os.environ.get(
            "KBROKER_SPARK_AVRO", Path.home() / ".cache" / "kbroker-test-tools" / "spark-avro"
        )
    )
    found = sorted(cache.glob("spark-avro_2.13-*.jar"))
    return str(found[-1]) if found else None


def session(app_name: str = "avro-registry", **kwargs: Any) -> SparkSession:
    """A session with the Kafka connector and spark-avro."""
    extra = dict(kwargs.pop("extra", None) or {})
    jar = avro_jar()
    local = connector.local_jars()
    if jar and local:
        extra["spark.jars"] = ",".join([*local, jar])
    elif not local:
        from pyspark import __version__

        package = f"org.apache.spark:spark-avro_2.13:{__version__}"
        extra["spark.jars.packages"] = f"{connector.maven_package()},{package}"
    return connector.session(app_name, extra=extra, **kwargs)


def registry_get(registry: str, path: str) -> Any:
    request = urllib.request.Request(registry.rstrip("/") + path, headers={"Accept": CONTENT_TYPE})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def decode(spark: SparkSession, bootstrap: str, registry: str, topic: str) -> DataFrame:
    """The topic's records decoded: its latest value schema's columns, plus the record's
    `schema_id`, `partition` and `offset`."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    raw = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
        .where(F.substring("value", 1, 1) == F.lit(b"\x00"))
        .select(
            F.conv(F.hex(F.substring("value", 2, 4)), 16, 10).cast("int").alias("schema_id"),
            F.expr("substring(value, 6, length(value) - 5)").alias("payload"),
            "partition",
            "offset",
        )
    )
    raw.cache()
    latest = registry_get(registry, f"/subjects/{topic}-value/versions/latest")
    ids = sorted(row.schema_id for row in raw.select("schema_id").distinct().collect())
    parts = []
    for schema_id in ids:
        writer = registry_get(registry, f"/schemas/ids/{schema_id}?subject={topic}-value")
        parts.append(
            raw.where(F.col("schema_id") == schema_id).select(
                from_avro("payload", writer["schema"]).alias("record"),
                "schema_id",
                "partition",
                "offset",
            )
        )
    columns = [field["name"] for field in json.loads(latest["schema"])["fields"]]
    decoded = None
    for part in parts:
        flat = part.select("record.*", "schema_id", "partition", "offset")
        for name in columns:
            if name not in flat.columns:
                flat = flat.withColumn(name, F.lit(None))
        flat = flat.select(*columns, "schema_id", "partition", "offset")
        decoded = flat if decoded is None else decoded.unionByName(flat)
    if decoded is None:
        return spark.createDataFrame([], "schema_id int, partition int, offset long")
    return decoded


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--registry", default="http://127.0.0.1:8081")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--output", required=True, help="a Parquet directory (replaced)")
    args = parser.parse_args(argv)
    spark = session()
    try:
        table = decode(spark, args.bootstrap, args.registry, args.topic)
        table.write.mode("overwrite").parquet(args.output)
        print(f"{table.count()} records of {args.topic} decoded into {args.output}")
    except OSError as exc:
        print(
            f"avro_registry: cannot reach the registry at {args.registry}: {exc}", file=sys.stderr
        )
        return 1
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
