"""The admin client's security settings and SASL exchanges, without a broker."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbroker.admin.security import SecurityConfigError, from_properties, parse_properties
from kbroker.security.sasl_client import SaslFailure, plain, scram

# RFC 7677 section 3: SCRAM-SHA-256 with user "user", password "pencil".
CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_scram_sha_256_matches_the_rfc_7677_exchange():
    steps = scram("SCRAM-SHA-256", "user", "pencil", nonce=CLIENT_NONCE)
    assert next(steps) == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    assert steps.send(SERVER_FIRST) == CLIENT_FINAL
    with pytest.raises(StopIteration):
        steps.send(SERVER_FINAL)


def test_scram_refuses_a_server_that_cannot_prove_it_knows_the_password():
    steps = scram("SCRAM-SHA-256", "user", "pencil", nonce=CLIENT_NONCE)
    next(steps)
    steps.send(SERVER_FIRST)
    with pytest.raises(SaslFailure, match="signature"):
        steps.send(b"v=" + b"A" * 44)


def test_scram_refuses_a_nonce_that_does_not_extend_the_clients():
    steps = scram("SCRAM-SHA-512", "user", "pencil", nonce=CLIENT_NONCE)
    next(steps)
    with pytest.raises(SaslFailure, match="nonce"):
        steps.send(b"r=someone-else,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")


def test_scram_escapes_comma_and_equals_in_the_user_name():
    assert next(scram("SCRAM-SHA-256", "a,b=c", "p", nonce="n")) == b"n,,n=a=2Cb=3Dc,r=n"


def test_plain_sends_user_and_password_in_one_message():
    assert list(plain("alice", "secret")) == [b"\0alice\0secret"]


def test_kafka_client_properties_give_protocol_mechanism_and_credentials():
    values = parse_properties(
        "# a comment\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="bob" password="s3=cret";\n'
        "ssl.truststore.type=PEM\n"
        "ssl.truststore.location=/etc/kafka/ca.pem\n"
    )
    security = from_properties(values)
    assert (security.protocol, security.mechanism) == ("SASL_SSL", "SCRAM-SHA-512")
    assert (security.username, security.password) == ("bob", "s3=cret")
    assert security.ca_file == Path("/etc/kafka/ca.pem") and security.tls and security.sasl


def test_librdkafka_names_are_read_too():
    security = from_properties(
        {
            "security.protocol": "sasl_plaintext",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": "pw",
            "ssl.endpoint.identification.algorithm": "",
        }
    )
    assert security.protocol == "SASL_PLAINTEXT" and not security.tls
    assert security.username == "alice" and not security.check_hostname


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"security.protocol": "SASL_SSL"}, "GSSAPI"),
        ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}, "username"),
        ({"security.protocol": "SSL", "ssl.truststore.location": "/x.jks"}, "PEM"),
        ({"security.protocol": "QUIC"}, "security.protocol"),
    ],
)
def test_settings_this_client_cannot_honour_are_refused(values, message):
    with pytest.raises(SecurityConfigError, match=message):
        from_properties(values)


OAUTH = {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}
LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


def test_oauthbearer_takes_kafkas_client_credentials_or_librdkafkas():
    kafka = from_properties(
        {
            **OAUTH,
            "sasl.oauthbearer.token.endpoint.url": "https://idp/token",
            "sasl.jaas.config": f'{LOGIN_MODULE} required clientId="svc" clientSecret="s" scope="kafka";',
        }
    )
    assert kafka.bearer is not None
    assert (kafka.bearer.token_url, kafka.bearer.client_id, kafka.bearer.scope) == (
        "https://idp/token",
        "svc",
        "kafka",
    )
    rdkafka = from_properties(
        {
            **OAUTH,
            "sasl.oauthbearer.token.endpoint.url": "https://idp/token",
            "sasl.oauthbearer.client.id": "svc2",
            "sasl.oauthbearer.client.secret": "s2",
        }
    )
    assert rdkafka.bearer is not None and rdkafka.bearer.client_id == "svc2"


def test_oauthbearer_reads_a_token_file_or_mints_an_unsigned_token(tmp_path: Path):
    token_file = tmp_path / "token"
    token_file.write_text("header.payload.signature\n")
    from_file = from_properties(
        {**OAUTH, "sasl.oauthbearer.token.endpoint.url": token_file.as_uri()}
    )
    assert from_file.bearer is not None and from_file.bearer.token() == "header.payload.signature"
    unsigned = from_properties(
        {
            **OAUTH,
            "sasl.jaas.config": f'{LOGIN_MODULE} required unsecuredLoginStringClaim_sub="bob";',
        }
    )
    assert unsigned.bearer is not None
    assert unsigned.bearer.token().startswith("eyJhbGciOiJub25lIn0.")  # {"alg":"none"}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (OAUTH, "unsecuredLoginStringClaim_sub"),
        ({**OAUTH, "sasl.oauthbearer.token.endpoint.url": "https://idp/token"}, "clientId"),
        (
            {**OAUTH, "sasl.oauthbearer.token.endpoint.url": "file:///nonexistent/token"},
            "cannot read the token file",
        ),
    ],
)
def test_oauthbearer_without_a_way_to_a_token_says_what_is_missing(values, message):
    with pytest.raises(SecurityConfigError, match=message):
        from_properties(values).bearer.token()  # type: ignore[union-attr]
