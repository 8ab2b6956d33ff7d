"""SASL session lifetime and re-authentication (KIP-368, connections.max.reauth.ms).

The SASL_PLAINTEXT listener gives sessions 1.5 s: the broker says so in
SaslAuthenticate, closes a connection that goes on past it without re-authenticating,
and keeps one that re-authenticates; a stock client re-authenticates by itself."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer

from compat_tests.confluent_helpers import consume_from_beginning
from compat_tests.security_broker import PLAIN_USERS, SecureBroker, metric, running_secure_broker
from kbroker.admin.client import BrokerConnection, ConnectionClosed

pytestmark = pytest.mark.timeout(120)

LIFETIME_MS = 1500


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    with running_secure_broker(
        tmp_path_factory.mktemp("reauth-broker"),
        **{"listener.name.sasl_plaintext.connections.max.reauth.ms": str(LIFETIME_MS)},
    ) as broker:
        yield broker


def authenticate(conn: BrokerConnection, user: str = "alice") -> int:
    """SaslHandshake v1 + SaslAuthenticate v1 with PLAIN; the session lifetime in ms."""
    assert conn.request(17, 1, mechanism="PLAIN").error_code == 0
    token = f"\0{user}\0{PLAIN_USERS[user]}".encode()
    answer = conn.request(36, 1, auth_bytes=token)
    assert answer.error_code == 0
    return int(answer.session_lifetime.total_seconds() * 1000)


def api_versions(conn: BrokerConnection) -> int:
    return int(conn.request(18, 0).error_code)


def test_the_session_lifetime_is_announced_and_enforced(secure: SecureBroker) -> None:
    with BrokerConnection.to(secure.address("SASL_PLAINTEXT")) as conn:
        assert authenticate(conn) == LIFETIME_MS
        assert api_versions(conn) == 0
        time.sleep(LIFETIME_MS / 1000 + 0.3)  # the input: the session's lifetime passes
        with pytest.raises(ConnectionClosed):
            conn.request(3, 1, topics=[])
    assert "expired without re-authentication" in secure.node.log_path.read_text()


def test_re_authenticating_keeps_the_connection(secure: SecureBroker) -> None:
    with BrokerConnection.to(secure.address("SASL_PLAINTEXT")) as conn:
        authenticate(conn)
        for _ in range(3):
            time.sleep(LIFETIME_MS / 1000 * 0.7)  # the input: most of a lifetime passes
            assert authenticate(conn) == LIFETIME_MS
            assert api_versions(conn) == 0


def test_re_authenticating_as_another_user_is_refused(secure: SecureBroker) -> None:
    with BrokerConnection.to(secure.address("SASL_PLAINTEXT")) as conn:
        authenticate(conn, "alice")
        assert conn.request(17, 1, mechanism="PLAIN").error_code == 0
        token = f"\0admin\0{PLAIN_USERS['admin']}".encode()
        assert conn.request(36, 1, auth_bytes=token).error_code == 58
        assert conn.closed_by_broker(timeout=10)


def test_a_stock_client_re_authenticates_on_its_own(secure: SecureBroker) -> None:
    conf = {
        "bootstrap.servers": secure.address("SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": PLAIN_USERS["alice"],
    }
    topic = f"reauth-{uuid.uuid4().hex[:8]}"
    expired = "expired without re-authentication"
    closed_before = secure.node.log_path.read_text().count(expired)
    logins = "kafka_server_socket_server_metrics_successful_authentication_total"
    logins_before = metric(secure, logins)
    producer = Producer(conf)
    for i in range(4):  # one producer for 4 s: its sessions of 1.5 s must be renewed
        producer.produce(topic, f"v{i}".encode())
        assert producer.flush(10) == 0
        time.sleep(1.0)  # the input: sessions of 1.5 s end during the 4 s
    assert secure.node.log_path.read_text().count(expired) == closed_before
    # Each of its (at most two) connections logged in again twice or more.
    assert metric(secure, logins) - logins_before >= 4
    got = consume_from_beginning(
        secure.address("SASL_PLAINTEXT"),
        topic,
        4,
        **{k: v for k, v in conf.items() if k != "bootstrap.servers"},
    )
    assert [r.value for r in got] == [b"v0", b"v1", b"v2", b"v3"]
