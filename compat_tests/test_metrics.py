"""/metrics of a real broker under stock-client traffic: Kafka's metric names and labels,
and the Grafana dashboard in deploy/grafana asking only for series the broker exports."""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Consumer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from compat_tests.broker_process import BrokerProcess, free_port, running_broker
from compat_tests.confluent_helpers import (
    consume_from_beginning,
    create_topic,
    produce_all,
    unique_group,
    unique_topic,
)
from compat_tests.metrics_scrape import scrape, value
from kbroker.admin.client import BrokerConnection
from kbroker.protocol.one_shot import fetch_fields

pytestmark = pytest.mark.timeout(120)

DASHBOARD = Path(__file__).resolve().parent.parent / "deploy" / "grafana" / "kbroker.json"
ALERTS = Path(__file__).resolve().parent.parent / "deploy" / "prometheus" / "alerts.yml"
RECORDS = 20
VALUE = b"v" * 100


@pytest.fixture(scope="module")
def metered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, str, str]]:
    """A broker with HTTP endpoints; a 2-partition topic with 20 records read back once,
    and a group that committed offset 5 on partition 0."""
    http = f"127.0.0.1:{free_port()}"
    settings = {"http.listeners": f"http://{http}"}
    with running_broker(tmp_path_factory.mktemp("metrics"), settings) as node:
        topic, group = unique_topic("metered"), unique_group("metered")
        create_topic(node.bootstrap, topic, partitions=2)
        produce_all(node.bootstrap, topic, [{"value": VALUE, "partition": 0}] * RECORDS)
        consume_from_beginning(node.bootstrap, topic, RECORDS)
        consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": group})
        consumer.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)
        consumer.close()
        yield node, http, topic


def test_messages_and_bytes_in_are_counted_per_topic_and_in_all(metered):
    node, http, topic = metered
    samples = scrape(http)
    assert (
        value(samples, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == RECORDS
    )
    total = value(samples, "kafka_server_brokertopicmetrics_messagesin_total")
    assert total >= RECORDS
    bytes_in = value(samples, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic)
    assert RECORDS * len(VALUE) < bytes_in < RECORDS * (len(VALUE) + 100)


def test_bytes_out_counts_what_consumers_fetched(metered):
    node, http, topic = metered
    samples = scrape(http)
    bytes_in = value(samples, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic)
    assert value(samples, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic) >= bytes_in


def test_requests_are_counted_and_timed_per_api_with_kafkas_request_names(metered):
    node, http, topic = metered
    samples = scrape(http)
    produced = value(samples, "kafka_network_requestmetrics_requests_total", request="Produce")
    assert produced >= 1
    assert value(samples, "kafka_network_requestmetrics_requests_total", request="ApiVersions") >= 1
    timed = value(samples, "kafka_network_requestmetrics_totaltimems_count", request="Produce")
    assert timed == produced
    inf = value(
        samples, "kafka_network_requestmetrics_totaltimems_bucket", request="Produce", le="+Inf"
    )
    assert inf == timed
    assert value(samples, "kafka_network_requestmetrics_totaltimems_sum", request="Produce") > 0


def test_request_time_is_split_as_kafkas_queue_local_remote_and_send_times(metered):
    node, http, topic = metered
    with BrokerConnection.to(node.bootstrap) as conn:
        conn.negotiate()
        # At the log end a fetch waits out its max wait: 300 ms of remote time.
        fetch = fetch_fields(topic, max_wait=300, min_bytes=1, offset=RECORDS)
        conn.call(1, fetch, versions=(11, 11))
    samples = scrape(http)
    count = value(samples, "kafka_network_requestmetrics_totaltimems_count", request="Fetch")
    parts = 0.0
    for name in ("requestqueuetimems", "localtimems", "remotetimems", "responsesendtimems"):
        series = f"kafka_network_requestmetrics_{name}"
        assert value(samples, f"{series}_count", request="Fetch") == count
        parts += value(samples, f"{series}_sum", request="Fetch")
    total = value(samples, "kafka_network_requestmetrics_totaltimems_sum", request="Fetch")
    assert abs(parts - total) < 1e-6 * max(total, 1.0)
    remote = "kafka_network_requestmetrics_remotetimems_bucket"
    assert value(samples, remote, request="Fetch", le="250.0") < count  # the parked one
    local = "kafka_network_requestmetrics_localtimems_bucket"
    assert value(samples, local, request="Fetch", le="250.0") == count
    produce = "kafka_network_requestmetrics_requestqueuetimems_count"
    assert value(samples, produce, request="Produce") >= 1


def test_event_loop_lag_is_probed(metered):
    node, http, topic = metered
    first = value(scrape(http), "kbroker_event_loop_lag_seconds_count")
    assert first > 0
    deadline = time.monotonic() + 30
    while value(scrape(http), "kbroker_event_loop_lag_seconds_count") <= first:
        assert time.monotonic() < deadline, "the lag probe stopped"
        time.sleep(0.05)
    assert value(scrape(http), "kbroker_event_loop_lag_max_seconds") >= 0


def test_log_size_and_offsets_are_reported_per_partition(metered):
    node, http, topic = metered
    samples = scrape(http)
    assert value(samples, "kafka_log_log_logendoffset", topic=topic, partition="0") == RECORDS
    assert value(samples, "kafka_log_log_logendoffset", topic=topic, partition="1") == 0
    assert value(samples, "kafka_log_log_size", topic=topic, partition="0") > RECORDS * len(VALUE)
    assert value(samples, "kafka_log_log_size", topic=topic, partition="1") == 0


def test_partition_health_gauges_are_zero_on_a_healthy_single_node(metered):
    node, http, topic = metered
    samples = scrape(http)
    assert value(samples, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert value(samples, "kafka_server_replicamanager_underminisrpartitioncount") == 0
    assert value(samples, "kafka_server_replicamanager_reassigningpartitions") == 0
    assert value(samples, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    assert value(samples, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert value(samples, "kafka_server_replicamanager_leadercount") == value(
        samples, "kafka_server_replicamanager_partitioncount"
    )


def test_consumer_lag_is_reported_per_group_and_partition(metered):
    node, http, topic = metered
    samples = scrape(http)
    lags = {
        dict(labels)["consumergroup"]: v
        for (name, labels), v in samples.items()
        if name == "kafka_consumergroup_lag" and dict(labels)["topic"] == topic
    }
    assert list(lags.values()) == [RECORDS - 5]


def test_process_metrics_come_from_prometheus_client(metered):
    node, http, topic = metered
    samples = scrape(http)
    assert value(samples, "process_resident_memory_bytes") > 0
    assert value(samples, "process_open_fds") > 0


# -- the Grafana dashboard ----------------------------------------------------------------

METRIC_NAME = re.compile(r"\b((?:kafka|kbroker|process)_[a-z0-9_]+)")


def dashboard_queries() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    return [
        target["expr"]
        for panel in board["panels"]
        for target in panel.get("targets", [])
        if "expr" in target
    ]


def test_dashboard_is_grafana_json_with_panels_on_a_prometheus_datasource():
    board = json.loads(DASHBOARD.read_text())
    assert board["title"] and board["uid"] and board["schemaVersion"] >= 30
    assert len(board["panels"]) >= 8
    for panel in board["panels"]:
        assert panel["datasource"]["type"] == "prometheus"
        assert panel["targets"], f"panel {panel['title']!r} has no query"


def test_every_dashboard_query_names_metrics_the_broker_exports(metered):
    node, http, topic = metered
    with urllib.request.urlopen(f"http://{http}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    exported = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    asked = {name for expr in dashboard_queries() for name in METRIC_NAME.findall(expr)}
    assert asked, "the dashboard asks for no metrics"
    assert asked - exported == set()


def test_every_alert_rule_names_metrics_the_broker_exports(metered):
    node, http, topic = metered
    with urllib.request.urlopen(f"http://{http}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    exported = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    rules = yaml.safe_load(ALERTS.read_text())
    exprs = [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    asked = {name for expr in exprs for name in METRIC_NAME.findall(expr)}
    assert len(asked) >= 8, asked
    assert asked - exported == set()
