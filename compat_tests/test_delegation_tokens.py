"""Delegation tokens (KIP-48): created, described, renewed and expired over SASL as Kafka
answers them, kept in the metadata log across a restart, authenticating over SCRAM with
tokenauth=true as their owner, refused without the ACLs Kafka asks for, and expired ones
refused and purged."""

from __future__ import annotations

import base64
import datetime
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import (
    AclOperation,
    AdminClient,
    NewTopic,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kio.index import load_request_schema

from compat_tests.java_driver import JavaDriver
from compat_tests.security_broker import SecureBroker, acl_broker, allow, grant, login, plain_login
from compat_tests.waiting import eventually
from kbroker.admin.client import BrokerConnection, ClientError
from kbroker.admin.security import ClientSecurity
from kbroker.protocol.client_frames import decode_response, encode_request, request_frame
from kbroker.protocol.messages import build, encode
from kbroker.security.sasl_client import scram

pytestmark = pytest.mark.timeout(180)

SECRET = "token-secret-for-tests"
CREATE, RENEW, EXPIRE, DESCRIBE = 38, 39, 40, 41
NOT_FOUND, OWNER_MISMATCH, NOT_ALLOWED, AUTHZ_FAILED, EXPIRED, BAD_PRINCIPAL = (
    62,
    63,
    64,
    65,
    66,
    67,
)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    with acl_broker(
        tmp_path_factory.mktemp("tokens"),
        **{
            "delegation.token.secret.key": SECRET,
            "delegation.token.expiry.check.interval.ms": "500",
        },
    ) as secure:
        yield secure


class Refused:
    """An answer carrying an error: Kafka sends -1 timestamps with it, which kio's reader
    does not take, so only the error code is read (the first field of each response)."""

    def __init__(self, code: int) -> None:
        self.error_code = code


def call(conn: BrokerConnection, api_key: int, version: int, body: dict[str, Any]) -> Any:
    entity = build(load_request_schema(api_key, version), body)
    correlation = conn.next_correlation
    conn.next_correlation += 1
    conn.send(encode_request(entity, correlation, conn.client_id))
    frame = conn.read_frame()
    (code,) = struct.unpack_from(">h", frame, 5)  # correlation id, tagged fields
    if code != 0:
        return Refused(code)
    return decode_response(api_key, version, frame)[1]


USER_RESOURCE, CREATE_TOKENS, DESCRIBE_TOKENS = 7, 13, 14


def grant_on_user(broker: SecureBroker, user: str, operation: int, principal: str) -> None:
    """An ALLOW ACL on a USER resource (confluent-kafka has no USER resource type)."""
    with login(broker, "admin") as admin:
        created = admin.call(
            30,
            {
                "creations": [
                    {
                        "resource_type": USER_RESOURCE,
                        "resource_name": user,
                        "resource_pattern_type": 3,
                        "principal": principal,
                        "host": "*",
                        "operation": operation,
                        "permission_type": 3,
                    }
                ]
            },
            versions=(3, 3),
        )
        assert all(int(r.error_code) == 0 for r in created.results)


def create(conn: BrokerConnection, owner: str | None = None, **fields: Any) -> Any:
    body = {
        "owner_principal_type": "User" if owner else None,
        "owner_principal_name": owner,
        "renewers": [],
        "max_lifetime": -1,
        **fields,
    }
    return call(conn, CREATE, 3, body)


def describe(conn: BrokerConnection, owners: list[str] | None = None) -> Any:
    body = {
        "owners": None
        if owners is None
        else [{"principal_type": "User", "principal_name": o} for o in owners]
    }
    return conn.call(DESCRIBE, body, versions=(3, 3))


def renew(conn: BrokerConnection, mac: bytes, period: int) -> Any:
    return call(conn, RENEW, 2, {"hmac": mac, "renew_period": period})


def expire(conn: BrokerConnection, mac: bytes, period: int) -> Any:
    return call(conn, EXPIRE, 2, {"hmac": mac, "expiry_time_period": period})


def token_login(broker: SecureBroker, token_id: str, mac: bytes) -> BrokerConnection:
    """SCRAM-SHA-256 with tokenauth=true: the token id as user, the HMAC as password."""
    host, port = broker.address("SASL_PLAINTEXT").split(":")
    conn = BrokerConnection(host, int(port), 10.0, "token-test").negotiate()
    shake = conn.call(17, {"mechanism": "SCRAM-SHA-256"}, versions=(1, 1))
    assert int(shake.error_code) == 0
    password = base64.b64encode(mac).decode()
    steps = scram("SCRAM-SHA-256", token_id, password, extensions="tokenauth=true")
    message = next(steps)
    while True:
        answer = conn.call(36, {"auth_bytes": message}, versions=(0, 2))
        if int(answer.error_code) != 0:
            conn.close()
            raise ClientError(answer.error_message or "authentication failed")
        try:
            message = steps.send(bytes(answer.auth_bytes))
        except StopIteration:
            return conn


def token_works(broker: SecureBroker, token_id: str, mac: bytes) -> bool:
    try:
        token_login(broker, token_id, mac).close()
        return True
    except ClientError:
        return False


def test_tokens_are_not_served_without_an_authenticated_identity(broker):
    host, port = broker.plaintext.split(":")
    with BrokerConnection(host, int(port), 10.0, "anon").negotiate() as anon:
        assert int(create(anon).error_code) == NOT_ALLOWED
        assert int(describe(anon).error_code) == NOT_ALLOWED
        assert int(renew(anon, b"x", 1000).error_code) == NOT_ALLOWED


def test_a_token_authenticates_as_its_owner_and_can_be_renewed_and_expired(broker):
    with login(broker, "alice") as alice:
        made = create(alice, renewers=[{"principal_type": "User", "principal_name": "carol"}])
        assert int(made.error_code) == 0
        assert (made.principal_type, made.principal_name) == ("User", "alice")
        assert made.token_requester_principal_name == "alice"
        token_id, mac = made.token_id, bytes(made.hmac)
        assert len(mac) == 64  # HMAC-SHA512
        listed = describe(alice, ["alice"])
        assert int(listed.error_code) == 0
        assert [t.token_id for t in listed.tokens] == [token_id]
        assert bytes(listed.tokens[0].hmac) == mac
        assert [r.principal_name for r in listed.tokens[0].renewers] == ["carol"]

    # Over the token the connection is alice's: her ACLs apply, and it may not manage
    # tokens itself.
    with token_login(broker, token_id, mac) as by_token:
        assert int(describe(by_token).error_code) == NOT_ALLOWED
        topics = by_token.call(
            19,
            {
                "topics": [
                    {
                        "name": "token-topic",
                        "num_partitions": 1,
                        "replication_factor": 1,
                        "assignments": [],
                        "configs": [],
                    }
                ],
                "timeout": 10000,
                "validate_only": True,
            },
            versions=(5, 5),
        )
        assert int(topics.topics[0].error_code) == 29  # TOPIC_AUTHORIZATION_FAILED
    grant(broker, allow(ResourceType.TOPIC, "token-topic", AclOperation.CREATE))
    with token_login(broker, token_id, mac) as by_token:
        topics = by_token.call(
            19,
            {
                "topics": [
                    {
                        "name": "token-topic",
                        "num_partitions": 1,
                        "replication_factor": 1,
                        "assignments": [],
                        "configs": [],
                    }
                ],
                "timeout": 10000,
                "validate_only": True,
            },
            versions=(5, 5),
        )
        assert int(topics.topics[0].error_code) == 0
    assert not token_works(broker, token_id, b"\x00" * 64)

    with login(broker, "bob") as bob, login(broker, "carol") as carol:
        assert int(renew(bob, mac, 1000).error_code) == OWNER_MISMATCH
        assert describe(bob).tokens == ()
        renewed = renew(carol, mac, 3_600_000)  # a renewer may renew
        assert int(renewed.error_code) == 0
    with login(broker, "alice") as alice:
        assert int(expire(alice, mac, -1).error_code) == 0
        assert int(renew(alice, mac, 1000).error_code) == NOT_FOUND
        assert describe(alice).tokens == ()
    assert not token_works(broker, token_id, mac)


def call_v0(conn: BrokerConnection, api_key: int, body: dict[str, Any]) -> Any:
    """A version 0 request, as Kafka 3.9's clients sent it: the bytes of version 1
    (Kafka's schemas: "version 1 is the same as version 0"), read back the same way."""
    correlation = conn.next_correlation
    conn.next_correlation += 1
    entity = build(load_request_schema(api_key, 1), body)
    conn.send(request_frame(api_key, 0, correlation, conn.client_id, encode(entity)))
    frame = conn.read_frame()
    (code,) = struct.unpack_from(">h", frame, 4)  # after the correlation id (header v0)
    if code != 0:
        return Refused(code)
    answered, response = decode_response(api_key, 1, frame)
    assert answered == correlation
    return response


def test_version_0_requests_are_served_as_kafka_3_9_served_them(broker):
    with login(broker, "alice") as alice:
        assert [alice.versions[k][0] for k in (CREATE, RENEW, EXPIRE, DESCRIBE)] == [0] * 4, (
            alice.versions
        )
        made = call_v0(
            alice,
            CREATE,
            {
                "renewers": [{"principal_type": "User", "principal_name": "carol"}],
                "max_lifetime": -1,
            },
        )
        assert int(made.error_code) == 0
        assert (made.principal_type, made.principal_name) == ("User", "alice")
        mac = bytes(made.hmac)
        described = call_v0(
            alice, DESCRIBE, {"owners": [{"principal_type": "User", "principal_name": "alice"}]}
        )
        assert [t.token_id for t in described.tokens] == [made.token_id]
        assert [r.principal_name for r in described.tokens[0].renewers] == ["carol"]
        renewed = call_v0(alice, RENEW, {"hmac": mac, "renew_period": 3_600_000})
        assert int(renewed.error_code) == 0
        assert renewed.expiry_timestamp <= made.max_timestamp
        assert int(call_v0(alice, EXPIRE, {"hmac": mac, "expiry_time_period": -1}).error_code) == 0
        assert int(call_v0(alice, RENEW, {"hmac": mac, "renew_period": 1000}).error_code) == (
            NOT_FOUND
        )


def test_tokens_for_others_and_describing_others_tokens_need_acls(broker):
    with login(broker, "alice") as alice:
        assert int(create(alice, owner="bob").error_code) == AUTHZ_FAILED
        bad = call(
            alice,
            CREATE,
            3,
            {
                "owner_principal_type": None,
                "owner_principal_name": None,
                "renewers": [{"principal_type": "Group", "principal_name": "x"}],
                "max_lifetime": -1,
            },
        )
        assert int(bad.error_code) == BAD_PRINCIPAL
    grant_on_user(broker, "User:bob", CREATE_TOKENS, "User:alice")
    with login(broker, "alice") as alice:
        made = create(alice, owner="bob")
        assert int(made.error_code) == 0
        assert made.principal_name == "bob"
        assert made.token_requester_principal_name == "alice"
    with login(broker, "carol") as carol:
        assert made.token_id not in {t.token_id for t in describe(carol).tokens}
    grant_on_user(broker, "User:bob", DESCRIBE_TOKENS, "User:carol")
    with login(broker, "carol") as carol:
        assert made.token_id in {t.token_id for t in describe(carol, ["bob"]).tokens}
    # The token authenticates as bob.
    assert token_works(broker, made.token_id, bytes(made.hmac))


def test_an_expired_token_is_refused_then_purged(broker):
    with login(broker, "alice") as alice:
        made = create(alice, max_lifetime=1500)
        assert int(made.error_code) == 0
        assert made.max_timestamp - made.issue_timestamp <= datetime.timedelta(milliseconds=1500)
        mac = bytes(made.hmac)
        assert token_works(broker, made.token_id, mac)
        eventually(
            lambda: not token_works(broker, made.token_id, mac),
            timeout=20,
            what="the token refused once expired",
        )
        assert made.token_id not in {t.token_id for t in describe(alice).tokens}
        # Expired, then removed by the controller's periodic check.
        eventually(
            lambda: int(renew(alice, mac, 1000).error_code) == NOT_FOUND,
            timeout=20,
            what="the expired token purged",
        )


def test_a_token_outlives_its_owners_scram_credentials_and_a_restart(broker):
    admin = AdminClient(plain_login(broker, "admin"))
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    for future in admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("dave", info, b"dave-secret")]
    ).values():
        future.result(timeout=20)
    security = ClientSecurity(
        protocol="SASL_PLAINTEXT",
        mechanism="SCRAM-SHA-256",
        username="dave",
        password="dave-secret",
    )
    host, port = broker.address("SASL_PLAINTEXT").split(":")
    with (
        BrokerConnection(host, int(port), 10.0, "dave", security)
        .negotiate()
        .authenticate(security) as dave
    ):
        made = create(dave)
        assert int(made.error_code) == 0
    for future in admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion("dave", ScramMechanism.SCRAM_SHA_256)]
    ).values():
        future.result(timeout=20)
    # As on Kafka: the token is the owner's until it expires, whatever became of the
    # owner's own credentials.
    assert token_works(broker, made.token_id, bytes(made.hmac))
    broker.node.restart()
    assert token_works(broker, made.token_id, bytes(made.hmac))
    with login(broker, "admin") as root:
        assert made.token_id in {t.token_id for t in describe(root, ["dave"]).tokens}


def test_the_java_admin_client_manages_tokens_and_a_java_producer_logs_in_with_one(
    broker, java4_classpath, tmp_path
):
    """Kafka's own AdminClient calls and a producer whose JAAS line carries tokenauth=true,
    as Kafka's documentation sets one up."""
    sasl = broker.address("SASL_PLAINTEXT")
    alice_admin = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule "
        'required username="alice" password="alice-secret";',
    }
    topic = "java-token-topic"
    grant(
        broker,
        allow(ResourceType.TOPIC, topic, AclOperation.ALL),
        allow(ResourceType.TOPIC, topic, AclOperation.ALL, principal="User:admin"),
    )
    with JavaDriver(java4_classpath, sasl, tmp_path / "driver.log") as java:
        made = java.call("create-token", bootstrap=sasl, admin=alice_admin, renewers=["carol"])
        token = made.data
        assert token["owner"] == "User:alice"
        assert token["requester"] == "User:alice"
        assert token["renewers"] == ["User:carol"]
        listed = java.call("describe-tokens", bootstrap=sasl, admin=alice_admin, owners=["alice"])
        assert token["token-id"] in {t["token-id"] for t in listed.data["tokens"]}
        by_token = {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
            f'required username="{token["token-id"]}" password="{token["hmac"]}" '
            "tokenauth=true;",
            "enable.idempotence": "false",
        }
        admin = AdminClient(plain_login(broker, "admin"))
        for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
            future.result(timeout=20)
        java.call("produce", bootstrap=sasl, topic=topic, count=3, producer=by_token)
        renewed = java.call(
            "renew-token", bootstrap=sasl, admin=alice_admin, hmac=token["hmac"], period_ms=60000
        )
        assert renewed.data["expiry"] <= token["max"]
        java.call(
            "expire-token", bootstrap=sasl, admin=alice_admin, hmac=token["hmac"], period_ms=-1
        )
        listed = java.call("describe-tokens", bootstrap=sasl, admin=alice_admin)
        assert token["token-id"] not in {t["token-id"] for t in listed.data["tokens"]}
