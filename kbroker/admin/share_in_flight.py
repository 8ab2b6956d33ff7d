"""Records in flight in a share group's share-partitions, as each partition's leader
counts them.

Acquired records live only in the memory of the data partition's leader (the share
coordinator stores them as available, since locks do not outlive the leader), and no
Kafka API reports them: Kafka shows them as the leader's SharePartitionMetrics. A
kbroker leader exports them on its `/metrics` as
`kbroker_share_partition_in_flight_records{group,topic,partition}`; this module finds
each leader's HTTP address (its `http.listeners`, by DescribeConfigs on that broker)
and reads the gauge there. A leader without an HTTP listener, or one that does not
answer, leaves its partitions unknown (None).
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Sequence

from prometheus_client.parser import text_string_to_metric_families

from kbroker.admin.client import ClientError, Cluster
from kbroker.admin.topics import metadata
from kbroker.config.listeners import parse_http_listener

DESCRIBE_CONFIGS = 32
BROKER_RESOURCE = 4
IN_FLIGHT_GAUGE = "kbroker_share_partition_in_flight_records"
HTTP_TIMEOUT_S = 5.0

TopicPartition = tuple[str, int]


def in_flight_records(
    cluster: Cluster, group_id: str, partitions: Sequence[TopicPartition]
) -> dict[TopicPartition, int | None]:
    """Records acquired and not yet acknowledged, per share-partition of the group, as
    its leader counts them (0 where the leader holds no records of the group there);
    None where the leader cannot be asked."""
    if not partitions:
        return {}
    md = metadata(cluster, sorted({t for t, _ in partitions}))
    brokers = {b.node_id: (b.host, b.port) for b in md.brokers}
    leaders: dict[TopicPartition, int] = {
        (t.name, p.partition): p.leader for t in md.topics for p in t.partitions
    }
    by_leader: dict[int, list[TopicPartition]] = {}
    for tp in partitions:
        by_leader.setdefault(leaders.get(tp, -1), []).append(tp)
    found: dict[TopicPartition, int | None] = dict.fromkeys(partitions)
    for leader, led in by_leader.items():
        if leader not in brokers:
            continue
        counts = _leader_counts(cluster, leader, *brokers[leader], group_id)
        if counts is not None:
            found.update({tp: counts.get(tp, 0) for tp in led})
    return found


def _leader_counts(
    cluster: Cluster, node_id: int, host: str, port: int, group_id: str
) -> dict[TopicPartition, int] | None:
    url = _metrics_url(cluster, node_id, host, port)
    if url is None:
        return None
    try:
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as answer:
            text = answer.read().decode()
    except (OSError, urllib.error.URLError):
        return None
    counts: dict[TopicPartition, int] = {}
    for family in text_string_to_metric_families(text):
        if family.name != IN_FLIGHT_GAUGE:
            continue
        for sample in family.samples:
            labels = sample.labels
            if labels.get("group") == group_id:
                counts[(labels["topic"], int(labels["partition"]))] = int(sample.value)
    return counts


def _metrics_url(cluster: Cluster, node_id: int, host: str, port: int) -> str | None:
    """The broker's first `http.listeners` address; a wildcard host is the broker's own."""
    try:
        response = cluster.connection(host, port).call(
            DESCRIBE_CONFIGS,
            {
                "resources": [
                    {
                        "resource_type": BROKER_RESOURCE,
                        "resource_name": str(node_id),
                        "configuration_keys": ["http.listeners"],
                    }
                ],
                "include_synonyms": False,
                "include_documentation": False,
            },
            versions=(1, 4),
        )
    except (ClientError, OSError):
        return None
    for result in response.results:
        if int(result.error_code) != 0:
            return None
        for entry in result.configs:
            if entry.name != "http.listeners" or not entry.value:
                continue
            first = entry.value.split(",")[0]
            try:
                endpoint = parse_http_listener(first)
            except ValueError:
                return None
            address = host if endpoint.is_wildcard or not endpoint.host else endpoint.host
            if ":" in address:
                address = f"[{address}]"
            return f"http://{address}:{endpoint.port}/metrics"
    return None
