"""docs/compatibility.md: the API versions kbroker serves beside Kafka 4.3's, and the
clients the compatibility tests drive."""

from __future__ import annotations

from dataclasses import dataclass

import kbroker.handlers  # noqa: F401  (registers every handler in APIS)
from kbroker.docs.kafka_apis import KAFKA_APIS, KAFKA_VERSION, KafkaApi
from kbroker.handlers.registry import APIS, Api

_CONVERTING = (0, 1)  # Produce up-converts, Fetch down-converts (protocol/legacy_records.py)


@dataclass(frozen=True, slots=True)
class TestedClient:
    name: str
    version: str
    tests: tuple[str, ...]  # compat_tests/ modules that drive it against real brokers


TESTED_CLIENTS: tuple[TestedClient, ...] = (
    TestedClient(
        "confluent-kafka (librdkafka)",
        "2.6 or newer (PyPI)",
        (
            "test_confluent_produce_consume.py",
            "test_confluent_admin.py",
            "test_confluent_offsets.py",
            "test_transactions.py",
            "test_share_groups.py",
        ),
    ),
    TestedClient(
        "kafka-python",
        "3.0 or newer (PyPI)",
        ("test_kafka_python.py", "test_groups.py", "test_cluster.py"),
    ),
    TestedClient(
        "kafka-python pinned to api_version (0, 9) and (0, 10, 0): message formats v0/v1",
        "3.0 or newer (PyPI)",
        ("test_old_clients.py",),
    ),
    TestedClient(
        "Java client of the generation Kafka 4 dropped (kafka-clients)",
        "0.11.0.3, 1.1.1 and 2.0.1 (Maven Central)",
        ("test_old_java_clients.py",),
    ),
    TestedClient("aiokafka", "0.11 or newer (PyPI)", ("test_aiokafka.py", "test_cluster.py")),
    TestedClient(
        "Java client (kafka-clients)",
        "3.9.1, and 4.3.0 for KafkaShareConsumer",
        ("test_java_client.py", "test_java_cluster.py"),
    ),
    TestedClient("Sarama (Go)", "Debian's golang-github-shopify-sarama-dev", ("test_sarama.py",)),
    TestedClient(
        "franz-go (Go): its own integration suite, pkg/kgo's tests (group and transactional"
        " ETLs under the classic and KIP-848 protocols, share groups, regex subscriptions)",
        "v1.22.3 (Go module proxy)",
        ("test_franz_go.py",),
    ),
    TestedClient("KafkaJS (Node.js)", "2.2.4 (npm)", ("test_kafkajs.py",)),
    TestedClient("kcat", "Debian's kcat", ("test_kcat.py",)),
    TestedClient(
        "Apache Kafka's command-line tools, and Kafka itself side by side",
        "4.3.1 (Maven Central)",
        ("test_kafka_tools.py", "test_kafka_differential.py"),
    ),
    TestedClient(
        "confluent-kafka's Schema Registry client and serializers",
        "2.6 or newer (PyPI)",
        ("test_schema_registry.py", "test_schema_registry_cluster.py"),
    ),
    TestedClient(
        "Spark Structured Streaming Kafka source and sink",
        "PySpark 4.0 with spark-sql-kafka-0-10_2.13 4.0.0",
        (
            "test_spark_kafka_source.py",
            "test_spark_streaming_etl.py",
            "test_spark_batch_pipelines.py",
            "test_spark_cluster_failover.py",
        ),
    ),
)


def _range(low: int, high: int) -> str:
    return f"{low}" if low == high else f"{low}-{high}"


def _kafka_range(api: KafkaApi) -> str:
    if api.removed:
        return "removed"
    text = _range(api.min_version, api.max_version)
    if api.max_stable_version != api.max_version:
        text += f" ({api.max_version} unstable)"
    return text


def _served_range(api: Api) -> str:
    text = _range(api.min_version, api.max_version)
    if api.enabled_by is not None:
        text += f" (with `{api.enabled_by}`)"
    return text


def _note(kafka: KafkaApi, ours: Api | None) -> str:
    if kafka.removed:
        return "Removed in Kafka 4 (ZooKeeper era)."
    if ours is None:
        if kafka.listeners == ("CONTROLLER",):
            return "Between KRaft controllers; kbroker's quorum speaks its own Raft."
        return "Not served."
    notes = []
    if ours.min_version < kafka.min_version:
        notes.append(
            f"{_range(ours.min_version, kafka.min_version - 1).join('vv')[:-1]} served as Kafka "
            "3.9 served them (dropped by Kafka 4, KIP-896)"
            + ("; message formats v0/v1 converted." if kafka.key in _CONVERTING else ".")
        )
    elif ours.min_version > kafka.min_version:
        notes.append(f"Oldest version {ours.min_version}.")
    if ours.max_version < kafka.max_stable_version:
        notes.append(f"Newest version {ours.max_version}.")
    elif ours.max_version > kafka.max_stable_version:
        notes.append(f"Serves unstable v{ours.max_version}.")
    if kafka.key in STATIC_QUORUM_REFUSALS:
        notes.append(STATIC_QUORUM_REFUSALS[kafka.key])
    return " ".join(notes) or "Same."


STATIC_QUORUM_REFUSALS = {
    80: "Adds a voter to a dynamic quorum (KIP-853, docs/cluster.md); a static quorum "
    "(kraft.version 0) refuses it with UNSUPPORTED_VERSION, as Kafka does at that level.",
    81: "Removes a voter from a dynamic quorum (KIP-853, docs/cluster.md); a static quorum "
    "(kraft.version 0) refuses it with UNSUPPORTED_VERSION, as Kafka does at that level.",
}


def api_rows() -> list[str]:
    rows = []
    served = dict(APIS)
    for kafka in KAFKA_APIS:
        ours = served.pop(kafka.key, None)
        rows.append(
            f"| {kafka.key} | {kafka.name} | {_kafka_range(kafka)} | "
            f"{'-' if ours is None else _served_range(ours)} | {_note(kafka, ours)} |"
        )
    for key, ours in sorted(served.items()):  # served, yet unknown to Kafka 4.3
        rows.append(f"| {key} | ? | - | {_served_range(ours)} | Not a Kafka 4.3 API. |")
    return rows


BEGIN = "<!-- BEGIN generated compatibility (make docs) -->"
END = "<!-- END generated compatibility -->"


def render_section() -> str:
    served = sum(1 for api in KAFKA_APIS if api.key in APIS)
    kafka_brokers = [a for a in KAFKA_APIS if "BROKER" in a.listeners]
    lines = [
        BEGIN,
        "",
        "## Clients tested",
        "",
        "Each runs unchanged against real kbroker processes in compat_tests/ (single "
        "nodes and 3-node clusters, with kill -9 of leaders and coordinators):",
        "",
        "| client | version | tests |",
        "| --- | --- | --- |",
        *(
            f"| {c.name} | {c.version} | "
            + ", ".join(f"[{t}](../compat_tests/{t})" for t in c.tests)
            + " |"
            for c in TESTED_CLIENTS
        ),
        "",
        f"## API versions: kbroker against Kafka {KAFKA_VERSION}",
        "",
        f"kbroker serves {served} of Kafka {KAFKA_VERSION}'s {len(KAFKA_APIS)} API keys "
        f"({len(kafka_brokers)} of them are served by Kafka's brokers to clients; the "
        "rest are between KRaft controllers or removed). "
        f"Kafka {KAFKA_VERSION}'s column is each request's `validVersions` "
        "(clients/src/main/resources/common/message/*Request.json, kept in "
        "`kbroker/docs/kafka_apis.py`); a version marked unstable is not advertised by "
        "Kafka unless `unstable.api.versions.enable` is set. kbroker's column is what its "
        "ApiVersions answer advertises (`kbroker/handlers/registry.py`); an API shown "
        "*with* a setting is served only while that setting is true.",
        "",
        f"| key | API | Kafka {KAFKA_VERSION} | kbroker | note |",
        "| --- | --- | --- | --- | --- |",
        *api_rows(),
        "",
        END,
    ]
    return "\n".join(lines)


def with_section(page: str) -> str:
    """``page`` with the text between its markers replaced by the current tables."""
    start, end = page.find(BEGIN), page.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the page has no {BEGIN} ... {END} section")
    return page[:start] + render_section() + page[end + len(END) :]
