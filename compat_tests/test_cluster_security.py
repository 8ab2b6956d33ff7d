"""A cluster whose brokers reach each other over a secured listener, as Kafka configures it.

Three nodes (compat_tests/cluster.py) each serve a SASL_SSL listener that is also the
inter-broker listener: followers verify the leader's certificate, offer their own (the
listener requires one) and log in with SASL/PLAIN as `broker`, the username/password of
the listener's JAAS line. The StandardAuthorizer is on and `User:broker` is a super user,
so replica fetches have CLUSTER_ACTION; clients log in as `alice` with ACLs. PLAINTEXT
stays for the harness's readiness probe (as User:ANONYMOUS, which sees no topic).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from compat_tests.broker_process import free_port
from compat_tests.cluster import KafkaCluster
from compat_tests.confluent_helpers import consume_from_beginning, produce_all
from compat_tests.tls_material import TlsMaterial, make_tls_material
from compat_tests.waiting import eventually
from kbroker.admin.client import BrokerConnection
from kbroker.admin.security import ClientSecurity

pytestmark = pytest.mark.timeout(240)

BROKER_PASSWORD = "broker-secret-pw"
WRONG_PASSWORD = "not-the-broker-pw"
USERS = {"broker": BROKER_PASSWORD, "admin": "admin-secret", "alice": "alice-secret"}


def jaas(own_password: str = BROKER_PASSWORD) -> str:
    """The listener's PLAIN line: the broker's own login, then the users it accepts."""
    accepted = " ".join(f'user_{name}="{password}"' for name, password in USERS.items())
    return (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="broker" password="{own_password}" {accepted};'
    )


class SecureCluster:
    def __init__(self, root: Path, tls: TlsMaterial) -> None:
        self.tls = tls
        self.cluster = KafkaCluster(
            root,
            3,
            {
                "inter.broker.listener.name": "SASL_SSL",
                "sasl.mechanism.inter.broker.protocol": "PLAIN",
                "sasl.enabled.mechanisms": "PLAIN",
                "listener.name.sasl_ssl.plain.sasl.jaas.config": jaas(),
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(tls.broker_keystore),
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(tls.ca.cert),
                "listener.name.sasl_ssl.ssl.client.auth": "required",
                "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "super.users": "User:broker;User:admin",
                "replica.lag.time.max.ms": "3000",
                "replica.fetch.backoff.ms": "300",
            },
        )
        self.sasl_ports: dict[int, int] = {}
        for node in self.cluster.nodes:
            port = self.sasl_ports[node.node_id] = free_port()
            settings = node.overrides
            settings["listeners"] += f",SASL_SSL://127.0.0.1:{port}"
            settings["advertised.listeners"] += f",SASL_SSL://127.0.0.1:{port}"

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.sasl_ports.values())

    def client(self, user: str) -> dict[str, str]:
        return {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(self.tls.ca.cert),
            "ssl.certificate.location": str(self.tls.client.cert),
            "ssl.key.location": str(self.tls.client.key),
            "sasl.mechanism": "PLAIN",
            "sasl.username": user,
            "sasl.password": USERS[user],
        }

    def admin(self) -> AdminClient:
        return AdminClient(self.client("admin"))

    def isr(self, topic: str) -> list[int]:
        meta = self.admin().list_topics(topic=topic, timeout=10)
        return sorted(meta.topics[topic].partitions[0].isrs)

    def new_topic(self, replicas: list[int]) -> str:
        name = f"sec-{uuid.uuid4().hex[:10]}"
        admin = self.admin()
        admin.create_topics([NewTopic(name, 1, replica_assignment=[replicas])])[name].result(30)
        return name

    def wait_for_isr(self, topic: str, wanted: list[int], timeout: float = 30.0) -> None:
        def reached() -> bool:
            isr = self.isr(topic)
            assert isr == wanted, f"ISR {isr}"  # the failure shows the last one
            return True

        eventually(
            reached,
            timeout=timeout,
            what=f"the ISR of {topic} to be {wanted}",
            interval=0.3,
        )


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureCluster]:
    base = tmp_path_factory.mktemp("secure-cluster")
    started = SecureCluster(base / "cluster", make_tls_material(base / "tls"))
    try:
        started.cluster.start()
        started.cluster.wait_for_controller()
        for rtype, name in ((ResourceType.TOPIC, "sec-"), (ResourceType.GROUP, "sec-")):
            for op in (AclOperation.READ, AclOperation.WRITE):
                if rtype is ResourceType.GROUP and op is AclOperation.WRITE:
                    continue
                binding = AclBinding(
                    rtype,
                    name,
                    ResourcePatternType.PREFIXED,
                    "User:alice",
                    "*",
                    op,
                    AclPermissionType.ALLOW,
                )
                admin = started.admin()
                for future in admin.create_acls([binding]).values():
                    future.result(20)
        yield started
    finally:
        started.cluster.kill_all()


def test_followers_replicate_over_the_sasl_ssl_listener_into_the_isr(
    secure: SecureCluster,
) -> None:
    topic = secure.new_topic([1, 2, 3])
    secure.wait_for_isr(topic, [1, 2, 3])
    records = [{"value": f"r{i}".encode()} for i in range(200)]
    produce_all(secure.bootstrap, topic, records, **{**secure.client("alice"), "acks": "all"})
    group = f"sec-{uuid.uuid4().hex[:8]}"
    read = consume_from_beginning(
        secure.bootstrap, topic, 200, **{**secure.client("alice"), "group.id": group}
    )
    assert [r.value for r in read] == [r["value"] for r in records]
    assert secure.isr(topic) == [1, 2, 3]
    # Every replica holds the records: the followers fetched them over SASL_SSL.
    for node in secure.cluster.nodes:
        log_dir = node.data_dir / f"{topic}-0"
        assert sum(f.stat().st_size for f in log_dir.glob("*.log")) > 200 * 10, node.node_id


def test_a_client_without_credentials_is_refused_on_the_inter_broker_listener(
    secure: SecureCluster,
) -> None:
    tls_only = ClientSecurity(
        protocol="SSL",
        ca_file=secure.tls.ca.cert,
        cert_file=secure.tls.client.cert,
        key_file=secure.tls.client.key,
    )
    port = secure.sasl_ports[1]
    with BrokerConnection("127.0.0.1", port, 5.0, security=tls_only) as conn:
        conn.send(conn.request_bytes(3, 12, b"\x01\x00\x01\x00", 7))  # Metadata, no login
        assert conn.closed_by_broker(5.0)
    log = secure.cluster.node(1).log_text()
    assert "unexpected metadata request before SASL authentication" in log


def test_a_wrong_inter_broker_password_keeps_the_follower_out_of_the_isr_with_one_log_line(
    secure: SecureCluster,
) -> None:
    node3 = secure.cluster.node(3)
    good = dict(node3.overrides)
    try:
        node3.restart({"listener.name.sasl_ssl.plain.sasl.jaas.config": jaas(WRONG_PASSWORD)})
        topic = secure.new_topic([1, 2, 3])
        secure.wait_for_isr(topic, [1, 2])
        node1 = secure.cluster.node(1)
        refused = "authentication failed for connection from"
        refused_before = node1.log_text().count(refused)
        produce_all(
            secure.bootstrap,
            topic,
            [{"value": b"x"}] * 10,
            **{**secure.client("alice"), "acks": "all"},
        )
        secure.cluster.wait_until(  # several more refused retries
            lambda: node1.log_text().count(refused) >= refused_before + 3,
            30,
            "three more logins of broker 3 refused by broker 1",
        )
        assert secure.isr(topic) == [1, 2]
        # What the broker logged since this start (the harness's first line is its command).
        said = node3.log_text().rsplit("===== start #", 1)[-1].split("\n", 1)[1]
        refusals = re.findall(r"cannot replicate from broker 1: .*", said)
        assert len(refusals) == 1, refusals
        assert (
            "refused the SASL PLAIN login of broker user 'broker': "
            "Authentication failed: Invalid username or password" in refusals[0]
        )
        assert WRONG_PASSWORD not in said and BROKER_PASSWORD not in said
    finally:
        node3.overrides = good
        node3.restart()
    secure.wait_for_isr(topic, [1, 2, 3])
    producer = Producer({**secure.client("alice"), "acks": "all"})
    producer.produce(topic, b"after the fix")
    assert producer.flush(20) == 0


def test_a_certificate_rotated_dynamically_reaches_the_inter_broker_client_side(
    secure: SecureCluster, tmp_path: Path
) -> None:
    """Kept last: it moves the whole cluster to a new CA. The new certificates and trust
    stores are set per broker (IncrementalAlterConfigs, as kafka-configs.sh does), the
    old CA is then dropped from every trust store, and a kill -9 of node 3 forces new
    inter-broker connections both ways: replication only works if each broker's own
    client side offers its new certificate and trusts the new CA."""
    old, new = secure.tls, make_tls_material(tmp_path / "tls-new", "kbroker test CA 2")
    both = tmp_path / "both-cas.pem"
    both.write_text(old.ca.cert_text + new.ca.cert_text)
    prefix = "listener.name.sasl_ssl.ssl."

    def admin_with(material: TlsMaterial) -> AdminClient:
        config = secure.client("admin")
        config["ssl.ca.location"] = str(both)
        config["ssl.certificate.location"] = str(material.client.cert)
        config["ssl.key.location"] = str(material.client.key)
        return AdminClient(config)

    def set_on_every_broker(admin: AdminClient, name: str, value: str) -> None:
        for node in secure.cluster.nodes:
            entry = ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
            resource = ConfigResource(
                ResourceType.BROKER, str(node.node_id), incremental_configs=[entry]
            )
            for future in admin.incremental_alter_configs([resource]).values():
                future.result(20)

    set_on_every_broker(admin_with(old), prefix + "truststore.location", str(both))
    set_on_every_broker(admin_with(old), prefix + "keystore.location", str(new.broker_keystore))
    set_on_every_broker(admin_with(new), prefix + "truststore.location", str(new.ca.cert))
    secure.tls = new  # clients now need the new CA and a certificate it signed
    secure.cluster.restart(3)  # kill -9: every link to and from node 3 is new
    led_by_3, led_by_1 = secure.new_topic([3, 1, 2]), secure.new_topic([1, 2, 3])
    secure.wait_for_isr(led_by_3, [1, 2, 3])
    secure.wait_for_isr(led_by_1, [1, 2, 3])
    records = [{"value": f"rotated-{i}".encode()} for i in range(50)]
    for topic in (led_by_3, led_by_1):
        produce_all(secure.bootstrap, topic, records, **{**secure.client("alice"), "acks": "all"})
        assert secure.isr(topic) == [1, 2, 3]
    stale = ClientSecurity(
        protocol="SSL", ca_file=new.ca.cert, cert_file=old.client.cert, key_file=old.client.key
    )
    try:  # the old CA is gone from the listener's trust store
        with BrokerConnection("127.0.0.1", secure.sasl_ports[1], 5.0, security=stale) as conn:
            conn.send(conn.request_bytes(18, 0, b"", 1))  # ApiVersions
            refused = conn.closed_by_broker(5.0)
    except OSError:  # ssl.SSLError included: the handshake itself failed
        refused = True
    assert refused
