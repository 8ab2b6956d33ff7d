"""A broker with one listener of each security protocol, and how each client reaches it.

PLAINTEXT stays first (the harness's readiness probe and the admin side of the tests);
SSL asks for (but does not require) a client certificate and maps its subject with a
RULE; SASL listeners enable PLAIN (users in the JAAS line) and both SCRAM mechanisms
(users created through AlterUserScramCredentials). Passwords here are test fixtures.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from compat_tests.broker_process import BrokerProcess, free_ports
from compat_tests.metrics_scrape import scrape, value
from compat_tests.tls_material import TlsMaterial, make_tls_material
from kbroker.admin.client import BrokerConnection
from kbroker.admin.security import ClientSecurity

PLAIN_USERS = {
    "admin": "admin-secret",
    "alice": "alice-secret",
    "bob": "bob-plain-secret",
    "carol": "carol-secret",
}
SCRAM_USER, SCRAM_PASSWORD = "bob", "bob-secret"
PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    + " ".join(f'user_{name}="{password}"' for name, password in PLAIN_USERS.items())
    + ";"
)
MAPPING_RULES = "RULE:^CN=([^,]+),OU=([^,]+),.*$/$1@$2/L,DEFAULT"
# The StandardAuthorizer with `admin` (a PLAIN user) as the super user who grants ACLs.
AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:admin",
}


@dataclass
class SecureBroker:
    node: BrokerProcess
    tls: TlsMaterial
    ports: dict[str, int]
    http_port: int

    def address(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    @property
    def plaintext(self) -> str:
        return self.node.bootstrap


def security_overrides(
    tls: TlsMaterial, ports: dict[str, int], http_port: int, plain_port: int
) -> dict[str, str]:
    listeners = ",".join(
        [f"PLAINTEXT://127.0.0.1:{plain_port}"]
        + [f"{name}://127.0.0.1:{port}" for name, port in ports.items()]
    )
    return {
        "listeners": listeners,
        "http.listeners": f"http://127.0.0.1:{http_port}",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(tls.broker_keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(tls.ca.cert),
        "listener.name.ssl.ssl.client.auth": "requested",
        "ssl.principal.mapping.rules": MAPPING_RULES,
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
    }


def start_secure_broker(base: Path, tls: TlsMaterial, **extra: str) -> SecureBroker:
    node = BrokerProcess(base)
    ports = free_ports(("SSL", "SASL_PLAINTEXT", "SASL_SSL", "http"), node.port)
    http_port = ports.pop("http")
    node.overrides = {**security_overrides(tls, ports, http_port, node.port), **extra}
    node.start()
    return SecureBroker(node, tls, ports, http_port)


@contextmanager
def running_secure_broker(base: Path, **extra: str) -> Iterator[SecureBroker]:
    """A secure broker with fresh TLS material under `base`, killed on leaving."""
    broker = start_secure_broker(base / "node", make_tls_material(base / "tls"), **extra)
    try:
        yield broker
    finally:
        broker.node.kill()


@contextmanager
def acl_broker(base: Path, **extra: str) -> Iterator[SecureBroker]:
    """A secure broker under the StandardAuthorizer, `admin` its super user (AUTHORIZER),
    killed on leaving."""
    with running_secure_broker(base, **AUTHORIZER, **extra) as broker:
        yield broker


def confluent_settings(
    broker: SecureBroker,
    listener: str,
    mechanism: str | None = None,
    user: str | None = None,
    password: str | None = None,
    client_cert: bool = False,
) -> dict[str, str]:
    """librdkafka settings for one listener (and SASL mechanism)."""
    conf = {"security.protocol": listener}
    if listener in ("SSL", "SASL_SSL"):
        conf["ssl.ca.location"] = str(broker.tls.ca.cert)
        if client_cert:
            conf["ssl.certificate.location"] = str(broker.tls.client.cert)
            conf["ssl.key.location"] = str(broker.tls.client.key)
    if mechanism is not None:
        conf["sasl.mechanism"] = mechanism
        conf["sasl.username"] = user or (SCRAM_USER if mechanism.startswith("SCRAM") else "alice")
        conf["sasl.password"] = password or (
            SCRAM_PASSWORD if mechanism.startswith("SCRAM") else PLAIN_USERS["alice"]
        )
    return conf


def plain_login(broker: SecureBroker, name: str) -> dict[str, str]:
    """librdkafka settings for the PLAIN user `name` on the SASL_PLAINTEXT listener."""
    return {
        "bootstrap.servers": broker.address("SASL_PLAINTEXT"),
        **confluent_settings(broker, "SASL_PLAINTEXT", "PLAIN", name, PLAIN_USERS[name]),
    }


def login(broker: SecureBroker, name: str) -> BrokerConnection:
    """A raw connection that has authenticated as the PLAIN user `name` on SASL_PLAINTEXT."""
    security = ClientSecurity(
        protocol="SASL_PLAINTEXT", mechanism="PLAIN", username=name, password=PLAIN_USERS[name]
    )
    host, port = broker.address("SASL_PLAINTEXT").split(":")
    conn = BrokerConnection(host, int(port), 10.0, "acl-test", security)
    return conn.negotiate().authenticate(security)


def allow(
    rtype: ResourceType,
    name: str,
    operation: AclOperation,
    principal: str = "User:alice",
    pattern: ResourcePatternType = ResourcePatternType.LITERAL,
    permission: AclPermissionType = AclPermissionType.ALLOW,
) -> AclBinding:
    """An ACL binding (ALLOW to `alice` on a literal name unless told otherwise)."""
    return AclBinding(rtype, name, pattern, principal, "*", operation, permission)


def grant(broker: SecureBroker, *bindings: AclBinding) -> None:
    """Create the bindings as the super user `admin` (AUTHORIZER), waiting for each."""
    client = AdminClient(plain_login(broker, "admin"))
    for future in client.create_acls(list(bindings)).values():
        future.result(20)


def metric(broker: SecureBroker, name: str) -> float:
    """An unlabelled metric of the broker; KeyError when it does not export it."""
    return value(scrape(f"127.0.0.1:{broker.http_port}"), name)
