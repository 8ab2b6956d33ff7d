"""What the Spark tests share: one SparkSession per module, and reading a topic whole.

A JVM start costs seconds on this machine, so each Spark test module starts one session
(local[2], two shuffle partitions, no UI, driver on loopback) through the pipelines' own
``spark_examples.connector`` and stops it at the end. The session only uses local jars
(never Maven): without Java, PySpark or the jars the module skips and says which.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from compat_tests.confluent_helpers import Record, consume_from_beginning, watermarks
from spark_examples import connector

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TEST_SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.memory": "768m",
    # Short jobs on two busy cores: the quick C1 compiler only (C2 would pay back on long
    # jobs, not here) and the serial collector halve a module's time on this machine.
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    # Small test inputs: planning and scheduling dominate, not data.
    "spark.default.parallelism": "2",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.streaming.stopTimeout": "30s",
    # The Kafka sink and source reuse producers/consumers; keep their idle JVM threads few.
    "spark.kafka.producer.cache.timeout": "30s",
}


def spark_session_or_skip(app_name: str) -> Iterator[SparkSession]:
    """Body of a module-scoped fixture: the session, stopped at module end."""
    missing = connector.missing_for_local_run()
    if missing:
        pytest.skip(f"Spark tests need Java, PySpark and the Kafka connector jars: {missing}")
    spark = connector.session(
        app_name, shuffle_partitions=2, allow_maven=False, extra=TEST_SPARK_CONF
    )
    # A query stopped mid-batch logs its interrupted job at ERROR; failures reach the test.
    spark.sparkContext.setLogLevel("FATAL")
    try:
        yield spark
    finally:
        spark.stop()


def read_topic(bootstrap: str, topic: str, partitions: int = 1) -> list[Record]:
    """Every record the topic's partitions hold now, read with confluent-kafka."""
    expected = 0
    for partition in range(partitions):
        low, high = watermarks(bootstrap, topic, partition)
        expected += high - low
    if expected == 0:
        return []
    return consume_from_beginning(bootstrap, topic, expected, tuple(range(partitions)))


def offsets_of(progress_offsets: object) -> dict[str, dict[str, int]]:
    """A query progress's source offsets ({topic: {partition: offset}}): PySpark hands
    them over as JSON text or as the text of a Python dict, depending on the version."""
    if isinstance(progress_offsets, dict):
        return progress_offsets
    text = str(progress_offsets)
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = ast.literal_eval(text)
    return {topic: {str(p): int(o) for p, o in parts.items()} for topic, parts in parsed.items()}


def header(record: Record, name: str) -> bytes | None:
    """The last value of header ``name`` on a record (None when absent)."""
    found = None
    for key, value in record.headers or []:
        if key == name:
            found = value
    return found
