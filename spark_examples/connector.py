"""Where Spark finds its Kafka connector, and the SparkSession every pipeline here starts.

Spark's Kafka source and sink are not part of PySpark: they live in the
``spark-sql-kafka-0-10`` artifact, which needs ``kafka-clients`` and a few jars beside
it. A machine that reaches Maven lets Spark resolve them (``spark.jars.packages``); one
that does not hands Spark the jar files (``spark.jars``). In order of preference:

1. ``SPARK_KAFKA_JARS``: comma-separated jar paths, given by the user;
2. the jars this project's machines keep outside the repository: Spark's connector in
   ``../shared/spark-jars/`` (beside the repository) and the Kafka Java client that
   ``scripts/install-test-tools.sh`` caches (``KBROKER_KAFKA_JARS`` moves it);
3. ``SPARK_KAFKA_PACKAGE`` resolved from Maven, by default the connector of the
   installed PySpark's version.

The tests use the same resolution, minus Maven: they run only with local jars.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REPO = Path(__file__).resolve().parent.parent
SHARED_CONNECTOR_DIR = REPO.parent / "shared" / "spark-jars"
KAFKA_CLIENT_JARS = ("kafka-clients", "slf4j-api", "lz4-java", "snappy-java", "zstd-jni")


def kafka_client_dir() -> Path:
    """The Kafka Java client and its runtime jars, as scripts/install-test-tools.sh leaves them."""
    default = Path.home() / ".cache" / "kbroker-test-tools" / "kafka-java"
    return Path(os.environ.get("KBROKER_KAFKA_JARS", default))


def local_jars() -> list[str]:
    """The jar files Spark needs for Kafka, from ``SPARK_KAFKA_JARS`` or this machine's
    shared copies; empty when any of them is missing (then only Maven can help)."""
    configured = os.environ.get("SPARK_KAFKA_JARS", "").strip()
    if configured:
        return [part.strip() for part in configured.split(",") if part.strip()]
    connector = sorted(str(p) for p in SHARED_CONNECTOR_DIR.glob("*.jar"))
    if not any("spark-sql-kafka" in Path(p).name for p in connector):
        return []
    client = [kafka_client_dir() / f"{name}.jar" for name in KAFKA_CLIENT_JARS]
    if not all(p.is_file() for p in client):
        return []
    return connector + [str(p) for p in client]


def maven_package() -> str:
    """The connector's Maven coordinate: ``SPARK_KAFKA_PACKAGE``, else the one matching
    the installed PySpark (the connector must be built for the same Spark and Scala)."""
    configured = os.environ.get("SPARK_KAFKA_PACKAGE")
    if configured:
        return configured
    import pyspark

    return f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}"


def missing_for_local_run() -> str | None:
    """Why Spark cannot run against Kafka from local jars here, or None when it can."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "pyspark is not installed (pip install -e '.[test]')"
    if shutil.which("java") is None:
        return "java not found on PATH (PySpark needs a JRE, 17 or newer)"
    jars = local_jars()
    if not jars:
        return (
            f"Spark's Kafka connector jars are not in {SHARED_CONNECTOR_DIR} or the Kafka "
            f"client jars not in {kafka_client_dir()} (scripts/install-test-tools.sh), "
            "and SPARK_KAFKA_JARS is not set"
        )
    absent = [jar for jar in jars if not Path(jar).is_file()]
    if absent:
        return f"SPARK_KAFKA_JARS names missing files: {', '.join(absent)}"
    return None


def session(
    app_name: str,
    *,
    master: str | None = None,
    shuffle_partitions: int = 4,
    allow_maven: bool = True,
    extra: dict[str, str] | None = None,
) -> SparkSession:
    """A SparkSession that can load ``format("kafka")``.

    Run with ``python``, the session is local (``local[2]``, driver on loopback) unless
    ``SPARK_MASTER`` or ``master`` names a cluster, and finds the connector as this
    module's docstring says. Run by ``spark-submit``, which launched the JVM already,
    the submit command's ``--master``, ``--packages`` and ``--jars`` decide instead.
    """
    from pyspark.sql import SparkSession

    # spark-submit starts the JVM itself and hands PySpark its gateway through these.
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    builder = (
        SparkSession.builder.appName(app_name)
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        # Event times in, window bounds out: all in UTC, whatever the machine's zone.
        .config("spark.sql.session.timeZone", "UTC")
    )
    master = master or os.environ.get("SPARK_MASTER")
    if master:
        builder = builder.master(master)
    elif not submitted:
        builder = (
            builder.master("local[2]")
            .config("spark.driver.host", os.environ.get("SPARK_DRIVER_HOST", "127.0.0.1"))
            .config("spark.driver.bindAddress", os.environ.get("SPARK_DRIVER_BIND", "127.0.0.1"))
        )
    jars = local_jars()
    if submitted:
        pass
    elif jars:
        builder = builder.config("spark.jars", ",".join(jars))
    elif allow_maven:
        builder = builder.config("spark.jars.packages", maven_package())
    else:
        raise RuntimeError(missing_for_local_run() or "no local Kafka connector jars")
    for key, value in (extra or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("SPARK_LOG_LEVEL", "WARN"))
    return spark
