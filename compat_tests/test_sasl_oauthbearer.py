"""SASL/OAUTHBEARER with stock clients: one broker, two SASL listeners.

UNSIGNED checks unsigned tokens (Kafka's default validator, for development) and
requires the scope ``kafka``; SIGNED checks tokens signed by an identity provider
(compat_tests.identity_provider: a JWKS and a client-credentials token endpoint on
127.0.0.1) with Kafka's OAuthBearerValidatorCallbackHandler settings: the JWKS URL, the
expected audience and issuer. The StandardAuthorizer lets the token's principal (alice,
or the Java client's svc-alice) use only topics named for it, so a served request
proves whom the broker took the client for.
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import (
    AclOperation,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from compat_tests.broker_process import BrokerProcess, free_ports, run_admin
from compat_tests.confluent_helpers import read_records
from compat_tests.identity_provider import AUDIENCE, ISSUER, IdentityProvider
from compat_tests.kafka_reference import kafka_unavailable, run_tool_process
from compat_tests.security_broker import allow
from compat_tests.waiting import eventually
from kbroker.admin.client import BrokerConnection, ConnectionClosed
from kbroker.security.jwt import unsigned_token

pytestmark = pytest.mark.timeout(180)

MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
SIGNED_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
SASL_HANDSHAKE, SASL_AUTHENTICATE, METADATA = 17, 36, 3
PRINCIPALS = ("alice", "svc-alice")


class OAuthBroker:
    def __init__(self, node: BrokerProcess, ports: dict[str, int], idp: IdentityProvider) -> None:
        self.node, self.ports, self.idp = node, ports, idp

    def address(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def log_lines(self, text: str) -> list[str]:
        return [line for line in self.node.log_path.read_text().splitlines() if text in line]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OAuthBroker]:
    base = tmp_path_factory.mktemp("oauthbearer")
    with IdentityProvider().serving() as idp:
        node = BrokerProcess(base / "node")
        ports = free_ports(("UNSIGNED", "SIGNED", "REGISTRY"), node.port)
        node.overrides = {
            "listeners": f"PLAINTEXT://127.0.0.1:{node.port},"
            + ",".join(
                f"{name}://127.0.0.1:{port}" for name, port in ports.items() if name != "REGISTRY"
            ),
            "schema.registry.listeners": f"http://127.0.0.1:{ports['REGISTRY']}",
            "schema.registry.authentication.method": "BEARER",
            # The registry checks tokens as a listener named SCHEMA_REGISTRY would.
            "listener.name.schema_registry.oauthbearer.sasl.server.callback.handler.class": (
                SIGNED_HANDLER
            ),
            "listener.name.schema_registry.oauthbearer.sasl.oauthbearer.jwks.endpoint.url": (
                idp.jwks_url
            ),
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,UNSIGNED:SASL_PLAINTEXT,"
            "SIGNED:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "OAUTHBEARER",
            "listener.name.unsigned.oauthbearer.sasl.jaas.config": (
                f'{MODULE} required unsecuredValidatorRequiredScope="kafka";'
            ),
            "listener.name.signed.oauthbearer.sasl.jaas.config": f"{MODULE} required;",
            "listener.name.signed.oauthbearer.sasl.server.callback.handler.class": SIGNED_HANDLER,
            "listener.name.signed.oauthbearer.sasl.oauthbearer.jwks.endpoint.url": idp.jwks_url,
            "sasl.oauthbearer.expected.audience": AUDIENCE,
            "sasl.oauthbearer.expected.issuer": ISSUER,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:ANONYMOUS",  # the PLAINTEXT listener: the tests' admin side
            "group.initial.rebalance.delay.ms": "0",
        }
        node.start()
        admin = AdminClient({"bootstrap.servers": node.bootstrap})
        grants = [
            allow(
                rtype,
                name,
                operation,
                principal=f"User:{name}",
                pattern=ResourcePatternType.PREFIXED,
            )
            for name in PRINCIPALS
            for rtype, operation in (
                (ResourceType.TOPIC, AclOperation.ALL),
                (ResourceType.GROUP, AclOperation.ALL),
            )
        ]
        grants.append(allow(ResourceType.TOPIC, "_schemas", AclOperation.ALL, "User:svc-alice"))
        for future in admin.create_acls(grants).values():
            future.result(20)
        try:
            yield OAuthBroker(node, ports, idp)
        finally:
            node.kill()


def new_topic(broker: OAuthBroker, owner: str = "alice") -> str:
    topic = f"{owner}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.node.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(20)
    return topic


def unsigned_conf(
    broker: OAuthBroker, claims: str = "principal=alice scope=kafka"
) -> dict[str, Any]:
    return {
        "bootstrap.servers": broker.address("UNSIGNED"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "enable.sasl.oauthbearer.unsecure.jwt": True,
        "sasl.oauthbearer.config": claims,
    }


def signed_conf(broker: OAuthBroker, mint: Any) -> dict[str, Any]:
    """librdkafka's oauth_cb: the application hands it a token and its expiry."""

    def token(_config: str) -> tuple[str, float]:
        value = mint()
        payload = value.split(".")[1]
        exp = json.loads(base64.urlsafe_b64decode(payload + "=="))["exp"]
        return value, float(exp)

    return {
        "bootstrap.servers": broker.address("SIGNED"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "oauth_cb": token,
    }


def produce(conf: dict[str, Any], topic: str, values: list[bytes]) -> list[KafkaError | None]:
    errors: list[KafkaError | None] = []
    producer = Producer({**conf, "message.timeout.ms": 10000})
    for value in values:
        producer.produce(topic, value, on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(20)
    return errors


def read_all(conf: dict[str, Any], topic: str, count: int) -> list[bytes]:
    """Read a topic from the start in a group of the token's principal."""
    consumer = Consumer({**conf, "group.id": f"{topic}-group", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        return [r.value for r in read_records(consumer, topic, count, timeout=30)]
    finally:
        consumer.close()


# -- unsigned tokens ---------------------------------------------------------------------------


def test_librdkafka_with_an_unsigned_token_is_served_as_the_tokens_principal(broker):
    topic = new_topic(broker)
    conf = unsigned_conf(broker)
    assert produce(conf, topic, [b"a", b"b", b"c"]) == [None, None, None]
    assert read_all(conf, topic, 3) == [b"a", b"b", b"c"]
    # bob may not write alice's topic: the broker took the token's principal, not any.
    [error] = produce(unsigned_conf(broker, "principal=bob scope=kafka"), topic, [b"x"])
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def raw_login(broker: OAuthBroker, listener: str, token: str) -> tuple[BrokerConnection, Any]:
    conn = BrokerConnection.to(broker.address(listener))
    assert conn.request(SASL_HANDSHAKE, 1, mechanism="OAUTHBEARER").error_code == 0
    message = f"n,,\x01auth=Bearer {token}\x01\x01".encode()
    return conn, conn.request(SASL_AUTHENTICATE, 2, auth_bytes=message)


def test_an_unsigned_token_without_the_required_scope_gets_kafkas_status_then_a_refusal(broker):
    token = unsigned_token({"sub": "alice", "exp": time.time() + 60, "scope": "other"})
    conn, challenge = raw_login(broker, "UNSIGNED", token)
    with conn:
        assert challenge.error_code == 0
        assert json.loads(bytes(challenge.auth_bytes)) == {
            "status": "insufficient_scope",
            "scope": "[kafka]",
        }
        refusal = conn.request(SASL_AUTHENTICATE, 2, auth_bytes=b"\x01")
        assert refusal.error_code == 58  # SASL_AUTHENTICATION_FAILED
        assert conn.closed_by_broker(timeout=10)
    eventually(
        lambda: broker.log_lines("missing a required scope (kafka)"),
        timeout=10,
        what="the refusal's log line",
    )
    assert not broker.log_lines(token)


# -- signed tokens -----------------------------------------------------------------------------


def test_librdkafka_with_a_token_signed_by_the_provider_produces_and_consumes(broker):
    topic = new_topic(broker)
    conf = signed_conf(broker, broker.idp.mint)
    assert produce(conf, topic, [b"s1", b"s2"]) == [None, None]
    assert read_all(conf, topic, 2) == [b"s1", b"s2"]


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("expired", "no longer valid"),
        ("audience", "none of the expected audiences"),
        ("issuer", "not the expected issuer"),
        ("forged", "does not verify"),
        ("unsigned", "not accepted"),
    ],
)
def test_a_token_the_provider_did_not_sign_for_this_cluster_is_refused(broker, case, reason):
    idp = broker.idp
    token = {
        "expired": lambda: idp.mint(lifetime_s=-120),
        "audience": lambda: idp.mint(aud="another-service"),
        "issuer": lambda: idp.mint(iss="https://attacker.test"),
        "forged": lambda: (
            idp.mint().rsplit(".", 1)[0] + "." + idp.mint(sub="admin").rsplit(".", 1)[1]
        ),
        "unsigned": lambda: unsigned_token({"sub": "alice", "exp": time.time() + 60}),
    }[case]()
    before = len(broker.log_lines(reason))
    conn, challenge = raw_login(broker, "SIGNED", token)
    with conn:
        assert json.loads(bytes(challenge.auth_bytes)) == {"status": "invalid_token"}
        assert conn.request(SASL_AUTHENTICATE, 2, auth_bytes=b"\x01").error_code == 58
    eventually(
        lambda: len(broker.log_lines(reason)) > before, timeout=10, what=f"a log line: {reason}"
    )


def test_a_key_the_provider_rotated_in_is_fetched_when_a_token_names_it(broker):
    idp = broker.idp
    fetches = idp.jwks_fetches
    new_key = idp.rotate(f"key-{uuid.uuid4().hex[:6]}")
    topic = new_topic(broker)

    def served() -> bool:
        conn, answer = raw_login(broker, "SIGNED", idp.mint(key=new_key))
        with conn:
            return answer.error_code == 0 and not answer.auth_bytes

    # The first token naming the new key makes the broker fetch the JWKS again at once
    # (refresh.ms is an hour); a retry is then served.
    eventually(served, timeout=20, what="a token of the rotated key accepted")
    assert idp.jwks_fetches > fetches
    conf = signed_conf(broker, lambda: idp.mint(key=new_key))
    assert produce(conf, topic, [b"after-rotation"]) == [None]


def test_the_session_ends_when_the_token_expires(broker):
    conn, answer = raw_login(broker, "SIGNED", broker.idp.mint(lifetime_s=3))
    with conn:
        assert answer.error_code == 0
        lifetime_ms = answer.session_lifetime.total_seconds() * 1000
        assert 1000 < lifetime_ms <= 3000
        assert conn.request(METADATA, 1, topics=[]).brokers  # served within the session
        time.sleep(lifetime_ms / 1000 + 0.3)  # the input: the token's life passes
        with pytest.raises(ConnectionClosed):
            conn.request(METADATA, 1, topics=[])
    assert broker.log_lines("expired without re-authentication")


# -- kafka-python and aiokafka ------------------------------------------------------------------


def python_client_settings(broker: OAuthBroker, provider: Any) -> dict[str, Any]:
    """kafka-python's and aiokafka's settings (the same names) for the SIGNED listener."""
    return {
        "bootstrap_servers": broker.address("SIGNED"),
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "OAUTHBEARER",
        "sasl_oauth_token_provider": provider,
    }


def test_kafka_python_with_a_token_provider_produces_and_consumes(broker):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class Provider(AbstractTokenProvider):
        def token(self) -> str:
            return broker.idp.mint()

    topic = new_topic(broker)
    settings = python_client_settings(broker, Provider())
    producer = KafkaProducer(**settings, acks="all")
    for value in (b"k1", b"k2"):
        producer.send(topic, value).get(timeout=20)
    producer.close()
    consumer = KafkaConsumer(
        topic,
        **settings,
        group_id=f"{topic}-group",
        auto_offset_reset="earliest",
        consumer_timeout_ms=20000,
    )
    got = []
    for message in consumer:
        got.append(message.value)
        if len(got) == 2:
            break
    consumer.close()
    assert got == [b"k1", b"k2"]


def test_aiokafka_with_a_token_provider_produces_and_consumes(broker):
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.abc import AbstractTokenProvider

    class Provider(AbstractTokenProvider):
        async def token(self) -> str:
            return broker.idp.mint()

    topic = new_topic(broker)

    async def round_trip() -> list[bytes]:
        settings = python_client_settings(broker, Provider())
        producer = AIOKafkaProducer(**settings, acks="all")
        await producer.start()
        try:
            for value in (b"a1", b"a2"):
                await producer.send_and_wait(topic, value)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic, **settings, group_id=f"{topic}-group", auto_offset_reset="earliest"
        )
        await consumer.start()
        try:
            got = []
            async with asyncio.timeout(30):
                async for message in consumer:
                    got.append(message.value)
                    if len(got) == 2:
                        return got
            return got
        finally:
            await consumer.stop()

    assert asyncio.run(round_trip()) == [b"a1", b"a2"]


# -- Kafka's own Java client ---------------------------------------------------------------


JAVA = pytest.mark.skipif(kafka_unavailable() is not None, reason=str(kafka_unavailable()))


def java_round_trip(
    broker: OAuthBroker, tmp_path: Path, listener: str, settings: list[str]
) -> list[str]:
    owner = "svc-alice" if listener == "SIGNED" else "alice"
    topic = new_topic(broker, owner)
    config = tmp_path / "client.properties"
    config.write_text(
        "\n".join(["security.protocol=SASL_PLAINTEXT", "sasl.mechanism=OAUTHBEARER", *settings])
        + "\n"
    )
    produced = run_tool_process(
        "org.apache.kafka.tools.ConsoleProducer",
        "--bootstrap-server",
        broker.address(listener),
        "--topic",
        topic,
        "--command-config",
        str(config),
        stdin="one\ntwo\n",
    )
    assert produced.code == 0, produced.err
    consumed = run_tool_process(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        "--bootstrap-server",
        broker.address(listener),
        "--topic",
        topic,
        "--from-beginning",
        "--group",
        f"{owner}-console",
        "--max-messages",
        "2",
        "--timeout-ms",
        "30000",
        "--command-config",
        str(config),
    )
    assert consumed.code == 0, consumed.err
    assert "Processed a total of 2 messages" in consumed.err, consumed.err
    return consumed.out.split()


@JAVA
def test_kafkas_java_client_logs_in_with_its_unsecured_login_module(broker, tmp_path):
    jaas = f'{MODULE} required unsecuredLoginStringClaim_sub="alice" unsecuredLoginStringClaim_scope="kafka";'
    assert java_round_trip(broker, tmp_path, "UNSIGNED", [f"sasl.jaas.config={jaas}"]) == [
        "one",
        "two",
    ]


@JAVA
def test_kafkas_java_client_logs_in_with_a_token_from_the_providers_endpoint(
    broker, tmp_path, monkeypatch
):
    idp = broker.idp
    issued = idp.tokens_issued
    # Kafka 4's client fetches only from URLs the JVM allows.
    monkeypatch.setenv(
        "JAVA_TOOL_OPTIONS", f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={idp.token_url}"
    )
    settings = [
        "sasl.login.callback.handler.class="
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
        f"sasl.oauthbearer.token.endpoint.url={idp.token_url}",
        f'sasl.jaas.config={MODULE} required clientId="svc-alice" clientSecret="alice-client-secret";',
    ]
    assert java_round_trip(broker, tmp_path, "SIGNED", settings) == ["one", "two"]
    assert idp.tokens_issued > issued


# -- the kbroker admin CLI ----------------------------------------------------------------------


def cli(
    broker: OAuthBroker, listener: str, config: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    return run_admin(broker.address(listener), config, *args)


def test_the_cli_fetches_a_token_from_the_providers_endpoint(broker, tmp_path):
    topic = new_topic(broker, "svc-alice")
    config = tmp_path / "oidc.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=OAUTHBEARER\n"
        f"sasl.oauthbearer.token.endpoint.url={broker.idp.token_url}\n"
        f'sasl.jaas.config={MODULE} required clientId="svc-alice" clientSecret="alice-client-secret";\n'
    )
    listed = cli(broker, "SIGNED", config, "topics", "list", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    assert topic in [t["name"] for t in json.loads(listed.stdout)]
    # Only its own topics: the broker took the token's principal, svc-alice.
    names = [t["name"] for t in json.loads(listed.stdout)]
    assert all(n.startswith("svc-alice") or n == "_schemas" for n in names), names


def test_the_cli_logs_in_with_an_unsigned_token_of_librdkafkas_settings(broker, tmp_path):
    topic = new_topic(broker, "alice")
    config = tmp_path / "unsigned.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=OAUTHBEARER\n"
        "sasl.oauthbearer.config=principal=alice scope=kafka\n"
    )
    listed = cli(broker, "UNSIGNED", config, "topics", "list", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    assert topic in [t["name"] for t in json.loads(listed.stdout)]


def test_the_cli_says_in_one_line_that_the_provider_refused_its_credentials(broker, tmp_path):
    config = tmp_path / "wrong.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=OAUTHBEARER\n"
        f"sasl.oauthbearer.token.endpoint.url={broker.idp.token_url}\n"
        f'sasl.jaas.config={MODULE} required clientId="svc-alice" clientSecret="not-the-secret";\n'
    )
    listed = cli(broker, "SIGNED", config, "topics", "list")
    assert listed.returncode != 0
    lines = listed.stderr.strip().splitlines()
    assert len(lines) == 1 and "refused the client credentials: HTTP 401" in lines[0], lines
    assert "not-the-secret" not in listed.stderr


# -- the schema registry with bearer tokens ------------------------------------------------------


def registry(broker: OAuthBroker, **bearer: str) -> SchemaRegistryClient:
    return SchemaRegistryClient(
        {"url": f"http://127.0.0.1:{broker.ports['REGISTRY']}", "max.retries": 0, **bearer}
    )


def test_the_schema_registry_takes_a_token_confluents_client_fetched_from_the_provider(broker):
    client = registry(
        broker,
        **{
            "bearer.auth.credentials.source": "OAUTHBEARER",
            "bearer.auth.client.id": "svc-alice",
            "bearer.auth.client.secret": "alice-client-secret",
            "bearer.auth.scope": "kafka",
            "bearer.auth.issuer.endpoint.url": broker.idp.token_url,
            "bearer.auth.logical.cluster": "kbroker",
        },
    )
    subject = f"svc-alice-{uuid.uuid4().hex[:6]}-value"
    schema = Schema(
        '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}', "AVRO"
    )
    schema_id = client.register_schema(subject, schema)
    stored = json.loads(client.get_schema(schema_id).schema_str)
    assert stored == json.loads(schema.schema_str)


@pytest.mark.parametrize("token", ["none", "expired", "unsigned"])
def test_the_schema_registry_refuses_a_request_without_a_valid_token(broker, token):
    bearer = {
        "none": {},
        "expired": {"bearer.auth.token": broker.idp.mint(sub="svc-alice", lifetime_s=-120)},
        "unsigned": {
            "bearer.auth.token": unsigned_token({"sub": "svc-alice", "exp": time.time() + 60})
        },
    }[token]
    if bearer:
        bearer.update(
            {
                "bearer.auth.credentials.source": "STATIC_TOKEN",
                "bearer.auth.logical.cluster": "kbroker",
            }
        )
    with pytest.raises(SchemaRegistryError) as refused:
        registry(broker, **bearer).get_subjects()
    assert refused.value.http_status_code == 401
