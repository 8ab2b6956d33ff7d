"""Dynamic broker configs (KIP-226) on a running 3-node cluster, as kafka-configs.sh and
the Admin clients change them: the cluster-wide default (BROKER resource "") and one
broker's own (BROKER "<id>"), recorded in the metadata log and applied by every node
without a restart, and still in force after every node restarted.

Each family has a test that fails when a node does not apply the change: a topic whose
three partitions are led by the three nodes shows the topic defaults (max.message.bytes,
min.insync.replicas, segment and retention sizes); raw sockets from 127.0.0.2 meet the
connection limits of each node; a new TLS connection to each node's SSL listener sees
the certificate rotated onto it; a new SASL/PLAIN user logs in on each node; each node's
BROKER_LOGGER resource shows the level logging.levels set.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

from compat_tests.broker_process import free_port, stored_batches
from compat_tests.cluster import KafkaCluster
from compat_tests.java_driver import JavaDriver
from compat_tests.tls_material import TlsMaterial, make_tls_material
from kbroker.admin.client import cluster as admin_cluster
from kbroker.admin.configs import describe_configs

pytestmark = pytest.mark.timeout(300)

TOPIC = "dyn-config"
GZIP = 1  # a batch's codec, its attributes & 7
USERS = {"admin": "admin-secret"}


def jaas(users: dict[str, str]) -> str:
    accepted = " ".join(f'user_{name}="{password}"' for name, password in users.items())
    return f"org.apache.kafka.common.security.plain.PlainLoginModule required {accepted};"


class DynamicCluster:
    """Three nodes, each with an SSL and a SASL_PLAINTEXT listener besides PLAINTEXT."""

    def __init__(self, root: Path) -> None:
        self.first = make_tls_material(root / "tls-first")
        self.second = make_tls_material(root / "tls-second")
        self.cluster = KafkaCluster(
            root,
            3,
            {
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(self.first.broker_keystore),
                "sasl.enabled.mechanisms": "PLAIN",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas(USERS),
                "log.retention.check.interval.ms": "200",
                "replica.lag.time.max.ms": "3000",
            },
        )
        self.ssl_ports: dict[int, int] = {}
        self.sasl_ports: dict[int, int] = {}
        for node in self.cluster.nodes:
            ssl_port = self.ssl_ports[node.node_id] = free_port()
            sasl_port = self.sasl_ports[node.node_id] = free_port()
            extra = f",SSL://127.0.0.1:{ssl_port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}"
            node.overrides["listeners"] += extra
            node.overrides["advertised.listeners"] += extra

    java: JavaDriver | None = None

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.cluster.bootstrap})

    def set_default(
        self,
        set_: dict[str, str] | None = None,
        delete: tuple[str, ...] = (),
        validate_only: bool = False,
    ) -> None:
        """IncrementalAlterConfigs on the cluster default (kafka-configs --entity-default:
        confluent-kafka cannot name the resource "", the Java AdminClient can)."""
        assert self.java is not None
        self.java.call(
            "alter-configs",
            broker="",
            set=set_ or {},
            delete=list(delete) or None,
            validate_only=validate_only,
        )

    def default_refusal(self, set_: dict[str, str]) -> str:
        assert self.java is not None
        failure = self.java.fails("alter-configs", broker="", set=set_)
        assert failure.error == "InvalidRequestException", failure
        return str(failure)

    def describe_default(self) -> dict[str, Any]:
        """The cluster default's entries but min.insync.replicas: once a test sets it
        there it stays, since with ELR kept it cannot be removed (as in Kafka)."""
        assert self.java is not None
        configs = self.java.call("describe-configs", broker="", synonyms=True)["configs"]
        return {n: e for n, e in configs.items() if n != "min.insync.replicas"}


@pytest.fixture(scope="module")
def dyn(tmp_path_factory: pytest.TempPathFactory, java4_classpath: str) -> Iterator[DynamicCluster]:
    root = tmp_path_factory.mktemp("dynamic-config")
    started = DynamicCluster(root)
    try:
        started.cluster.start()
        started.java = JavaDriver(java4_classpath, started.cluster.bootstrap, root / "java.log")
        started.java.start()
        admin = started.admin()
        # Partition p is led by node p + 1: every node leads one.
        assignment = [[1, 2, 3], [2, 3, 1], [3, 1, 2]]
        admin.create_topics([NewTopic(TOPIC, num_partitions=3, replica_assignment=assignment)])[
            TOPIC
        ].result(30)
        started.cluster.wait_for_full_isr(TOPIC, timeout=30)
        yield started
    finally:
        if started.java is not None:
            started.java.stop()
        started.cluster.kill_all()


def wait_until(predicate: Callable[[], Any], what: str, timeout: float = 20.0) -> Any:
    return KafkaCluster.wait_until(predicate, timeout, what)


def alter(
    admin: AdminClient,
    broker: str,
    set_: dict[str, str] | None = None,
    delete: tuple[str, ...] = (),
    validate_only: bool = False,
) -> None:
    entries = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
        for k, v in (set_ or {}).items()
    ] + [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in delete]
    resource = ConfigResource(ResourceType.BROKER, broker, incremental_configs=entries)
    admin.incremental_alter_configs([resource], validate_only=validate_only)[resource].result(20)


def refusal(admin: AdminClient, broker: str, set_: dict[str, str], **kw: Any) -> KafkaError:
    with pytest.raises(KafkaException) as refused:
        alter(admin, broker, set_, **kw)
    return refused.value.args[0]


def describe(admin: AdminClient, resource: ConfigResource) -> dict[str, ConfigEntry]:
    return admin.describe_configs([resource], request_timeout=20)[resource].result(20)


def produce_one(
    dyn: DynamicCluster, partition: int, size: int, acks: str = "all"
) -> KafkaError | None:
    """Send one record of `size` bytes to TOPIC's partition; its error, None if stored."""
    outcome: list[KafkaError | None] = []
    producer = Producer(
        {
            "bootstrap.servers": dyn.cluster.bootstrap,
            "acks": acks,
            "message.max.bytes": 10_000_000,
            "retries": 0,
            "enable.idempotence": False,
            "message.timeout.ms": 15000,
        }
    )
    producer.produce(
        TOPIC, b"x" * size, partition=partition, on_delivery=lambda err, _msg: outcome.append(err)
    )
    producer.flush(20)
    assert outcome, "no delivery report"
    return outcome[0]


def every_leader_refuses(dyn: DynamicCluster, size: int, code: int) -> bool:
    errors = [produce_one(dyn, p, size) for p in range(3)]
    return all(e is not None and e.code() == code for e in errors)


def every_leader_accepts(dyn: DynamicCluster, size: int) -> bool:
    return all(produce_one(dyn, p, size) is None for p in range(3))


# -- topic defaults ------------------------------------------------------------------------


def test_cluster_default_message_max_bytes_applies_on_every_leader(dyn: DynamicCluster) -> None:
    admin = dyn.admin()
    assert every_leader_accepts(dyn, 4000)
    dyn.set_default({"message.max.bytes": "2000"})
    try:
        wait_until(
            lambda: every_leader_refuses(dyn, 4000, KafkaError.MSG_SIZE_TOO_LARGE),
            "every leader to refuse a batch over the new message.max.bytes",
        )
        topic = describe(admin, ConfigResource(ResourceType.TOPIC, TOPIC))
        entry = topic["max.message.bytes"]
        assert entry.value == "2000"
        assert entry.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
        default = dyn.describe_default()
        assert {n: (e["value"], e["source"]) for n, e in default.items()} == {
            "message.max.bytes": ("2000", "DYNAMIC_DEFAULT_BROKER_CONFIG")
        }
    finally:
        dyn.set_default(delete=("message.max.bytes",))
    wait_until(lambda: every_leader_accepts(dyn, 4000), "every leader to take 4000 bytes again")
    assert dyn.describe_default() == {}


def test_min_insync_replicas_default_guards_every_leader(dyn: DynamicCluster) -> None:
    dyn.set_default({"min.insync.replicas": "4"})
    try:
        wait_until(
            lambda: every_leader_refuses(dyn, 10, KafkaError.NOT_ENOUGH_REPLICAS),
            "every leader to refuse acks=all below min.insync.replicas=4",
        )
        assert produce_one(dyn, 0, 10, acks="1") is None
        # With ELR kept (every new cluster) Kafka's controller refuses to remove the
        # cluster default and to set a broker's own value: INVALID_CONFIG.
        assert dyn.java is not None
        failure = dyn.java.fails("alter-configs", broker="", delete=["min.insync.replicas"])
        assert failure.error == "InvalidConfigurationException", failure
        assert "Cluster-level min.insync.replicas cannot be removed while ELR is enabled." in (
            str(failure)
        )
        error = refusal(dyn.admin(), "2", {"min.insync.replicas": "1"})
        assert error.code() == KafkaError.INVALID_CONFIG
        assert "Broker-level min.insync.replicas cannot be altered while ELR is enabled." in (
            error.str()
        )
    finally:
        dyn.set_default({"min.insync.replicas": "1"})
    wait_until(lambda: every_leader_accepts(dyn, 10), "acks=all to be accepted again")


def test_segment_and_retention_defaults_delete_old_segments_on_every_leader(
    dyn: DynamicCluster,
) -> None:
    # The smallest segment Kafka 4 allows (1 MiB) holds one of these records, not two.
    dyn.set_default({"log.segment.bytes": "1048576", "log.retention.bytes": "2097152"})
    try:
        for _ in range(5):
            for p in range(3):
                assert produce_one(dyn, p, 600_000) is None

        def log_starts() -> list[int] | None:
            consumer_cfg = {"bootstrap.servers": dyn.cluster.bootstrap, "group.id": "dyn-ret"}
            consumer = Consumer(consumer_cfg)
            try:
                starts = [
                    consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[0]
                    for p in range(3)
                ]
            finally:
                consumer.close()
            return starts if all(s > 0 for s in starts) else None

        wait_until(log_starts, "every leader to delete segments past log.retention.bytes")
    finally:
        dyn.set_default(delete=("log.segment.bytes", "log.retention.bytes"))


def test_compression_type_default_recompresses_on_every_leader(dyn: DynamicCluster) -> None:
    def newest_codecs() -> set[int]:
        # Every replica of every partition: followers store the leader's batches.
        return {
            stored_batches(node, TOPIC, p)[-1].attributes & 0x07
            for node in dyn.cluster.nodes
            for p in range(3)
        }

    dyn.set_default({"compression.type": "gzip"})
    try:

        def all_gzip() -> bool:
            for p in range(3):
                assert produce_one(dyn, p, 300) is None
            return newest_codecs() == {GZIP}

        wait_until(all_gzip, "every leader to store gzip batches")
    finally:
        dyn.set_default(delete=("compression.type",))


# -- connection limits ---------------------------------------------------------------------


def _open_from(address: str, port: int) -> socket.socket:
    sock = socket.socket()
    sock.bind((address, 0))
    sock.settimeout(5)
    sock.connect(("127.0.0.1", port))
    return sock


def _closed_by_peer(sock: socket.socket) -> bool:
    sock.settimeout(2)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def test_connection_limit_overrides_apply_on_every_node(dyn: DynamicCluster) -> None:
    dyn.set_default({"max.connections.per.ip.overrides": "127.0.0.2:1"})
    try:
        for node in dyn.cluster.nodes:

            def second_refused(port: int = node.port) -> bool:
                first = _open_from("127.0.0.2", port)
                second = _open_from("127.0.0.2", port)
                try:
                    return _closed_by_peer(second) and not _closed_by_peer(first)
                finally:
                    first.close()
                    second.close()

            wait_until(second_refused, f"node {node.node_id} to hold 127.0.0.2 to 1 connection")
    finally:
        dyn.set_default(delete=("max.connections.per.ip.overrides",))
    for node in dyn.cluster.nodes:
        first = _open_from("127.0.0.2", node.port)
        second = _open_from("127.0.0.2", node.port)
        try:
            wait_until(lambda s=second: not _closed_by_peer(s), "two connections again")
        finally:
            first.close()
            second.close()


# -- log levels ----------------------------------------------------------------------------


def test_logging_levels_apply_on_every_node(dyn: DynamicCluster) -> None:
    def level(node: Any) -> str | None:
        # Each node's own BROKER_LOGGER resource (kbroker's client: confluent-kafka
        # cannot name that resource type).
        with admin_cluster(node.bootstrap) as one:
            entries = describe_configs(one, "broker-logger", str(node.node_id))
        return next((e.value for e in entries if e.name == "kbroker.admin"), None)

    assert {level(node) for node in dyn.cluster.nodes} != {"DEBUG"}
    dyn.set_default({"logging.levels": "kbroker.admin=DEBUG"})
    try:
        for node in dyn.cluster.nodes:
            wait_until(lambda n=node: level(n) == "DEBUG", f"node {node.node_id} at DEBUG")
    finally:
        dyn.set_default(delete=("logging.levels",))


# -- TLS certificates and SASL users, per broker -------------------------------------------


def served_certificate(port: int) -> bytes:
    """The DER certificate a new TLS connection to 127.0.0.1:`port` is shown."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def der_of(material: TlsMaterial) -> bytes:
    return ssl.PEM_cert_to_DER_cert(material.broker.cert_text)


def rotate_certificates(dyn: DynamicCluster, material: TlsMaterial) -> None:
    admin = dyn.admin()
    for node in dyn.cluster.nodes:
        alter(
            admin,
            str(node.node_id),
            {"listener.name.ssl.ssl.keystore.location": str(material.broker_keystore)},
        )


def sasl_login_works(port: int, user: str, password: str) -> bool:
    admin = AdminClient(
        {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": user,
            "sasl.password": password,
        }
    )
    try:
        admin.list_topics(timeout=5)
        return True
    except KafkaException:
        return False


def test_certificate_rotated_through_alter_configs_is_served_to_new_clients(
    dyn: DynamicCluster,
) -> None:
    old, new = der_of(dyn.first), der_of(dyn.second)
    assert {served_certificate(p) for p in dyn.ssl_ports.values()} == {old}
    rotate_certificates(dyn, dyn.second)
    for node_id, port in dyn.ssl_ports.items():
        wait_until(lambda p=port: served_certificate(p) == new, f"node {node_id}'s new cert")
    admin = dyn.admin()
    own = describe(admin, ConfigResource(ResourceType.BROKER, "1"))
    entry = own["listener.name.ssl.ssl.keystore.location"]
    assert entry.value == str(dyn.second.broker_keystore)
    assert entry.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value


def test_jaas_users_change_per_broker(dyn: DynamicCluster) -> None:
    admin = dyn.admin()
    users = {**USERS, "carol": "carol-secret"}
    for node_id, port in dyn.sasl_ports.items():
        assert not sasl_login_works(port, "carol", "carol-secret")
        alter(
            admin,
            str(node_id),
            {"listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas(users)},
        )
        wait_until(lambda p=port: sasl_login_works(p, "carol", "carol-secret"), "carol's login")


# -- refusals ------------------------------------------------------------------------------


def test_refusals_carry_kafkas_error_and_change_nothing(dyn: DynamicCluster) -> None:
    admin = dyn.admin()
    cases = {
        "log.dirs": "Cannot update these configs dynamically: Set(log.dirs)",
        "ssl.keystore.location": "These security configs can be dynamically updated only "
        "per-listener using the listener prefix: Set(ssl.keystore.location)",
    }
    for name, message in cases.items():
        # With a valid change beside it: the resource is refused whole.
        error = refusal(admin, "1", {name: "/x", "message.max.bytes": "3000"})
        assert error.code() == KafkaError.INVALID_REQUEST
        assert message in error.str()
    error = refusal(admin, "1", {"message.max.bytes": "abc"})
    assert error.code() == KafkaError.INVALID_REQUEST
    assert "Invalid value abc for configuration message.max.bytes" in error.str()
    # A key store that does not load is refused by the broker it names.
    error = refusal(admin, "2", {"listener.name.ssl.ssl.keystore.location": "/nowhere.pem"})
    assert error.code() == KafkaError.INVALID_REQUEST
    assert "cannot load the key store" in error.str()
    message = dyn.default_refusal({"listener.name.ssl.ssl.keystore.location": "/k.pem"})
    assert (
        "Cannot update these configs at default cluster level, broker id must be specified: "
        "Set(listener.name.ssl.ssl.keystore.location)" in message
    )
    # A setting of Kafka's own that kbroker does not have would be stored and do
    # nothing: refused, with Kafka's message when Kafka refuses it too.
    error = refusal(admin, "1", {"max.connection.creation.rate": "10"})
    assert error.code() == KafkaError.INVALID_REQUEST
    assert "kbroker does not apply these Kafka configs: Set(max.connection.creation.rate)" in (
        error.str()
    )
    error = refusal(admin, "1", {"listener.name.ssl.ssl.keystore.password": "secret"})
    assert error.code() == KafkaError.INVALID_REQUEST
    assert "secret" not in error.str()
    error = refusal(admin, "1", {"metadata.log.segment.bytes": "1048576"})
    assert error.code() == KafkaError.INVALID_REQUEST
    assert "Cannot update these configs dynamically: Set(metadata.log.segment.bytes)" in (
        error.str()
    )
    # A name no broker setting has is stored, as Kafka 4.3 stores a custom config for a
    # plugin, and changes nothing a broker runs with; deleting it works too.
    alter(admin, "1", {"no.such.setting": "/x"})
    alter(admin, "1", delete=("no.such.setting",))
    alter(admin, "1", {"message.max.bytes": "3000"}, validate_only=True)
    dyn.set_default({"message.max.bytes": "3000"}, validate_only=True)
    assert dyn.describe_default() == {}
    own = describe(admin, ConfigResource(ResourceType.BROKER, "1"))["message.max.bytes"]
    assert own.source == ConfigSource.DEFAULT_CONFIG.value
    assert every_leader_accepts(dyn, 4000)


def test_kerberos_settings_are_stored_per_broker_and_logged_inert(dyn: DynamicCluster) -> None:
    """Kafka changes its Kerberos settings on one broker at run time, and clients' test
    suites set one as a valid broker config; kbroker, serving no GSSAPI, stores it,
    describes it, and says in its log that it changes nothing. (On the cluster default it
    is refused, as Kafka refuses a per-broker setting there: tests/test_config_broker.py.)"""
    admin = dyn.admin()
    name = "sasl.kerberos.min.time.before.relogin"
    alter(admin, "2", {name: "58000"})
    entry = wait_until(
        lambda: (
            (e := describe(admin, ConfigResource(ResourceType.BROKER, "2"))[name]).value == "58000"
            and e
        ),
        "the value described",
    )
    assert entry.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    wait_until(
        lambda: f"{name} inert in kbroker" in dyn.cluster.node(2).log_text(), "the inert note"
    )
    alter(admin, "2", delete=(name,))


def test_java_admin_client_round_trip(dyn: DynamicCluster) -> None:
    java = dyn.java
    assert java is not None
    java.call("alter-configs", broker="2", set={"log.retention.ms": "7200000"})
    dyn.set_default({"log.retention.ms": "3600000"})
    try:
        configs = java.call("describe-configs", broker="2", synonyms=True)["configs"]
        entry = configs["log.retention.ms"]
        assert entry["value"] == "7200000"
        assert entry["source"] == "DYNAMIC_BROKER_CONFIG"
        assert [s["source"] for s in entry["synonyms"]] == [
            "DYNAMIC_BROKER_CONFIG",
            "DYNAMIC_DEFAULT_BROKER_CONFIG",
            "DEFAULT_CONFIG",
        ]
        assert dyn.describe_default()["log.retention.ms"]["value"] == "3600000"
        topic = java.call("describe-configs", topic=TOPIC, synonyms=True)["configs"]
        assert topic["retention.ms"]["source"] in (
            "DYNAMIC_BROKER_CONFIG",
            "DYNAMIC_DEFAULT_BROKER_CONFIG",
        )
        message = dyn.default_refusal({"log.dirs": "/x"})
        assert "Cannot update these configs dynamically: Set(log.dirs)" in message
    finally:
        java.call("alter-configs", broker="2", delete=["log.retention.ms"])
        dyn.set_default(delete=("log.retention.ms",))


def test_dynamic_configs_survive_a_restart_of_every_node(dyn: DynamicCluster) -> None:
    rotate_certificates(dyn, dyn.second)
    dyn.set_default({"message.max.bytes": "2000"})
    try:
        wait_until(
            lambda: every_leader_refuses(dyn, 4000, KafkaError.MSG_SIZE_TOO_LARGE),
            "message.max.bytes in force",
        )
        for node in dyn.cluster.nodes:
            dyn.cluster.restart(node.node_id)
        dyn.cluster.wait_for_full_isr(TOPIC, timeout=60)
        new = der_of(dyn.second)
        for port in dyn.ssl_ports.values():
            assert served_certificate(port) == new
        for port in dyn.sasl_ports.values():  # test_jaas_users_change_per_broker's user
            assert sasl_login_works(port, "carol", "carol-secret")
        wait_until(
            lambda: every_leader_refuses(dyn, 4000, KafkaError.MSG_SIZE_TOO_LARGE),
            "message.max.bytes in force after the restarts",
        )
    finally:
        dyn.set_default(delete=("message.max.bytes",))
        rotate_certificates(dyn, dyn.first)
