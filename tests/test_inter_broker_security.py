"""How a broker of a cluster reaches the others: the inter-broker listener's protocol, its
TLS client side and the broker's own SASL login, refused at start when it cannot work."""

import asyncio
import ssl
from pathlib import Path

import pytest
from kio.index import load_request_schema

from compat_tests.tls_material import TlsMaterial, make_tls_material
from kbroker.config import BrokerConfig, ConfigError
from kbroker.protocol.messages import build
from kbroker.replica.broker_link import AuthenticationFailed, BrokerLink
from kbroker.security.inter_broker import InterBrokerSecurity, inter_broker_security

VOTERS = "1@127.0.0.1:19091,2@127.0.0.1:19092,3@127.0.0.1:19093"
PLAIN_LINE = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="broker" password="broker-pw" user_broker="broker-pw";'
)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsMaterial:
    return make_tls_material(Path(tmp_path_factory.mktemp("tls")))


def node(**extra: str) -> BrokerConfig:
    settings = {
        "node.id": "1",
        "process.roles": "broker,controller",
        "listeners": "PLAINTEXT://127.0.0.1:9091,INTERNAL://127.0.0.1:9191,"
        "CONTROLLER://127.0.0.1:19091",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT,"
        "CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": VOTERS,
        "cluster.secret": "s3cret",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": PLAIN_LINE,
    }
    settings.update(extra)
    return BrokerConfig.from_settings({k: v for k, v in settings.items() if v != ""})


def test_a_sasl_inter_broker_listener_logs_in_with_the_jaas_lines_username_and_password():
    security = inter_broker_security(node())
    assert (security.listener, security.protocol) == ("INTERNAL", "SASL_PLAINTEXT")
    assert (security.mechanism, security.username, security.password) == (
        "PLAIN",
        "broker",
        "broker-pw",
    )
    assert security.ssl_context is None
    assert "broker-pw" not in repr(security)


def test_scram_logs_in_with_the_scram_login_modules_line():
    line = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="broker" password="scram-pw";'
    )
    security = inter_broker_security(
        node(
            **{
                "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
                "listener.name.internal.scram-sha-512.sasl.jaas.config": line,
            }
        )
    )
    assert (security.mechanism, security.username, security.password) == (
        "SCRAM-SHA-512",
        "broker",
        "scram-pw",
    )


def test_kafkas_default_gssapi_mechanism_is_refused_naming_the_setting():
    with pytest.raises(ConfigError, match="sasl.mechanism.inter.broker.protocol is GSSAPI"):
        inter_broker_security(node(**{"sasl.mechanism.inter.broker.protocol": ""}))


def test_a_mechanism_the_listener_does_not_enable_is_refused():
    with pytest.raises(ConfigError, match="must be in listener INTERNAL's sasl.enabled"):
        inter_broker_security(node(**{"sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256"}))


def test_a_jaas_line_without_the_brokers_own_login_is_refused_without_showing_secrets():
    line = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_a="hidden-pw";'
    with pytest.raises(ConfigError, match="needs username and password") as caught:
        inter_broker_security(node(**{"listener.name.internal.plain.sasl.jaas.config": line}))
    assert "hidden-pw" not in str(caught.value)


def test_the_older_security_inter_broker_protocol_names_the_listener_of_that_protocol():
    config = node(
        **{
            "listeners": "PLAINTEXT://127.0.0.1:9091,SASL_PLAINTEXT://127.0.0.1:9191,"
            "CONTROLLER://127.0.0.1:19091",
            "listener.security.protocol.map": "",
            "inter.broker.listener.name": "",
            "security.inter.broker.protocol": "SASL_PLAINTEXT",
            "listener.name.internal.plain.sasl.jaas.config": "",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_LINE,
        }
    )
    assert config.get("inter.broker.listener.name") == "SASL_PLAINTEXT"
    assert inter_broker_security(config).mechanism == "PLAIN"


def test_security_inter_broker_protocol_without_a_listener_of_that_name_is_refused():
    with pytest.raises(ConfigError, match="no broker listener named SSL"):
        node(**{"inter.broker.listener.name": "", "security.inter.broker.protocol": "SSL"})


def test_a_tls_inter_broker_listener_verifies_the_other_broker_and_offers_its_own_certificate(
    tls: TlsMaterial,
):
    security = inter_broker_security(
        node(
            **{
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SSL,"
                "CONTROLLER:PLAINTEXT",
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(tls.broker_keystore),
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(tls.ca.cert),
            }
        )
    )
    context = security.ssl_context
    assert context is not None and security.mechanism is None
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert [c["subject"] for c in context.get_ca_certs()]  # the CA of the trust store


def test_an_empty_endpoint_identification_algorithm_turns_the_host_name_check_off(
    tls: TlsMaterial,
):
    security = inter_broker_security(
        node(
            **{
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL,"
                "CONTROLLER:PLAINTEXT",
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(tls.broker_keystore),
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(tls.ca.cert),
                "listener.name.internal.ssl.endpoint.identification.algorithm": " ",
            }
        )
    )
    assert security.ssl_context is not None and not security.ssl_context.check_hostname


def test_a_leader_whose_certificate_is_not_trusted_is_an_authentication_failure(
    tls: TlsMaterial,
) -> None:
    """The follower's link says why it cannot replicate (the fetcher logs that once)."""
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(str(tls.broker_keystore))
    untrusting = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # no CA: trusts nothing here

    async def attempt() -> None:
        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.close()

        server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=server_context)
        port = server.sockets[0].getsockname()[1]
        link = BrokerLink(
            "127.0.0.1", port, "replica-2", InterBrokerSecurity("INTERNAL", "SSL", untrusting)
        )
        try:
            await link.call(build(load_request_schema(18, 0), {}), 5.0)
        finally:
            link.close()
            server.close()
            await server.wait_closed()

    with pytest.raises(AuthenticationFailed, match="listener INTERNAL failed: CERTIFICATE_VERIFY"):
        asyncio.run(attempt())
