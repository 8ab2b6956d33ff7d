"""The orders every pipeline here reads: their JSON shape, Spark schema and validation.

An order is one JSON object per Kafka record, keyed by customer::

    {"order_id": "o-000017", "customer_id": "c-0042", "product_id": "p-003",
     "quantity": 2, "unit_price": 19.90, "currency": "EUR", "country": "DE",
     "ts": "2026-11-24T15:00:00.123Z"}

``ts`` is when the order was placed (event time, which windows use); the Kafka record's
own timestamp is when it was produced. Money is a decimal, so sums are exact, and it is
in the order's ``currency``: amounts in different currencies are never added together.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

# Fields an order cannot do without, checked in this order for the dead-letter reason.
REQUIRED = ("order_id", "customer_id", "product_id", "quantity", "unit_price", "currency", "ts")
CORRUPT = "_corrupt_record"
REASON_HEADER = "dlq.reason"
HEADERS_TYPE = "array<struct<key:string,value:binary>>"  # the Kafka source's and sink's


def order_schema() -> StructType:
    """The Spark schema of an order, with a column that keeps text that is not one."""
    from pyspark.sql.types import (
        DecimalType,
        IntegerType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    return StructType(
        [
            StructField("order_id", StringType()),
            StructField("customer_id", StringType()),
            StructField("product_id", StringType()),
            StructField("quantity", IntegerType()),
            StructField("unit_price", DecimalType(10, 2)),
            StructField("currency", StringType()),
            StructField("country", StringType()),
            StructField("ts", TimestampType()),
            StructField(CORRUPT, StringType()),
        ]
    )


def parse_orders(records: DataFrame) -> DataFrame:
    """Kafka rows (key, value, topic, partition, offset, ...) → one column per order field,
    the Kafka columns kept, and ``reason``: why the record is not a usable order, or null.

    Parsing is PERMISSIVE: text that is not JSON, or whose fields have the wrong type,
    keeps its row with the raw text in ``_corrupt_record`` instead of failing the query.
    """
    from pyspark.sql import functions as F

    text = F.col("value").cast("string")
    order = F.from_json(
        text, order_schema(), {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}
    )
    parsed = records.withColumn("order", order).select("*", "order.*").drop("order")
    return parsed.withColumn("reason", rejection_reason())


def rejection_reason() -> Column:
    """The first thing wrong with a parsed order, as a sentence for the dead-letter header."""
    from pyspark.sql import functions as F

    reason = F.when(F.col("value").isNull(), F.lit("empty record value")).when(
        F.col(CORRUPT).isNotNull(),
        F.lit("not an order: malformed JSON or a field of the wrong type"),
    )
    for name in REQUIRED:
        reason = reason.when(F.col(name).isNull(), F.lit(f"missing field {name}"))
    return reason.when(F.col("quantity") <= 0, F.lit("quantity must be positive")).when(
        F.col("unit_price") < 0, F.lit("unit_price must not be negative")
    )


def dead_letters(parsed: DataFrame) -> DataFrame:
    """Rejected records as the Kafka sink writes them: original key, value and headers,
    plus headers saying why and where from (``dlq.reason``, ``dlq.topic``,
    ``dlq.partition``, ``dlq.offset``) so an operator can replay or fix them."""
    from pyspark.sql import functions as F

    def header(name: str, value: Column) -> Column:
        return F.struct(
            F.lit(name).alias("key"), value.cast("string").cast("binary").alias("value")
        )

    added = F.array(
        header(REASON_HEADER, F.col("reason")),
        header("dlq.topic", F.col("topic")),
        header("dlq.partition", F.col("partition")),
        header("dlq.offset", F.col("offset")),
    )
    original = F.coalesce(F.col("headers"), F.array().cast(HEADERS_TYPE))
    return parsed.where(F.col("reason").isNotNull()).select(
        "key", "value", F.concat(original, added).alias("headers")
    )


def valid_orders(parsed: DataFrame) -> DataFrame:
    """Orders that passed validation, with their line total."""
    from pyspark.sql import functions as F

    return parsed.where(F.col("reason").isNull()).select(
        "order_id",
        "customer_id",
        "product_id",
        "quantity",
        "unit_price",
        "currency",
        "country",
        "ts",
        (F.col("quantity") * F.col("unit_price")).cast("decimal(14,2)").alias("line_total"),
    )
