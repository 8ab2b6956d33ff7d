"""The schema registry behind TLS, HTTP basic authentication (the broker's PLAIN and
SCRAM users) and the broker's ACLs: reads need DESCRIBE, registrations and deletes
WRITE, config and mode changes ALTER_CONFIGS, all on the TOPIC `_schemas`."""

from __future__ import annotations

import ssl
from typing import Any

import pytest
from confluent_kafka.admin import (
    AclOperation,
    AdminClient,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from compat_tests.broker_process import free_port
from compat_tests.schema_registry_helpers import avro_record, basic, call, wait_serving
from compat_tests.security_broker import PLAIN_USERS, acl_broker, allow, grant, plain_login

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Any:
    port = free_port()
    settings = {
        "schema.registry.listeners": f"https://127.0.0.1:{port}",
        "schema.registry.authentication.method": "BASIC",
    }
    with acl_broker(tmp_path_factory.mktemp("registry-security"), **settings) as broker:
        broker.registry_url = f"https://127.0.0.1:{port}"
        broker.context = ssl.create_default_context(cafile=str(broker.tls.ca.cert))
        wait_serving(
            broker.registry_url,
            auth=basic("admin", PLAIN_USERS["admin"]),
            context=broker.context,
            node=broker.node,
        )
        yield broker


def _as(broker: Any, user: str | None, method: str, path: str, body: Any = None) -> int:
    auth = None if user is None else basic(user, PLAIN_USERS.get(user, "scram-secret"))
    return call(broker.registry_url, method, path, body, auth=auth, context=broker.context)[0]


SCHEMA = {"schema": avro_record("Secured", [{"name": "a", "type": "int"}])}


def test_basic_authentication_and_acls(secured):
    assert _as(secured, None, "GET", "/subjects") == 401
    status, body = call(
        secured.registry_url,
        "GET",
        "/subjects",
        auth=basic("alice", "wrong"),
        context=secured.context,
    )
    assert (status, body["error_code"]) == (401, 40101)
    # the super user may do anything
    assert _as(secured, "admin", "POST", "/subjects/secured-value/versions", SCHEMA) == 200
    # alice, a PLAIN user with no ACL, may do nothing
    assert _as(secured, "alice", "GET", "/subjects") == 403
    grant(secured, allow(ResourceType.TOPIC, "_schemas", AclOperation.READ))
    assert _as(secured, "alice", "GET", "/subjects") == 200
    assert _as(secured, "alice", "POST", "/subjects/alice-value/versions", SCHEMA) == 403
    grant(secured, allow(ResourceType.TOPIC, "_schemas", AclOperation.WRITE))
    assert _as(secured, "alice", "POST", "/subjects/alice-value/versions", SCHEMA) == 200
    config = {"compatibility": "FULL"}
    assert _as(secured, "alice", "PUT", "/config/alice-value", config) == 403
    grant(secured, allow(ResourceType.TOPIC, "_schemas", AclOperation.ALTER_CONFIGS))
    assert _as(secured, "alice", "PUT", "/config/alice-value", config) == 200


def test_scram_user_and_confluent_client_over_tls(secured):
    admin = AdminClient(plain_login(secured, "admin"))
    upsert = UserScramCredentialUpsertion(
        "dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"scram-secret"
    )
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(20)
    grant(
        secured,
        allow(ResourceType.TOPIC, "_schemas", AclOperation.WRITE, principal="User:dave"),
    )
    client = SchemaRegistryClient(
        {
            "url": secured.registry_url,
            "basic.auth.user.info": "dave:scram-secret",
            "ssl.ca.location": str(secured.tls.ca.cert),
        }
    )
    schema_id = client.register_schema("dave-value", Schema(SCHEMA["schema"], "AVRO"))
    assert client.get_schema(schema_id).schema_str
    assert "dave-value" in client.get_subjects()
    wrong = SchemaRegistryClient(
        {
            "url": secured.registry_url,
            "basic.auth.user.info": "dave:nope",
            "ssl.ca.location": str(secured.tls.ca.cert),
        }
    )
    with pytest.raises(Exception, match="401|Unauthorized"):
        wrong.get_subjects()
