"""SASL/OAUTHBEARER as a Kafka broker runs it, without a socket: the client's message,
unsigned tokens (Kafka's unsecured validator), signed tokens checked with a JWKS
(Kafka's OAuthBearerValidatorCallbackHandler), the listener's settings, the session's
end at the token's expiry, and a broker's own unsigned login."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from hypothesis import given
from hypothesis import strategies as st
from test_inter_broker_security import node

from kbroker.config import BrokerConfig, ConfigError
from kbroker.config.listeners import Endpoint
from kbroker.security.inter_broker import inter_broker_security
from kbroker.security.jwks import JwksSource
from kbroker.security.jwt import (
    SignedOptions,
    TokenRefused,
    UnsecuredOptions,
    check_signed,
    check_unsecured,
    parse_jwks,
    unsigned_token,
)
from kbroker.security.listener import listener_security
from kbroker.security.oauth_login import TokenEndpointError, UnsecuredLogin
from kbroker.security.oauthbearer import InitialResponse
from kbroker.security.principal import user
from kbroker.security.sasl import LONGEST_MS, SaslFailure, SaslSession, session_lifetime_ms
from kbroker.security.sasl_client import oauthbearer

MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
SIGNED = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
NOW = 1_800_000_000.0


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64_int(value: int) -> str:
    return b64(value.to_bytes((value.bit_length() + 7) // 8, "big"))


# -- signing keys and tokens, as an identity provider makes them ----------------------------

RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())
ED_KEY = ed25519.Ed25519PrivateKey.generate()
ENC_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
HMAC_SECRET = b"a shared secret of thirty-two by"


def rsa_jwk(key: rsa.RSAPrivateKey, kid: str) -> dict[str, Any]:
    numbers = key.public_key().public_numbers()
    return {
        "kty": "RSA",
        "kid": kid,
        "use": "sig",
        "n": b64_int(numbers.n),
        "e": b64_int(numbers.e),
    }


def jwks(*keys: dict[str, Any]) -> str:
    return json.dumps({"keys": list(keys)})


JWKS = jwks(
    rsa_jwk(RSA_KEY, "rsa-1"),
    {
        "kty": "EC",
        "kid": "ec-1",
        "crv": "P-256",
        "x": b64_int(EC_KEY.public_key().public_numbers().x),
        "y": b64_int(EC_KEY.public_key().public_numbers().y),
    },
    {
        "kty": "OKP",
        "kid": "ed-1",
        "crv": "Ed25519",
        "x": b64(ED_KEY.public_key().public_bytes_raw()),
    },
    {"kty": "oct", "kid": "hs-1", "k": b64(HMAC_SECRET)},
    {**rsa_jwk(ENC_KEY, "enc-1"), "use": "enc"},
)
KEYS = parse_jwks(JWKS)


def sign(alg: str, signing_input: bytes, key: Any = None) -> bytes:
    if alg.startswith("RS"):
        return (key or RSA_KEY).sign(signing_input, padding.PKCS1v15(), hashes.SHA256())
    if alg.startswith("PS"):
        pss = padding.PSS(padding.MGF1(hashes.SHA256()), 32)
        return (key or RSA_KEY).sign(signing_input, pss, hashes.SHA256())
    if alg.startswith("ES"):
        r, s = decode_dss_signature(EC_KEY.sign(signing_input, ec.ECDSA(hashes.SHA256())))
        return r.to_bytes(32, "big") + s.to_bytes(32, "big")
    if alg == "EdDSA":
        return ED_KEY.sign(signing_input)
    return hmac.new(HMAC_SECRET, signing_input, hashlib.sha256).digest()


def signed_token(
    claims: dict[str, Any] | None = None,
    alg: str = "RS256",
    kid: str | None = "rsa-1",
    key: Any = None,
) -> str:
    header: dict[str, Any] = {"alg": alg, "typ": "JWT"}
    if kid is not None:
        header["kid"] = kid
    body = {"sub": "alice", "iat": NOW - 10, "exp": NOW + 3600, "scope": "kafka"}
    body.update(claims or {})
    body = {k: v for k, v in body.items() if v is not None}
    head = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(body).encode())}"
    return f"{head}.{b64(sign(alg, head.encode(), key))}"


def unsigned(claims: dict[str, Any]) -> str:
    return unsigned_token({k: v for k, v in claims.items() if v is not None})


# -- the client's first message ----------------------------------------------------------------


def test_the_first_message_carries_the_token_the_authorization_id_and_extensions():
    parsed = InitialResponse.parse(b"n,a=alice,\x01auth=Bearer abc.def.\x01traceId=42\x01\x01")
    assert (parsed.token, parsed.authorization_id, parsed.extensions) == (
        "abc.def.",
        "alice",
        {"traceId": "42"},
    )
    assert InitialResponse.parse(b"n,,\x01auth=bearer xyz\x01\x01").token == "xyz"


@pytest.mark.parametrize(
    "message",
    [
        b"",
        b"n,,\x01\x01",  # no auth
        b"n,,\x01auth=Basic abc\x01\x01",  # not a bearer token
        b"n,,\x01auth=Bearer abc\x01",  # no closing separator
        b"y,,\x01auth=Bearer abc\x01\x01",  # channel binding flag Kafka does not take
        b"n,,\x01auth=Bearer a b\x01\x01",
        b"n,,\x01auth=Bearer abc\x01bad key=1\x01\x01",
        b"n,,\x01auth=Bearer abc\x01\x01\x01",
        b"\xff\xfe",
    ],
)
def test_a_malformed_first_message_is_refused(message: bytes):
    with pytest.raises(ValueError, match="OAUTHBEARER"):
        InitialResponse.parse(message)


@given(st.binary(max_size=200))
def test_any_bytes_are_parsed_or_refused_with_a_value_error(data: bytes):
    try:
        parsed = InitialResponse.parse(data)
    except ValueError:
        return
    assert parsed.token and parsed.token.encode() in data and " " not in parsed.token
    assert "auth" not in parsed.extensions


# -- unsigned tokens (Kafka's OAuthBearerUnsecuredValidatorCallbackHandler) ------------------


def test_an_unsigned_token_names_its_principal_scope_and_expiry():
    token = unsigned({"sub": "alice", "iat": NOW, "exp": NOW + 60, "scope": ["a", "b"]})
    accepted = check_unsecured(token, UnsecuredOptions(), int(NOW * 1000))
    assert (accepted.principal, accepted.scope) == ("alice", frozenset({"a", "b"}))
    assert accepted.expires_ms == int((NOW + 60) * 1000)


@pytest.mark.parametrize(
    ("claims", "reason"),
    [
        ({"sub": "alice"}, "No expiration time"),
        ({"exp": NOW + 60}, "Required claim missing: sub"),
        ({"sub": "  ", "exp": NOW + 60}, "No principal name"),
        ({"sub": 7, "exp": NOW + 60}, "incorrect type"),
        ({"sub": "alice", "exp": NOW - 1}, "expired"),
        ({"sub": "alice", "exp": NOW + 60, "iat": NOW + 30}, "in the future"),
        ({"sub": "alice", "exp": "soon"}, "not a number"),
        ({"sub": "alice", "exp": NOW + 60, "iat": 1e308}, "in the future"),
    ],
)
def test_an_unsigned_token_without_what_kafka_requires_is_refused(
    claims: dict[str, Any], reason: str
):
    with pytest.raises(TokenRefused, match=reason):
        check_unsecured(unsigned(claims), UnsecuredOptions(), int(NOW * 1000))


def test_an_unsigned_check_refuses_a_signed_token():
    with pytest.raises(TokenRefused, match="'none'"):
        check_unsecured(signed_token(), UnsecuredOptions(), int(NOW * 1000))


def test_a_token_expiring_as_late_as_a_float_goes_is_accepted():
    token = unsigned({"sub": "alice", "exp": 1.7e308})
    assert check_unsecured(token, UnsecuredOptions(), int(NOW * 1000)).expires_ms > 10**308
    signed = check_signed(signed_token({"exp": 1.7e308}), SignedOptions(), KEYS, NOW)
    assert signed.expires_ms > 10**308


def test_the_jaas_options_set_the_claims_the_clock_skew_and_the_required_scope():
    options = UnsecuredOptions.from_jaas(
        {
            "unsecuredValidatorPrincipalClaimName": "user",
            "unsecuredValidatorScopeClaimName": "roles",
            "unsecuredValidatorRequiredScope": "kafka write",
            "unsecuredValidatorAllowableClockSkewMs": "5000",
        }
    )
    good = {"user": "bob", "exp": NOW - 2, "roles": ["kafka", "write", "x"]}
    assert check_unsecured(unsigned(good), options, int(NOW * 1000)).principal == "bob"
    with pytest.raises(TokenRefused) as refused:
        check_unsecured(unsigned({**good, "roles": ["kafka"]}), options, int(NOW * 1000))
    assert refused.value.scope == "[kafka, write]"
    with pytest.raises(ValueError, match="negative"):
        UnsecuredOptions.from_jaas({"unsecuredValidatorAllowableClockSkewMs": "-1"})


# -- signed tokens (OAuthBearerValidatorCallbackHandler) ----------------------------------------


@pytest.mark.parametrize(
    ("alg", "kid"),
    [
        ("RS256", "rsa-1"),
        ("PS256", "rsa-1"),
        ("ES256", "ec-1"),
        ("EdDSA", "ed-1"),
        ("HS256", "hs-1"),
        ("RS256", None),
    ],
)
def test_a_token_signed_with_a_key_of_the_jwks_is_accepted(alg: str, kid: str | None):
    accepted = check_signed(signed_token(alg=alg, kid=kid), SignedOptions(), KEYS, NOW)
    assert (accepted.principal, accepted.scope) == ("alice", frozenset({"kafka"}))
    assert accepted.expires_ms == int((NOW + 3600) * 1000)


def test_a_signature_by_another_key_or_over_other_claims_is_refused():
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with pytest.raises(TokenRefused, match="does not verify"):
        check_signed(signed_token(key=other), SignedOptions(), KEYS, NOW)
    head, _body, signature = signed_token().split(".")
    forged = b64(json.dumps({"sub": "admin", "iat": NOW, "exp": NOW + 60}).encode())
    with pytest.raises(TokenRefused, match="does not verify"):
        check_signed(f"{head}.{forged}.{signature}", SignedOptions(), KEYS, NOW)


@pytest.mark.parametrize(
    "token",
    [
        unsigned_token({"sub": "alice", "iat": NOW, "exp": NOW + 60}),  # alg none
        "a.b",
        "not a token",
    ],
)
def test_an_unsigned_or_malformed_token_is_refused_by_the_signed_check(token: str):
    with pytest.raises(TokenRefused):
        check_signed(token, SignedOptions(), KEYS, NOW)


def test_a_token_naming_a_key_the_jwks_lacks_says_so():
    with pytest.raises(TokenRefused, match="no key of the JWKS") as refused:
        check_signed(signed_token(kid="rotated"), SignedOptions(), KEYS, NOW)
    assert getattr(refused.value, "kid", None) == "rotated"


def test_a_key_of_the_jwks_for_encryption_or_another_algorithm_does_not_verify():
    with pytest.raises(TokenRefused, match="no key of the JWKS"):
        check_signed(signed_token(kid="enc-1", key=ENC_KEY), SignedOptions(), KEYS, NOW)
    with pytest.raises(TokenRefused, match="no key of the JWKS"):
        check_signed(signed_token(alg="ES256", kid="rsa-1"), SignedOptions(), KEYS, NOW)


@pytest.mark.parametrize(
    ("claims", "options", "reason"),
    [
        ({"exp": NOW - 31}, SignedOptions(), "no longer valid"),
        ({"exp": None}, SignedOptions(), "No Expiration Time"),
        ({"iat": None}, SignedOptions(), "No Issued At"),
        ({"nbf": NOW + 60}, SignedOptions(), "not yet valid"),
        ({"sub": None}, SignedOptions(), "Required claim missing: sub"),
        ({"aud": "kafka"}, SignedOptions(), "expected.audience is not set"),
        ({}, SignedOptions(audiences=frozenset({"kafka"})), "No Audience"),
        ({"aud": ["web"]}, SignedOptions(audiences=frozenset({"kafka"})), "none of the expected"),
        ({"iss": "https://evil"}, SignedOptions(issuer="https://idp"), "not the expected issuer"),
        ({}, SignedOptions(issuer="https://idp"), "not the expected issuer"),
    ],
)
def test_the_claims_of_a_signed_token_are_checked_as_kafka_checks_them(
    claims: dict[str, Any], options: SignedOptions, reason: str
):
    with pytest.raises(TokenRefused, match=reason):
        check_signed(signed_token(claims), options, KEYS, NOW)


def test_clock_skew_audience_issuer_and_claim_names_accept_what_they_name():
    options = SignedOptions(
        clock_skew_s=30,
        audiences=frozenset({"kafka", "other"}),
        issuer="https://idp",
        sub_claim="client_id",
        scope_claim="scp",
    )
    token = signed_token(
        {"exp": NOW - 20, "aud": ["kafka"], "iss": "https://idp", "client_id": "svc", "scp": ["a"]}
    )
    accepted = check_signed(token, options, KEYS, NOW)
    assert (accepted.principal, accepted.scope) == ("svc", frozenset({"a"}))


def test_a_jwks_skips_keys_it_cannot_use_and_refuses_what_is_not_a_jwks():
    assert {k.kid for k in KEYS} == {"rsa-1", "ec-1", "ed-1", "hs-1", "enc-1"}
    assert len(parse_jwks(jwks({"kty": "RSA", "kid": "x"}, {"kty": "weird"}))) == 0
    for text in ("[]", "{}", "not json", '{"keys": 3}'):
        with pytest.raises(ValueError):
            parse_jwks(text)


# -- the exchange ------------------------------------------------------------------------------


def session(validate: Any) -> SaslSession:
    sasl = SaslSession(("OAUTHBEARER",), {}, lambda _u, _m: None, bearer=validate)
    assert sasl.handshake("OAUTHBEARER", 1)
    return sasl


def check_signed_now(token: str):
    return check_signed(token, SignedOptions(), KEYS, NOW)


def test_an_accepted_token_authenticates_its_principal_until_its_expiry():
    sasl = session(check_signed_now)
    steps = oauthbearer(signed_token(), {"traceId": "1"})
    answer, done = sasl.authenticate(next(steps))
    assert (answer, done) == (b"", True)
    assert sasl.principal == user("alice")
    assert sasl.credential_expires_ms == int((NOW + 3600) * 1000)


def test_a_refused_token_is_answered_with_the_json_status_then_fails_on_the_clients_ack():
    sasl = session(check_signed_now)
    steps = oauthbearer(signed_token({"exp": NOW - 3600}))
    challenge, done = sasl.authenticate(next(steps))
    assert not done
    assert json.loads(challenge) == {"status": "invalid_token"}
    with pytest.raises(SaslFailure) as failure:
        sasl.authenticate(steps.send(challenge))
    assert str(failure.value) == '{"status":"invalid_token"}'
    assert "no longer valid" in failure.value.reason
    assert signed_token() not in failure.value.reason


def test_an_authorization_id_other_than_the_tokens_principal_is_refused():
    sasl = session(check_signed_now)
    message = f"n,a=admin,\x01auth=Bearer {signed_token()}\x01\x01".encode()
    with pytest.raises(SaslFailure, match="authorization id"):
        sasl.authenticate(message)


def test_a_listener_without_oauthbearer_refuses_the_mechanism():
    sasl = SaslSession(("PLAIN",), {}, lambda _u, _m: None)
    assert not sasl.handshake("OAUTHBEARER", 1)


@pytest.mark.parametrize(
    ("max_reauth_ms", "expires_ms", "expected"),
    [
        (0, None, None),
        (5000, None, 5000),
        (0, 12_000, 2000),
        (1000, 12_000, 1000),
        (5000, 9_000, 0),
        (0, 10**303, LONGEST_MS),  # a token of any expiry fits the answer
    ],
)
def test_a_session_ends_at_the_earlier_of_the_token_expiry_and_max_reauth(
    max_reauth_ms: int, expires_ms: int | None, expected: int | None
):
    assert session_lifetime_ms(max_reauth_ms, expires_ms, 10_000) == expected


# -- a listener's settings -------------------------------------------------------------------


def listener_config(tmp_path: Path | None = None, **extra: str) -> BrokerConfig:
    settings = {
        "node.id": "1",
        "listeners": "PLAINTEXT://127.0.0.1:9092,AUTH://127.0.0.1:9093",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,AUTH:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.auth.oauthbearer.sasl.jaas.config": f"{MODULE} required;",
        **extra,
    }
    return BrokerConfig.from_settings({k: v for k, v in settings.items() if v})


def auth_endpoint(config: BrokerConfig) -> Endpoint:
    return next(e for e in config.broker_endpoints if e.name == "AUTH")


def test_a_listener_checks_unsigned_tokens_by_default():
    security = listener_security(listener_config(), auth_endpoint(listener_config()))
    assert security.mechanisms == ("OAUTHBEARER",)
    assert security.bearer is not None and security.bearer.unsecured == UnsecuredOptions()


def test_a_listener_with_kafkas_validator_reads_a_file_jwks_and_the_expected_claims(tmp_path):
    keys = tmp_path / "jwks.json"
    keys.write_text(JWKS)
    config = listener_config(
        **{
            "listener.name.auth.oauthbearer.sasl.server.callback.handler.class": SIGNED,
            "listener.name.auth.oauthbearer.sasl.oauthbearer.jwks.endpoint.url": keys.as_uri(),
            "sasl.oauthbearer.expected.audience": "kafka,web",
            "listener.name.auth.sasl.oauthbearer.expected.issuer": "https://idp",
        }
    )
    bearer = listener_security(config, auth_endpoint(config)).bearer
    assert bearer is not None and bearer.signed is not None
    assert bearer.signed.audiences == frozenset({"kafka", "web"})
    assert bearer.signed.issuer == "https://idp"
    validate = bearer.validator(None)
    token = signed_token(
        {"aud": "kafka", "iss": "https://idp", "exp": time.time() + 60, "iat": time.time()}
    )
    assert validate(token).principal == "alice"


def test_connections_max_reauth_ms_is_read_per_mechanism_then_per_listener():
    scoped = listener_config(
        **{
            "listener.name.auth.oauthbearer.connections.max.reauth.ms": "5000",
            "listener.name.auth.connections.max.reauth.ms": "9000",
        }
    )
    assert listener_security(scoped, auth_endpoint(scoped)).max_reauth_ms("OAUTHBEARER") == 5000
    listener_wide = listener_config(**{"listener.name.auth.connections.max.reauth.ms": "9000"})
    security = listener_security(listener_wide, auth_endpoint(listener_wide))
    assert security.max_reauth_ms("OAUTHBEARER") == 9000


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            {"listener.name.auth.oauthbearer.sasl.server.callback.handler.class": SIGNED},
            "needs sasl.oauthbearer.jwks.endpoint.url",
        ),
        (
            {
                "listener.name.auth.oauthbearer.sasl.server.callback.handler.class": SIGNED,
                "sasl.oauthbearer.jwks.endpoint.url": "file:///nonexistent/jwks.json",
            },
            "No such file",
        ),
        (
            {
                "listener.name.auth.oauthbearer.sasl.server.callback.handler.class": SIGNED,
                "sasl.oauthbearer.jwks.endpoint.url": "ftp://idp/jwks",
            },
            "must be an https://",
        ),
        ({"listener.name.auth.oauthbearer.sasl.jaas.config": ""}, "OAUTHBEARER needs"),
        (
            {
                "listener.name.auth.oauthbearer.sasl.jaas.config": f'{MODULE} required unsecuredValidatorAllowableClockSkewMs="soon";'
            },
            "not an integer",
        ),
    ],
)
def test_an_oauthbearer_check_kbroker_cannot_run_stops_the_start(
    extra: dict[str, str], message: str
):
    config = listener_config(**extra)
    with pytest.raises(ConfigError, match=message):
        listener_security(config, auth_endpoint(config))


def test_a_plugin_class_kbroker_does_not_have_is_refused_at_start():
    with pytest.raises(ConfigError, match="unknown setting"):
        listener_config(**{"sasl.oauthbearer.jwt.validator.class": "com.x.Plugin"})
    for name in (
        "sasl.login.callback.handler.class",
        "listener.name.auth.oauthbearer.sasl.login.callback.handler.class",
        "sasl.server.callback.handler.class",
    ):
        with pytest.raises(ConfigError, match=name):
            listener_config(**{name: "com.x.Plugin"})


# -- the JWKS behind a URL ---------------------------------------------------------------------


def test_a_jwks_url_is_fetched_again_when_a_token_names_a_key_it_lacks_but_not_every_time():
    fetched: list[int] = []
    served = [KEYS[:1]]

    def fetch(_url: str):
        fetched.append(1)
        return served[-1]

    async def scenario() -> None:
        source = JwksSource("https://idp/jwks", 3_600_000, 10, 100, fetch=fetch)
        task = asyncio.create_task(source.run())
        await asyncio.wait_for(source.fetched.wait(), 5)
        assert [k.kid for k in source.keys] == ["rsa-1"]
        served.append(KEYS[:2])  # the provider adds a key
        source.missed("ec-1")
        while source.fetches < 2:
            await asyncio.sleep(0.01)
        assert [k.kid for k in source.keys] == ["rsa-1", "ec-1"]
        source.missed("ec-1")  # the same key id again within a minute: no new fetch
        source.missed("ec-1")
        await asyncio.sleep(0.1)
        assert source.fetches == 2
        task.cancel()

    asyncio.run(scenario())


def test_tokens_naming_ever_new_key_ids_fetch_at_most_once_a_second():
    def fetch(_url: str):
        return KEYS

    async def scenario() -> int:
        source = JwksSource("https://idp/jwks", 3_600_000, 10, 100, fetch=fetch)
        task = asyncio.create_task(source.run())
        await asyncio.wait_for(source.fetched.wait(), 5)
        started = time.monotonic()
        for i in range(200):  # the input: made-up key ids for half a second
            source.missed(f"made-up-{i}")
            await asyncio.sleep(0.0025)
        while time.monotonic() - started < 0.5:
            await asyncio.sleep(0.01)
        task.cancel()
        return source.fetches

    assert asyncio.run(scenario()) <= 2  # the start's fetch and at most one more


def test_a_failed_fetch_keeps_the_keys_and_retries():
    answers: list[Any] = [KEYS[:1], OSError("connection refused"), OSError("refused"), KEYS[:2]]

    def fetch(_url: str):
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def scenario() -> None:
        source = JwksSource("https://idp/jwks", 3_600_000, 5, 20, fetch=fetch)
        task = asyncio.create_task(source.run())
        await asyncio.wait_for(source.fetched.wait(), 5)
        source.missed("ec-1")
        while source.fetches < 2:
            assert [k.kid for k in source.keys] == ["rsa-1"]
            await asyncio.sleep(0.005)
        assert [k.kid for k in source.keys] == ["rsa-1", "ec-1"]
        task.cancel()

    asyncio.run(scenario())


# -- a broker's own login over OAUTHBEARER -------------------------------------------------


def inter_broker_config(**extra: str) -> BrokerConfig:
    """test_inter_broker_security's node, its INTERNAL listener on OAUTHBEARER."""
    return node(
        **{
            "sasl.enabled.mechanisms": "OAUTHBEARER",
            "sasl.mechanism.inter.broker.protocol": "OAUTHBEARER",
            "listener.name.internal.plain.sasl.jaas.config": "",
            "listener.name.internal.oauthbearer.sasl.jaas.config": (
                f'{MODULE} required unsecuredLoginStringClaim_sub="broker" '
                'unsecuredLoginListClaim_scope=",kafka,internal" '
                'unsecuredLoginLifetimeSeconds="600" unsecuredLoginExtension_traceId="t1";'
            ),
            **extra,
        }
    )


def test_a_broker_logs_in_to_another_with_a_fresh_unsigned_token_its_listener_accepts():
    config = inter_broker_config()
    security = inter_broker_security(config)
    assert (security.mechanism, security.username) == ("OAUTHBEARER", "broker")
    listener = listener_security(
        config, next(e for e in config.broker_endpoints if e.name == "INTERNAL")
    )
    assert listener.bearer is not None
    sasl = session(listener.bearer.validator(None))
    before = time.time()
    answer, done = sasl.authenticate(next(security.login()))
    assert (answer, done) == (b"", True)
    assert sasl.principal == user("broker")
    assert sasl.credential_expires_ms is not None
    assert before + 599 <= sasl.credential_expires_ms / 1000 <= time.time() + 601


def provider_login_config(tmp_path: Path, **extra: str) -> BrokerConfig:
    jwks_file = tmp_path / "jwks.json"
    jwks_file.write_text(JWKS)
    token_file = tmp_path / "token"
    token_file.write_text(signed_token({"sub": "broker", "exp": time.time() + 600}) + "\n")
    prefix = "listener.name.internal.oauthbearer."
    return inter_broker_config(
        **{
            f"{prefix}sasl.jaas.config": f'{MODULE} required clientId="broker" clientSecret="s";',
            f"{prefix}sasl.server.callback.handler.class": SIGNED,
            f"{prefix}sasl.oauthbearer.jwks.endpoint.url": jwks_file.as_uri(),
            f"{prefix}sasl.login.callback.handler.class": (
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
            ),
            "sasl.oauthbearer.token.endpoint.url": token_file.as_uri(),
            **extra,
        }
    )


def test_a_broker_logs_in_with_the_providers_token_which_its_listener_verifies(tmp_path):
    config = provider_login_config(tmp_path)
    security = inter_broker_security(config)
    assert security.oidc is not None and security.username == "broker"
    asyncio.run(security.prepare())
    internal = next(e for e in config.broker_endpoints if e.name == "INTERNAL")
    listener = listener_security(config, internal)
    assert listener.bearer is not None and listener.bearer.signed is not None
    sasl = session(listener.bearer.validator(None))
    assert sasl.authenticate(next(security.login())) == (b"", True)
    assert sasl.principal == user("broker")


def test_a_provider_login_takes_its_client_scope_timeouts_and_backoff_from_the_settings(
    tmp_path,
):
    prefix = "listener.name.internal.oauthbearer."
    config = provider_login_config(
        tmp_path,
        **{
            f"{prefix}sasl.jaas.config": f"{MODULE} required;",  # no clientId in the line
            "sasl.oauthbearer.client.credentials.client.id": "svc-broker",
            "sasl.oauthbearer.client.credentials.client.secret": "s3",
            "sasl.oauthbearer.scope": "replication",
            "sasl.login.connect.timeout.ms": "2000",
            f"{prefix}sasl.login.read.timeout.ms": "7000",
            "sasl.login.retry.backoff.ms": "250",
            "sasl.login.retry.backoff.max.ms": "4000",
        },
    )
    oidc = inter_broker_security(config).oidc
    assert oidc is not None
    assert (oidc.client_id, oidc.client_secret, oidc.scope) == ("svc-broker", "s3", "replication")
    assert (oidc.timeout_s, oidc.backoff_s, oidc.backoff_max_s) == (7.0, 0.25, 4.0)


def test_a_provider_login_retries_a_failed_fetch_after_its_backoff(tmp_path):
    config = provider_login_config(
        tmp_path,
        **{
            "sasl.oauthbearer.token.endpoint.url": (tmp_path / "no-token-yet").as_uri(),
            "sasl.login.retry.backoff.ms": "100",
            "sasl.login.retry.backoff.max.ms": "150",
        },
    )
    oidc = inter_broker_security(config).oidc
    assert oidc is not None
    started = time.monotonic()
    with pytest.raises(TokenEndpointError, match="cannot read the token file"):
        asyncio.run(oidc.refresh(attempts=3))
    assert time.monotonic() - started >= 0.1 + 0.15  # waited 100 ms, then at most 150 ms


def test_a_listeners_signed_check_takes_the_jwks_and_claim_settings(tmp_path):
    config = listener_config(
        **{
            "listener.name.auth.oauthbearer.sasl.server.callback.handler.class": SIGNED,
            "sasl.oauthbearer.jwks.endpoint.url": "https://idp.test/jwks",
            "sasl.oauthbearer.jwks.endpoint.refresh.ms": "60000",
            "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms": "50",
            "listener.name.auth.sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms": "900",
            "sasl.oauthbearer.clock.skew.seconds": "5",
            "sasl.oauthbearer.scope.claim.name": "scp",
            "listener.name.auth.oauthbearer.sasl.oauthbearer.sub.claim.name": "client_id",
        }
    )
    bearer = listener_security(config, auth_endpoint(config)).bearer
    assert bearer is not None and bearer.signed is not None
    assert (bearer.jwks_url, bearer.refresh_ms, bearer.backoff_ms, bearer.backoff_max_ms) == (
        "https://idp.test/jwks",
        60000,
        50,
        900,
    )
    assert (bearer.signed.clock_skew_s, bearer.signed.scope_claim, bearer.signed.sub_claim) == (
        5,
        "scp",
        "client_id",
    )
    source = JwksSource(
        bearer.jwks_url, bearer.refresh_ms, bearer.backoff_ms, bearer.backoff_max_ms
    )
    assert (source.refresh_s, source.backoff_s, source.backoff_max_s) == (60.0, 0.05, 0.9)


def test_a_provider_login_needs_its_endpoint_and_a_check_of_signed_tokens(tmp_path):
    with pytest.raises(ConfigError, match="token.endpoint.url"):
        inter_broker_security(
            provider_login_config(tmp_path, **{"sasl.oauthbearer.token.endpoint.url": ""})
        )
    unsigned_check = "listener.name.internal.oauthbearer.sasl.server.callback.handler.class"
    with pytest.raises(ConfigError, match="check of unsigned tokens refuses"):
        inter_broker_security(provider_login_config(tmp_path, **{unsigned_check: ""}))


def test_a_broker_login_without_a_principal_or_against_a_signed_check_is_refused_at_start():
    with pytest.raises(ConfigError, match="unsecuredLoginStringClaim_sub"):
        inter_broker_security(
            inter_broker_config(
                **{"listener.name.internal.oauthbearer.sasl.jaas.config": f"{MODULE} required;"}
            )
        )
    with pytest.raises(ConfigError, match="unsigned token"):
        inter_broker_security(
            inter_broker_config(
                **{
                    "listener.name.internal.oauthbearer.sasl.server.callback.handler.class": SIGNED,
                    "sasl.oauthbearer.jwks.endpoint.url": "https://idp/jwks",
                }
            )
        )


def test_unsecured_login_options_make_the_claims_kafka_makes():
    login = UnsecuredLogin.from_jaas(
        {
            "unsecuredLoginStringClaim_sub": "svc",
            "unsecuredLoginNumberClaim_level": "3",
            "unsecuredLoginListClaim_roles": "|a|b",
        }
    )
    token = login.token(NOW)
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    assert claims == {"sub": "svc", "level": 3, "roles": ["a", "b"], "iat": NOW, "exp": NOW + 3600}
    with pytest.raises(ValueError, match="exp"):
        UnsecuredLogin.from_jaas(
            {"unsecuredLoginStringClaim_sub": "x", "unsecuredLoginNumberClaim_exp": "1"}
        )


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
CLAIMS = st.fixed_dictionaries(
    {}, optional={"sub": JSON, "exp": JSON, "iat": JSON, "scope": JSON, "aud": JSON, "nbf": JSON}
)


@given(CLAIMS)
def test_any_claims_are_accepted_or_refused_never_raising_else(claims: dict[str, Any]):
    """Hostile claims end in TokenRefused or a token whose session lifetime the answer
    can carry, in both checks."""
    try:
        accepted = check_unsecured(unsigned(claims), UnsecuredOptions(), int(NOW * 1000))
    except TokenRefused:
        accepted = None
    if accepted is not None:
        assert accepted.principal and accepted.principal == accepted.principal.strip()
        assert 0 <= session_lifetime_ms(0, accepted.expires_ms, int(NOW * 1000)) <= LONGEST_MS
    head = f"{b64(json.dumps({'alg': 'HS256', 'kid': 'hs-1'}).encode())}.{b64(json.dumps(claims).encode())}"
    token = f"{head}.{b64(sign('HS256', head.encode()))}"
    try:
        signed = check_signed(token, SignedOptions(), KEYS, NOW)
    except TokenRefused:
        return
    assert signed.principal == claims["sub"].strip() and signed.expires_ms >= 0
