"""SASL PLAIN and SCRAM exchanges as the broker runs them, without a socket."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbroker.security.jaas import parse_jaas, plain_users
from kbroker.security.principal import user
from kbroker.security.sasl import PlainServer, SaslFailure, SaslSession
from kbroker.security.scram import (
    ScramCredential,
    ScramError,
    ScramServer,
    credential_from_salted,
    salted_password,
)

USERS = {"alice": "alice-secret", "admin": "admin-secret"}


def stored(mechanism: str, password: str, iterations: int = 4096) -> ScramCredential:
    salt = os.urandom(16)
    return credential_from_salted(
        mechanism, salt, iterations, salted_password(mechanism, password, salt, iterations)
    )


class ScramClient:
    """RFC 5802's client side, written from the RFC for these tests."""

    def __init__(self, mechanism: str, name: str, password: str) -> None:
        self.hash = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
        self.mechanism, self.name, self.password = mechanism, name, password
        self.nonce = base64.b64encode(os.urandom(18)).decode().replace("=", "")
        self.bare = f"n={name},r={self.nonce}"

    def first(self) -> bytes:
        return f"n,,{self.bare}".encode()

    def final(self, server_first: bytes, nonce: str | None = None) -> bytes:
        fields = dict(part.split("=", 1) for part in server_first.decode().split(","))
        salt, iterations = base64.b64decode(fields["s"]), int(fields["i"])
        salted = hashlib.pbkdf2_hmac(self.hash, self.password.encode(), salt, iterations)
        client_key = hmac.new(salted, b"Client Key", self.hash).digest()
        stored_key = hashlib.new(self.hash, client_key).digest()
        without_proof = f"c=biws,r={nonce or fields['r']}"
        auth = f"{self.bare},{server_first.decode()},{without_proof}".encode()
        signature = hmac.new(stored_key, auth, self.hash).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = hmac.new(salted, b"Server Key", self.hash).digest()
        self.expected_server_signature = hmac.new(server_key, auth, self.hash).digest()
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_exchange_with_the_right_password_proves_both_sides(mechanism: str) -> None:
    credential = stored(mechanism, "pw")
    server = ScramServer(mechanism, lambda name: credential if name == "bob" else None)
    client = ScramClient(mechanism, "bob", "pw")
    server_first = server.evaluate(client.first())
    assert server_first.startswith(f"r={client.nonce}".encode())  # our nonce, extended
    server_final = server.evaluate(client.final(server_first))
    assert server.complete and server.user == "bob"
    assert server_final == b"v=" + base64.b64encode(client.expected_server_signature)


def test_scram_refuses_a_wrong_password() -> None:
    credential = stored("SCRAM-SHA-512", "pw")
    server = ScramServer("SCRAM-SHA-512", lambda name: credential)
    client = ScramClient("SCRAM-SHA-512", "bob", "not-pw")
    server_first = server.evaluate(client.first())
    with pytest.raises(ScramError, match="invalid credentials"):
        server.evaluate(client.final(server_first))
    assert not server.complete


def test_scram_refuses_a_final_message_with_another_nonce() -> None:
    credential = stored("SCRAM-SHA-256", "pw")
    server = ScramServer("SCRAM-SHA-256", lambda name: credential)
    client = ScramClient("SCRAM-SHA-256", "bob", "pw")
    server_first = server.evaluate(client.first())
    with pytest.raises(ScramError, match="nonce"):
        server.evaluate(client.final(server_first, nonce=client.nonce + "forged"))


def test_scram_refuses_an_unknown_user_as_it_refuses_a_wrong_password() -> None:
    server = ScramServer("SCRAM-SHA-256", lambda name: None)
    with pytest.raises(ScramError, match="invalid credentials"):
        server.evaluate(ScramClient("SCRAM-SHA-256", "nobody", "pw").first())


def test_scram_messages_out_of_order_fail() -> None:
    credential = stored("SCRAM-SHA-256", "pw")
    server = ScramServer("SCRAM-SHA-256", lambda name: credential)
    with pytest.raises(ScramError):
        server.evaluate(b"c=biws,r=abc,p=AAAA")  # a final message first
    with pytest.raises(ScramError):
        server.evaluate(ScramClient("SCRAM-SHA-256", "bob", "pw").first())  # after a failure


def test_scram_refuses_channel_binding() -> None:
    server = ScramServer("SCRAM-SHA-256", lambda name: stored("SCRAM-SHA-256", "pw"))
    with pytest.raises(ScramError, match="channel binding"):
        server.evaluate(b"p=tls-unique,,n=bob,r=abc")


def test_stored_credentials_do_not_contain_the_salted_password() -> None:
    salt = os.urandom(16)
    salted = salted_password("SCRAM-SHA-512", "pw", salt, 4096)
    credential = credential_from_salted("SCRAM-SHA-512", salt, 4096, salted)
    assert salted not in (credential.stored_key, credential.server_key)


def test_plain_accepts_a_jaas_user_and_names_the_principal() -> None:
    session = SaslSession(("PLAIN",), USERS, lambda name, mechanism: None)
    assert session.handshake("PLAIN", 1)
    answer, done = session.authenticate(b"\0alice\0alice-secret")
    assert (answer, done) == (b"", True)
    assert session.principal == user("alice")


@pytest.mark.parametrize(
    "token",
    [
        b"\0alice\0wrong",
        b"\0nobody\0alice-secret",
        b"alice\0alice-secret",
        b"admin\0alice\0alice-secret",
    ],
)
def test_plain_refuses_bad_credentials(token: bytes) -> None:
    with pytest.raises(SaslFailure):
        PlainServer(USERS).evaluate(token)


def test_a_mechanism_that_is_not_enabled_is_refused() -> None:
    session = SaslSession(("SCRAM-SHA-512",), {}, lambda name, mechanism: None)
    assert not session.handshake("PLAIN", 1)
    assert not session.handshake("GSSAPI", 1)


def test_reauthentication_may_not_change_the_principal() -> None:
    session = SaslSession(("PLAIN",), USERS, lambda name, mechanism: None)
    session.handshake("PLAIN", 1)
    session.authenticate(b"\0alice\0alice-secret")
    session.handshake("PLAIN", 1)
    with pytest.raises(SaslFailure, match="Cannot change principals"):
        session.authenticate(b"\0admin\0admin-secret")


@settings(max_examples=300, deadline=None)
@given(
    mechanism=st.sampled_from(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]),
    tokens=st.lists(st.binary(max_size=200), min_size=1, max_size=4),
)
@pytest.mark.slow
def test_any_tokens_end_in_success_or_a_sasl_failure_only(
    mechanism: str, tokens: list[bytes]
) -> None:
    credential = stored(mechanism, "pw") if mechanism != "PLAIN" else None
    session = SaslSession(
        ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"), USERS, lambda name, m: credential
    )
    assert session.handshake(mechanism, 1)
    for token in tokens:
        try:
            session.authenticate(token)
        except SaslFailure as exc:
            assert "pw" not in str(exc) and "secret" not in str(exc)
            return


def test_plain_users_come_from_the_jaas_line() -> None:
    entry = parse_jaas(
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin-secret" user_admin="admin-secret" user_alice="a;b";'
    )
    assert plain_users(entry) == {"admin": "admin-secret", "alice": "a;b"}


@pytest.mark.parametrize(
    "text",
    [
        "PlainLoginModule",
        'org.apache.kafka.common.security.plain.PlainLoginModule always user_a="x";',
        'org.apache.kafka.common.security.plain.PlainLoginModule required user_a="x"',
    ],
)
def test_a_malformed_jaas_line_is_refused_without_quoting_values(text: str) -> None:
    with pytest.raises(ValueError) as failure:
        parse_jaas(text)
    assert '"x"' not in str(failure.value)
