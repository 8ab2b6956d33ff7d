"""Brokers logging in to each other over SASL/OAUTHBEARER (3-node clusters, real
processes, kill -9), both ways Kafka's brokers do:

- ``unsigned``: the inter-broker listener (SASL_PLAINTEXT) checks unsigned tokens and
  each broker mints one from its JAAS line's unsecuredLogin* options (Kafka's unsecured
  login module);
- ``provider``: the listener checks tokens signed by an identity provider
  (compat_tests.identity_provider, its JWKS), and each broker fetches its own from the
  provider's token endpoint with its client credentials (OAuthBearerLoginCallbackHandler).

Tokens live 4 s, so each follower's session ends every 4 s (KIP-368: the token's expiry
bounds it) and the follower must log in again, with a fresh token, to stay in the ISR.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from compat_tests.cluster import KafkaCluster
from compat_tests.confluent_helpers import consume_from_beginning
from compat_tests.identity_provider import AUDIENCE, ISSUER, IdentityProvider
from compat_tests.waiting import eventually

pytestmark = pytest.mark.timeout(240)

MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
PACKAGE = "org.apache.kafka.common.security.oauthbearer"
TOKEN_LIFETIME_S = 4
PREFIX = "listener.name.sasl_plaintext.oauthbearer."


def unsigned_logins() -> dict[str, str]:
    return {
        f"{PREFIX}sasl.jaas.config": (
            f'{MODULE} required unsecuredLoginStringClaim_sub="broker" '
            f'unsecuredLoginLifetimeSeconds="{TOKEN_LIFETIME_S}" '
            'unsecuredValidatorRequiredScope="replication" '
            'unsecuredLoginListClaim_scope=" replication";'
        ),
    }


def provider_logins(idp: IdentityProvider) -> dict[str, str]:
    return {
        f"{PREFIX}sasl.jaas.config": (
            f'{MODULE} required clientId="broker" clientSecret="broker-client-secret";'
        ),
        f"{PREFIX}sasl.server.callback.handler.class": (
            f"{PACKAGE}.OAuthBearerValidatorCallbackHandler"
        ),
        f"{PREFIX}sasl.oauthbearer.jwks.endpoint.url": idp.jwks_url,
        "sasl.oauthbearer.expected.audience": AUDIENCE,
        "sasl.oauthbearer.expected.issuer": ISSUER,
        f"{PREFIX}sasl.login.callback.handler.class": f"{PACKAGE}.OAuthBearerLoginCallbackHandler",
        f"{PREFIX}sasl.oauthbearer.token.endpoint.url": idp.token_url,
    }


@pytest.fixture(scope="module", params=["unsigned", "provider"])
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KafkaCluster]:
    root: Path = tmp_path_factory.mktemp(f"oauth-cluster-{request.param}")
    idp = IdentityProvider(
        clients={"broker": "broker-client-secret"}, token_lifetime_s=TOKEN_LIFETIME_S
    )
    with idp.serving():
        logins = unsigned_logins() if request.param == "unsigned" else provider_logins(idp)
        started = KafkaCluster(
            root,
            3,
            {
                "inter.broker.listener.name": "SASL_PLAINTEXT",
                "sasl.mechanism.inter.broker.protocol": "OAUTHBEARER",
                "sasl.enabled.mechanisms": "OAUTHBEARER",
                **logins,
                "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                # The PLAINTEXT listener's tests and the brokers' own principal.
                "super.users": "User:ANONYMOUS;User:broker",
                "replica.lag.time.max.ms": "3000",
            },
        )
        for node in started.nodes:
            port = started.unused_port()
            node.overrides["listeners"] += f",SASL_PLAINTEXT://127.0.0.1:{port}"
            node.overrides["advertised.listeners"] += f",SASL_PLAINTEXT://127.0.0.1:{port}"
        try:
            started.start()
            started.wait_for_controller()
            if request.param == "provider":
                started.idp = idp  # type: ignore[attr-defined]
            yield started
        finally:
            started.kill_all()


def isr(cluster: KafkaCluster, topic: str) -> list[int]:
    return sorted(cluster.partition(topic).isrs)


def test_followers_log_in_with_fresh_tokens_and_stay_in_the_isr_across_sessions(cluster):
    topic = f"oauth-{uuid.uuid4().hex[:8]}"
    admin = cluster.admin()
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[[1, 2, 3]])])[topic].result(30)
    cluster.wait_for_full_isr(topic, timeout=30)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    started = time.monotonic()
    sent = 0
    # Three token lifetimes: every follower session ends and is renewed at least twice.
    while time.monotonic() - started < 3 * TOKEN_LIFETIME_S:
        producer.produce(topic, f"r{sent}".encode())
        sent += 1
        assert producer.flush(15) == 0
        assert isr(cluster, topic) == [1, 2, 3]
        time.sleep(0.2)  # the input: a steady trickle of records over the lifetimes
    read = consume_from_beginning(cluster.bootstrap, topic, sent)
    assert [r.value for r in read] == [f"r{i}".encode() for i in range(sent)]
    # Each follower logged in again before its session ran out (none was closed for an
    # expired session), and no fresh token was refused.
    for node in cluster.nodes:
        log = node.log_text()
        assert "expired without re-authentication" not in log, node.node_id
        assert "authentication failed" not in log, node.node_id
    idp = getattr(cluster, "idp", None)
    if idp is not None:  # each broker fetched tokens anew as the old ones aged
        assert idp.tokens_issued >= 3 * 3, idp.tokens_issued


def test_a_killed_leaders_replica_logs_in_again_and_rejoins(cluster):
    topic = f"oauth-{uuid.uuid4().hex[:8]}"
    admin = cluster.admin()
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[[2, 3, 1]])])[topic].result(30)
    cluster.wait_for_full_isr(topic, timeout=30)
    cluster.kill(2)
    eventually(
        lambda: cluster.partition(topic, node=cluster.node(1)).leader in (1, 3),
        timeout=30,
        what="a new leader after the kill of broker 2",
    )
    producer = Producer({"bootstrap.servers": cluster.node(1).bootstrap, "acks": "all"})
    producer.produce(topic, b"while 2 was down")
    assert producer.flush(20) == 0
    cluster.restart(2)
    cluster.wait_for_full_isr(topic, timeout=30)
    read = consume_from_beginning(cluster.node(1).bootstrap, topic, 1)
    assert [r.value for r in read] == [b"while 2 was down"]
