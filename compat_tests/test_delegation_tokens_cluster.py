"""Delegation tokens on a 3-node cluster: a token created through one node authenticates
on every node (each derives its HMAC from the shared secret), and it outlives a kill -9
of the active controller: the new controller has it, renews it and purges nothing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from compat_tests.broker_process import free_port
from compat_tests.cluster import KafkaCluster
from compat_tests.test_delegation_tokens import create, renew, token_works
from compat_tests.waiting import eventually
from kbroker.admin.client import BrokerConnection
from kbroker.admin.security import ClientSecurity

pytestmark = pytest.mark.timeout(240)

JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'


class Address:
    """What token_works needs of a broker: its SASL_PLAINTEXT address."""

    def __init__(self, port: int) -> None:
        self.port = port

    def address(self, listener: str) -> str:
        return f"127.0.0.1:{self.port}"


@pytest.fixture(scope="module")
def tokens_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KafkaCluster, dict]]:
    cluster = KafkaCluster(
        tmp_path_factory.mktemp("tokens-cluster"),
        3,
        {
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            "delegation.token.secret.key": "cluster-token-secret",
        },
    )
    ports: dict[int, int] = {}
    for node in cluster.nodes:
        port = ports[node.node_id] = free_port()
        node.overrides["listeners"] += f",SASL_PLAINTEXT://127.0.0.1:{port}"
        node.overrides["advertised.listeners"] += f",SASL_PLAINTEXT://127.0.0.1:{port}"
    try:
        cluster.start()
        cluster.wait_for_controller()
        yield cluster, ports
    finally:
        cluster.kill_all()


def alice(port: int) -> BrokerConnection:
    security = ClientSecurity(
        protocol="SASL_PLAINTEXT", mechanism="PLAIN", username="alice", password="alice-secret"
    )
    conn = BrokerConnection("127.0.0.1", port, 10.0, "tokens-cluster", security)
    return conn.negotiate().authenticate(security)


def test_a_token_works_on_every_node_and_outlives_the_active_controller(tokens_cluster):
    cluster, ports = tokens_cluster
    with alice(ports[1]) as conn:
        made = create(conn)
        assert int(made.error_code) == 0
    mac = bytes(made.hmac)
    for node_id, port in ports.items():
        eventually(
            lambda p=port: token_works(Address(p), made.token_id, mac),
            timeout=30,
            what=f"the token accepted by node {node_id}",
        )
    controller = cluster.wait_for_controller()
    cluster.kill(controller)
    survivors = [n for n in ports if n != controller]
    cluster.wait_for_controller(exclude=(controller,))
    for node_id in survivors:
        assert token_works(Address(ports[node_id]), made.token_id, mac), node_id

    def renewed() -> bool:
        with alice(ports[survivors[0]]) as conn:
            return int(renew(conn, mac, 60_000).error_code) == 0

    eventually(renewed, timeout=30, what="a renewal through the new controller")
