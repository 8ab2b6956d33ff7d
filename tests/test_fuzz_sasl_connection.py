"""A SASL listener's connection against hostile clients: skipped handshakes, unknown
mechanisms, garbage tokens, SCRAM messages out of order. Each ends in Kafka's answer or
a closed connection with one log line; data_received never raises, nothing is served
before authentication, and no secret reaches the log."""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fuzz_connection import FakeBroker, FakeTransport, request, responses

from kbroker.config import BrokerConfig
from kbroker.security.jwt import UnsecuredOptions, unsigned_token
from kbroker.security.listener import ListenerSecurity
from kbroker.security.oauthbearer import BearerSettings, Validate
from kbroker.security.sasl import LONGEST_MS
from kbroker.security.scram import ScramCredential, credential_from_salted, salted_password
from kbroker.server.connection import KafkaConnection

pytestmark = pytest.mark.slow  # make test-fast leaves these out

SASL_HANDSHAKE, SASL_AUTHENTICATE, METADATA, API_VERSIONS = 17, 36, 3, 18
METADATA_CORRELATION = 77
PASSWORD = "s3cret-value"
SALT = os.urandom(16)
CREDENTIAL = credential_from_salted(
    "SCRAM-SHA-256", SALT, 4096, salted_password("SCRAM-SHA-256", PASSWORD, SALT, 4096)
)


class SaslBroker(FakeBroker):
    """Refusals answered at once (connection.failed.authentication.delay.ms=0) unless
    built with a delay."""

    def __init__(self, failed_login_delay_ms: int = 0, **settings: str) -> None:
        super().__init__()
        self.config = BrokerConfig.from_settings(
            {
                "logging.requests.enable": "false",
                "connection.failed.authentication.delay.ms": str(failed_login_delay_ms),
                **settings,
            }
        )

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return CREDENTIAL if (user, mechanism) == ("bob", "SCRAM-SHA-256") else None

    def token_credential(self, token_id: str, mechanism: str) -> tuple[ScramCredential, str] | None:
        return None  # no delegation tokens

    def bearer_validator(self, security: ListenerSecurity) -> Validate | None:
        return security.bearer.validator(None) if security.bearer is not None else None


SECURITY = ListenerSecurity(
    name="SASL_PLAINTEXT",
    protocol="SASL_PLAINTEXT",
    mechanisms=("PLAIN", "SCRAM-SHA-256", "OAUTHBEARER"),
    plain_users={"alice": PASSWORD},
    bearer=BearerSettings(unsecured=UnsecuredOptions()),
)


def run(
    frames: list[bytes], broker: SaslBroker | None = None
) -> tuple[KafkaConnection, FakeTransport, SaslBroker]:
    """Feed the frames to a fresh connection inside a loop (closes are scheduled)."""
    broker = broker or SaslBroker()
    conn = KafkaConnection(broker, SECURITY)  # type: ignore[arg-type]
    transport = FakeTransport()

    async def feed() -> None:
        conn.connection_made(transport)  # type: ignore[arg-type]
        for data in frames:
            if transport.closed:
                break
            conn.data_received(data)
            await asyncio.sleep(0)  # one loop turn: a close it scheduled happens
        await asyncio.sleep(0)

    asyncio.run(feed())
    return conn, transport, broker


def handshake(mechanism: str, version: int = 1, correlation: int = 1) -> bytes:
    return request(SASL_HANDSHAKE, version, correlation, _string(mechanism, version))


def authenticate(token: bytes, correlation: int = 2) -> bytes:
    return request(SASL_AUTHENTICATE, 1, correlation, struct.pack(">i", len(token)) + token)


def _string(text: str, version: int) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "kbroker.connection" and r.levelno == logging.WARNING
    ]


def test_plain_login_then_requests_are_served() -> None:
    conn, transport, broker = run(
        [handshake("PLAIN"), authenticate(f"\0alice\0{PASSWORD}".encode()), request(18, 0, 3)]
    )
    assert not transport.closed
    assert str(conn.principal) == "User:alice"
    assert len(responses(transport.written)) == 3
    assert broker.counters.successful_authentications == 1


def test_a_request_before_authentication_closes_with_one_line(caplog) -> None:
    caplog.set_level(logging.WARNING)
    _, transport, broker = run([request(METADATA, 1, 1, b"\xff\xff\xff\xff")])
    assert transport.closed and transport.written == b""
    assert len(warnings(caplog)) == 1 and "before SASL authentication" in warnings(caplog)[0]
    assert broker.counters.failed_authentications == 1


def test_a_wrong_password_is_answered_then_closed_without_the_password(caplog) -> None:
    caplog.set_level(logging.WARNING)
    attempt = "wrong-" + PASSWORD
    _, transport, _ = run([handshake("PLAIN"), authenticate(f"\0alice\0{attempt}".encode())])
    answers = responses(transport.written)
    assert len(answers) == 2
    error = struct.unpack_from(">h", answers[1], 4)[0]
    assert error == 58  # SASL_AUTHENTICATION_FAILED
    assert transport.closed
    assert len(warnings(caplog)) == 1
    assert attempt not in caplog.text and PASSWORD not in caplog.text


def test_a_scram_final_message_first_is_refused(caplog) -> None:
    caplog.set_level(logging.WARNING)
    _, transport, _ = run([handshake("SCRAM-SHA-256"), authenticate(b"c=biws,r=abc,p=AAAA")])
    answers = responses(transport.written)
    assert struct.unpack_from(">h", answers[1], 4)[0] == 58
    assert transport.closed and len(warnings(caplog)) == 1


def test_an_unknown_mechanism_is_answered_with_the_enabled_ones_then_closed() -> None:
    _, transport, _ = run([handshake("GSSAPI")])
    (answer,) = responses(transport.written)
    assert struct.unpack_from(">h", answer, 4)[0] == 33  # UNSUPPORTED_SASL_MECHANISM
    assert transport.closed


FRAMES = st.one_of(
    st.builds(
        handshake,
        st.sampled_from(["PLAIN", "SCRAM-SHA-256", "OAUTHBEARER", "GSSAPI", "", "x" * 40]),
        st.sampled_from([0, 1]),
    ),
    st.builds(authenticate, st.binary(max_size=120)),
    st.builds(lambda t: authenticate(b"n,,n=bob,r=" + t), st.binary(min_size=1, max_size=30)),
    st.builds(
        lambda t: authenticate(b"n,,\x01auth=Bearer " + t + b"\x01\x01"),
        st.binary(min_size=1, max_size=60),
    ),
    st.just(authenticate(b"\x01")),
    st.just(request(API_VERSIONS, 0, 9)),
    st.just(request(METADATA, 1, METADATA_CORRELATION, b"\xff\xff\xff\xff")),
    st.binary(min_size=4, max_size=60).map(lambda b: struct.pack(">i", len(b)) + b),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(FRAMES, min_size=1, max_size=6))
def test_any_sequence_ends_served_answered_or_closed_never_raising(frames: list[bytes]) -> None:
    conn, transport, broker = run(frames)
    correlations = [struct.unpack_from(">i", a)[0] for a in responses(transport.written)]
    if conn.principal.name == "ANONYMOUS":
        # Nothing but ApiVersions and the SASL exchange is answered before a login.
        assert METADATA_CORRELATION not in correlations
    # One refusal per connection at most, and it ends the connection.
    assert broker.counters.failed_authentications <= 1
    if broker.counters.failed_authentications:
        assert transport.closed


def test_a_v0_handshake_takes_the_token_in_a_bare_frame_and_answers_in_one() -> None:
    token = f"\0alice\0{PASSWORD}".encode()
    conn, transport, _ = run(
        [handshake("PLAIN", version=0), struct.pack(">i", len(token)) + token, request(18, 0, 3)]
    )
    handshake_answer, raw_answer, versions = responses(transport.written)
    assert struct.unpack_from(">h", handshake_answer, 4)[0] == 0
    assert raw_answer == b""  # PLAIN's (empty) server token, size-prefixed, no header
    assert struct.unpack_from(">i", versions)[0] == 3
    assert str(conn.principal) == "User:alice"


def test_a_v0_handshake_with_a_wrong_token_closes_without_an_answer(caplog) -> None:
    caplog.set_level(logging.WARNING)
    token = b"\0alice\0nope"
    _, transport, _ = run([handshake("PLAIN", version=0), struct.pack(">i", len(token)) + token])
    assert len(responses(transport.written)) == 1  # the handshake's answer only
    assert transport.closed and len(warnings(caplog)) == 1


EXPIRED_TOKEN = unsigned_token({"sub": "carol", "exp": 1_000_000})  # long expired


def bearer_message(token: str) -> bytes:
    return f"n,,\x01auth=Bearer {token}\x01\x01".encode()


def test_an_oauthbearer_token_logs_in_its_principal_until_it_expires() -> None:
    token = unsigned_token({"sub": "carol", "exp": 4_000_000_000})
    conn, transport, _ = run(
        [handshake("OAUTHBEARER"), authenticate(bearer_message(token)), request(18, 0, 3)]
    )
    assert not transport.closed
    assert str(conn.principal) == "User:carol"
    answers = responses(transport.written)
    assert len(answers) == 3
    error, size = struct.unpack_from(">hh", answers[1], 4)  # error code, then a null message
    assert (error, size) == (0, -1)
    lifetime = struct.unpack_from(">q", answers[1], 4 + 2 + 2 + 4)[0]  # after empty auth bytes
    assert abs(lifetime - (4_000_000_000_000 - time.time() * 1000)) < 60_000  # the token's life


def test_an_expired_oauthbearer_token_is_answered_with_its_status_then_refused(caplog) -> None:
    caplog.set_level(logging.WARNING)
    token = EXPIRED_TOKEN
    _, transport, broker = run(
        [
            handshake("OAUTHBEARER"),
            authenticate(bearer_message(token)),
            authenticate(b"\x01", correlation=3),
        ]
    )
    handshake_answer, challenge, refusal = responses(transport.written)
    assert struct.unpack_from(">h", challenge, 4)[0] == 0
    assert b'{"status":"invalid_token"}' in challenge
    assert struct.unpack_from(">h", refusal, 4)[0] == 58
    assert transport.closed and broker.counters.failed_authentications == 1
    assert len(warnings(caplog)) == 1 and "expired" in warnings(caplog)[0]
    assert token not in caplog.text


def test_a_frame_larger_than_sasl_server_max_receive_size_before_login_closes(caplog) -> None:
    caplog.set_level(logging.WARNING)
    limit = SaslBroker().config.sasl_server_max_receive_size
    assert limit == 524288  # Kafka's default
    broker = SaslBroker()
    broker.max_request_bytes = 4 * limit  # socket.request.max.bytes would allow the frame
    _, transport, _ = run([handshake("PLAIN"), struct.pack(">i", limit + 1)], broker)
    assert transport.closed
    assert "sasl.server.max.receive.size" in caplog.text


def test_sasl_server_max_receive_size_sets_the_cap_before_login() -> None:
    broker = SaslBroker(**{"sasl.server.max.receive.size": "1000"})
    _, transport, _ = run([handshake("PLAIN"), struct.pack(">i", 1001)], broker)
    assert transport.closed
    token = b"\0alice\0" + b"x" * 900  # a frame under the cap is read (and refused)
    _, transport, broker = run(
        [handshake("PLAIN"), authenticate(token)],
        SaslBroker(**{"sasl.server.max.receive.size": "1000"}),
    )
    assert len(responses(transport.written)) == 2
    assert struct.unpack_from(">h", responses(transport.written)[1], 4)[0] == 58


def test_after_login_a_frame_may_be_as_large_as_socket_request_max_bytes() -> None:
    limit = SaslBroker().config.sasl_server_max_receive_size
    body = b"\x00" * (limit + 100)
    big = request(API_VERSIONS, 0, 9, body)  # ApiVersions v0 ignores the bytes after it
    broker = SaslBroker()
    broker.max_request_bytes = 4 * limit  # socket.request.max.bytes
    conn, transport, _ = run(
        [handshake("PLAIN"), authenticate(f"\0alice\0{PASSWORD}".encode()), big], broker
    )
    assert not transport.closed
    assert str(conn.principal) == "User:alice"
    assert len(responses(transport.written)) == 3


def test_a_request_after_a_refused_token_closes_with_the_refusals_reason(caplog) -> None:
    caplog.set_level(logging.WARNING)
    token = EXPIRED_TOKEN
    _, transport, _ = run(
        [
            handshake("OAUTHBEARER"),
            authenticate(bearer_message(token)),
            request(METADATA, 1, METADATA_CORRELATION, b"\xff\xff\xff\xff"),  # no 0x01 first
        ]
    )
    assert transport.closed
    (line,) = warnings(caplog)
    assert "unexpected metadata request" in line and "token was refused" in line
    assert "expired" in line and token not in caplog.text


def test_a_refused_login_is_answered_and_closed_after_the_failed_authentication_delay() -> None:
    broker = SaslBroker(failed_login_delay_ms=150)
    conn = KafkaConnection(broker, SECURITY)  # type: ignore[arg-type]
    transport = FakeTransport()

    async def scenario() -> tuple[float, float]:
        conn.connection_made(transport)  # type: ignore[arg-type]
        conn.data_received(handshake("PLAIN"))
        started = time.monotonic()
        conn.data_received(authenticate(b"\0alice\0wrong"))
        answered = closed = 0.0
        while not transport.closed and time.monotonic() - started < 5:
            if not answered and len(responses(transport.written)) == 2:
                answered = time.monotonic() - started
            await asyncio.sleep(0.005)
        closed = time.monotonic() - started
        return answered or closed, closed

    answered, closed = asyncio.run(scenario())
    assert transport.closed
    assert 0.15 <= answered <= closed < 2  # held back the delay, then answered and closed
    assert struct.unpack_from(">h", responses(transport.written)[1], 4)[0] == 58


def test_a_token_expiring_in_millions_of_years_still_logs_in() -> None:
    token = unsigned_token({"sub": "carol", "exp": 1e300})
    conn, transport, _ = run(
        [handshake("OAUTHBEARER"), authenticate(bearer_message(token)), request(18, 0, 3)]
    )
    assert not transport.closed and str(conn.principal) == "User:carol"
    answer = responses(transport.written)[1]
    assert struct.unpack_from(">q", answer, 4 + 2 + 2 + 4)[0] == LONGEST_MS
