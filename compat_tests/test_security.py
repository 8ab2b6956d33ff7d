"""TLS and SASL listeners driven by stock clients, and what a bad login gets.

One broker for the module serves PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL at once
(compat_tests/security_broker.py); certificates come from a CA made for the run.
Every client produces on the secured listener and reads its records back over it.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kio.index import load_request_schema

from compat_tests.confluent_helpers import consume_from_beginning, produce_all
from compat_tests.java_driver import JavaDriver
from compat_tests.security_broker import (
    PLAIN_USERS,
    SCRAM_PASSWORD,
    SCRAM_USER,
    SecureBroker,
    confluent_settings,
    metric,
    start_secure_broker,
)
from compat_tests.tls_material import make_tls_material
from kbroker.admin.client import BrokerConnection
from kbroker.protocol.messages import build
from kbroker.replica.broker_link import AuthenticationFailed, BrokerLink
from kbroker.security.inter_broker import InterBrokerSecurity

pytestmark = pytest.mark.timeout(120)

CASES = [
    ("SSL", None),
    ("SASL_PLAINTEXT", "PLAIN"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-512"),
    ("SASL_SSL", "PLAIN"),
    ("SASL_SSL", "SCRAM-SHA-512"),
]


def _case_id(case: tuple[str, str | None]) -> str:
    return "-".join(part for part in case if part)


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    base = tmp_path_factory.mktemp("secure-broker")
    # The SSL listener narrows TLS 1.3 to one suite, so every client below meets it.
    broker = start_secure_broker(
        base / "node", make_tls_material(base / "tls"), **{SSL_SUITES: "TLS_AES_128_GCM_SHA256"}
    )
    try:
        admin = AdminClient({"bootstrap.servers": broker.plaintext})
        # One request per mechanism: Kafka refuses two changes to one user in a request.
        for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
            futures = admin.alter_user_scram_credentials(
                [
                    UserScramCredentialUpsertion(
                        SCRAM_USER, ScramCredentialInfo(mechanism, 4096), SCRAM_PASSWORD.encode()
                    )
                ]
            )
            for future in futures.values():
                future.result(timeout=20)
        yield broker
    finally:
        broker.node.kill()


SSL_SUITES = "listener.name.ssl.ssl.cipher.suites"


def topic_name(client: str) -> str:
    return f"sec-{client}-{uuid.uuid4().hex[:10]}"


def closed_after_alert(client: BrokerConnection, timeout: float = 10.0) -> bool:
    """True when the broker closes the socket, after whatever TLS alert it sends first."""
    client.sock.settimeout(timeout)
    try:
        while chunk := client.sock.recv(4096):
            assert chunk[0] == 0x15, "the broker answered with something other than an alert"
        return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


# -- confluent-kafka (librdkafka) ---------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_confluent_produces_and_consumes_over(secure: SecureBroker, case: tuple) -> None:
    listener, mechanism = case
    conf = confluent_settings(secure, listener, mechanism)
    topic = topic_name("confluent")
    records = [{"value": f"v{i}".encode(), "key": b"k"} for i in range(50)]
    produce_all(secure.address(listener), topic, records, **conf)
    got = consume_from_beginning(secure.address(listener), topic, 50, **conf)
    assert [r.value for r in got] == [r["value"] for r in records]


def test_a_wrong_password_is_refused_and_counted_on_metrics(secure: SecureBroker) -> None:
    before = metric(secure, "kafka_server_socket_server_metrics_failed_authentication_total")
    errors: list[KafkaError] = []
    conf = confluent_settings(secure, "SASL_PLAINTEXT", "SCRAM-SHA-512", password="wrong")
    producer = Producer(
        {
            "bootstrap.servers": secure.address("SASL_PLAINTEXT"),
            **conf,
            "error_cb": errors.append,
            "reconnect.backoff.ms": 2000,
        }
    )
    producer.produce(topic_name("denied"), b"never stored")
    deadline = time.monotonic() + 15
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors, "the client saw no error"
    assert errors[0].code() == KafkaError._AUTHENTICATION
    assert "invalid credentials" in errors[0].str()
    assert metric(secure, "kafka_server_socket_server_metrics_failed_authentication_total") > before
    log = secure.node.log_path.read_text()
    assert "wrong" not in log.split("authentication failed", 1)[-1].splitlines()[0]


def test_scram_credentials_are_described_by_mechanism_and_iterations(secure: SecureBroker) -> None:
    admin = AdminClient({"bootstrap.servers": secure.plaintext})
    description = admin.describe_user_scram_credentials([SCRAM_USER])[SCRAM_USER].result(20)
    infos = sorted((i.mechanism, i.iterations) for i in description.scram_credential_infos)
    assert infos == [(ScramMechanism.SCRAM_SHA_256, 4096), (ScramMechanism.SCRAM_SHA_512, 4096)]


# -- kafka-python and aiokafka --------------------------------------------------------------

# Every protocol, and on each SASL protocol both PLAIN and SCRAM-SHA-512.
CLIENT_CASES = [
    ("SSL", None),
    ("SASL_PLAINTEXT", "PLAIN"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-512"),
    ("SASL_SSL", "PLAIN"),
    ("SASL_SSL", "SCRAM-SHA-512"),
]
PYTHON_CASES = CLIENT_CASES


def _python_client_settings(secure: SecureBroker, listener: str, mechanism: str | None) -> dict:
    settings: dict = {"security_protocol": listener}
    if listener.endswith("SSL"):
        settings["ssl_context"] = ssl.create_default_context(cafile=str(secure.tls.ca.cert))
    if mechanism is not None:
        scram = mechanism.startswith("SCRAM")
        settings["sasl_mechanism"] = mechanism
        settings["sasl_plain_username"] = SCRAM_USER if scram else "alice"
        settings["sasl_plain_password"] = SCRAM_PASSWORD if scram else PLAIN_USERS["alice"]
    return settings


@pytest.mark.parametrize("case", PYTHON_CASES, ids=_case_id)
def test_kafka_python_produces_and_consumes_over(secure: SecureBroker, case: tuple) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    listener, mechanism = case
    settings = _python_client_settings(secure, listener, mechanism)
    topic = topic_name("kafka-python")
    bootstrap = secure.address(listener)
    producer = KafkaProducer(bootstrap_servers=bootstrap, **settings)
    for i in range(20):
        producer.send(topic, f"v{i}".encode())
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=15000, **settings)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    values = [m.value for _, m in zip(range(20), consumer, strict=False)]
    consumer.close()
    assert values == [f"v{i}".encode() for i in range(20)]


@pytest.mark.parametrize("case", PYTHON_CASES, ids=_case_id)
def test_aiokafka_produces_and_consumes_over(secure: SecureBroker, case: tuple) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    listener, mechanism = case
    settings = _python_client_settings(secure, listener, mechanism)
    topic = topic_name("aiokafka")
    bootstrap = secure.address(listener)

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **settings)
        await producer.start()
        try:
            for i in range(20):
                await producer.send(topic, f"v{i}".encode())
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **settings)
        await consumer.start()
        try:
            partition = TopicPartition(topic, 0)
            consumer.assign([partition])
            await consumer.seek_to_beginning(partition)
            values: list[bytes] = []
            while len(values) < 20:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 20)
                values += [m.value for messages in batch.values() for m in messages]
            return values
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == [f"v{i}".encode() for i in range(20)]


# -- bad input on the secured listeners -------------------------------------------------------


def test_a_client_that_skips_the_sasl_handshake_is_disconnected(secure: SecureBroker) -> None:
    with BrokerConnection.to(secure.address("SASL_PLAINTEXT")) as client:
        client.send(client.request_bytes(3, 1, b"\xff\xff\xff\xff", 1))  # Metadata, all topics
        assert client.closed_by_broker(timeout=10)
    assert "unexpected metadata request before SASL authentication" in (
        secure.node.log_path.read_text()
    )


def test_an_unknown_mechanism_is_answered_unsupported_sasl_mechanism(secure: SecureBroker) -> None:
    with BrokerConnection.to(secure.address("SASL_PLAINTEXT")) as client:
        answer = client.request(17, 1, mechanism="GSSAPI")
        assert answer.error_code == 33  # UNSUPPORTED_SASL_MECHANISM
        assert set(answer.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
        assert client.closed_by_broker(timeout=10)


def test_sasl_authenticate_before_the_handshake_is_an_illegal_state(secure: SecureBroker) -> None:
    with BrokerConnection.to(secure.address("SASL_PLAINTEXT")) as client:
        answer = client.request(36, 1, auth_bytes=b"\0alice\0alice-secret")
        assert answer.error_code == 34  # ILLEGAL_SASL_STATE
        assert client.closed_by_broker(timeout=10)


def test_a_bogus_tls_hello_is_closed_and_logged_and_the_listener_keeps_serving(
    secure: SecureBroker,
) -> None:
    with BrokerConnection.to(secure.address("SSL")) as client:
        client.send(b"\x16\x03\x01\x00\x10" + b"not a client hello" * 3)
        assert closed_after_alert(client)
    assert "TLS handshake failed" in secure.node.log_path.read_text()
    conf = confluent_settings(secure, "SSL")
    topic = topic_name("after-bogus")
    produce_all(secure.address("SSL"), topic, [{"value": b"still served"}], **conf)


def test_plaintext_bytes_on_the_tls_listener_are_a_failed_handshake(secure: SecureBroker) -> None:
    with BrokerConnection.to(secure.address("SASL_SSL")) as client:
        client.send(client.request_bytes(18, 0, b"", 1))
        assert closed_after_alert(client)
    assert metric(secure, "kbroker_tls_handshake_failures_total") >= 1


def test_a_certificate_from_an_unknown_ca_is_refused(secure: SecureBroker) -> None:
    context = ssl.create_default_context(cafile=str(secure.tls.ca.cert))
    context.load_cert_chain(str(secure.tls.stranger.cert), str(secure.tls.stranger.key))
    host, port = secure.address("SSL").split(":")
    api_versions_v0 = struct.pack(">ihhih", 10, 18, 0, 1, 0)
    refused = pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError))
    with (
        socket.create_connection((host, int(port)), timeout=10) as raw,
        refused,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        tls.sendall(api_versions_v0)
        answer = tls.recv(4)  # TLS 1.3 reports the refusal on the first read
        raise AssertionError(f"a certificate from an unknown CA was accepted: {answer!r}")


def negotiated_suite(secure: SecureBroker, listener: str) -> str:
    context = ssl.create_default_context(cafile=str(secure.tls.ca.cert))
    host, port = secure.address(listener).split(":")
    with (
        socket.create_connection((host, int(port)), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        cipher = tls.cipher()
        assert cipher is not None
        return cipher[0]


def test_a_listener_naming_one_tls13_suite_negotiates_only_that_one(secure: SecureBroker) -> None:
    # A client offering every TLS 1.3 suite gets OpenSSL's first where nothing narrows.
    assert negotiated_suite(secure, "SASL_SSL") == "TLS_AES_256_GCM_SHA384"
    assert negotiated_suite(secure, "SSL") == "TLS_AES_128_GCM_SHA256"


# -- the Java client ------------------------------------------------------------------------

JAVA_CASES = CLIENT_CASES


@pytest.fixture(scope="module")
def java(
    secure: SecureBroker, java_classpath: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[JavaDriver]:
    log = tmp_path_factory.mktemp("java-security") / "java-client.log"
    with JavaDriver(java_classpath, secure.plaintext, log) as driver:
        yield driver


def _java_settings(secure: SecureBroker, listener: str, mechanism: str | None) -> dict[str, str]:
    settings = {"security.protocol": listener}
    if listener.endswith("SSL"):
        settings["ssl.truststore.type"] = "PEM"
        settings["ssl.truststore.location"] = str(secure.tls.ca.cert)
    if mechanism == "PLAIN":
        settings["sasl.mechanism"] = "PLAIN"
        settings["sasl.jaas.config"] = (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="alice" password="{PLAIN_USERS["alice"]}";'
        )
    elif mechanism is not None:
        settings["sasl.mechanism"] = mechanism
        settings["sasl.jaas.config"] = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{SCRAM_USER}" password="{SCRAM_PASSWORD}";'
        )
    return settings


@pytest.mark.parametrize("case", JAVA_CASES, ids=_case_id)
def test_java_client_produces_and_consumes_over(
    secure: SecureBroker, java: JavaDriver, case: tuple
) -> None:
    listener, mechanism = case
    settings = _java_settings(secure, listener, mechanism)
    topic = topic_name("java")
    bootstrap = secure.address(listener)
    java.mark_log()
    sent = java.call("produce", bootstrap=bootstrap, topic=topic, count=30, producer=settings)
    assert len(sent["sent"]) == 30
    got = java.call(
        "consume", bootstrap=bootstrap, topic=topic, from_="beginning", expect=30, consumer=settings
    )
    assert len(got.records) == 30


# -- the inter-broker client (a follower's link to its leader) ------------------------------


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_the_inter_broker_link_logs_in_with_scram_and_is_refused_a_wrong_password(
    secure: SecureBroker, mechanism: str
) -> None:
    """What a follower does on a SASL_SSL inter-broker listener whose mechanism is SCRAM:
    verify the broker's certificate, prove the password without sending it, and check
    the broker's proof in turn (BrokerLink, kbroker/replica/broker_link.py)."""
    context = ssl.create_default_context(cafile=str(secure.tls.ca.cert))
    port = secure.ports["SASL_SSL"]

    def link(password: str) -> BrokerLink:
        security = InterBrokerSecurity(
            "SASL_SSL", "SASL_SSL", context, mechanism, SCRAM_USER, password
        )
        return BrokerLink("127.0.0.1", port, "replica-9", security)

    async def metadata(password: str) -> Any:
        link_ = link(password)
        try:
            request = build(load_request_schema(3, 12), {"topics": None})
            return await link_.call(request, 10.0)
        finally:
            link_.close()

    answered = asyncio.run(metadata(SCRAM_PASSWORD))
    assert [b.port for b in answered.brokers] == [port]  # Metadata, as that listener sees it
    with pytest.raises(AuthenticationFailed, match=f"refused the SASL {mechanism} login"):
        asyncio.run(metadata("not-" + SCRAM_PASSWORD))
