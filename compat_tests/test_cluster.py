"""Three kbroker processes configured with KRaft's settings form one cluster."""

from __future__ import annotations

import pytest

from compat_tests.broker_process import api_versions_round_trip
from compat_tests.cluster import KafkaCluster
from kbroker.admin.client import ClientError


def test_three_nodes_form_one_quorum_with_one_controller(cluster: KafkaCluster) -> None:
    controller = cluster.wait_for_controller()
    for node in cluster.nodes:
        metadata = cluster.metadata(node)
        assert metadata.controller_id == controller
        assert metadata.cluster_id == cluster.metadata().cluster_id
        assert sorted(metadata.brokers) == [1, 2, 3]


def test_every_node_advertises_its_own_plaintext_listener(cluster: KafkaCluster) -> None:
    brokers = cluster.metadata().brokers
    for node in cluster.nodes:
        assert (brokers[node.node_id].host, brokers[node.node_id].port) == (node.host, node.port)


def test_the_controller_listener_does_not_serve_the_kafka_api(cluster: KafkaCluster) -> None:
    node = cluster.nodes[0]
    with pytest.raises(ClientError):
        api_versions_round_trip(node.host, node.controller_port, timeout=3)
