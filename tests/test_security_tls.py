"""TLS sessions over memory buffers: a real handshake, the client certificate's
principal, and what bogus bytes get."""

from __future__ import annotations

import contextlib
import ssl
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compat_tests.tls_material import TlsMaterial, make_tls_material
from kbroker.config import BrokerConfig, ConfigError
from kbroker.config.listeners import Endpoint
from kbroker.config.principal_rules import parse_mapping_rules
from kbroker.security import tls_session
from kbroker.security.listener import ListenerSecurity, listener_security
from kbroker.security.principal import distinguished_name, map_name
from kbroker.security.tls_session import TlsSession
from kbroker.server.tls_transport import TlsTransport


@pytest.fixture(scope="module")
def material(tmp_path_factory: pytest.TempPathFactory) -> TlsMaterial:
    return make_tls_material(tmp_path_factory.mktemp("tls"))


def server_security(
    material: TlsMaterial, client_auth: str = "required", **extra: str
) -> ListenerSecurity:
    config = BrokerConfig.from_settings(
        {
            "listeners": "SSL://127.0.0.1:9093",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(material.broker_keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(material.ca.cert),
            "ssl.client.auth": client_auth,
            **extra,
        }
    )
    return listener_security(config, Endpoint("SSL", "127.0.0.1", 9093))


def server_context(
    material: TlsMaterial, client_auth: str = "required", **extra: str
) -> ssl.SSLContext:
    context = server_security(material, client_auth, **extra).ssl_context
    assert context is not None
    return context


class Client:
    def __init__(self, context: ssl.SSLContext) -> None:
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.ssl = context.wrap_bio(self.incoming, self.outgoing, server_hostname="localhost")


def handshake(server: TlsSession, client_context: ssl.SSLContext) -> Client:
    wrapped = Client(client_context)
    client, incoming, outgoing = wrapped.ssl, wrapped.incoming, wrapped.outgoing
    for _ in range(10):
        with contextlib.suppress(ssl.SSLWantReadError):
            client.do_handshake()
        server.receive(outgoing.read())
        incoming.write(server.outgoing())
        if server.handshake_done:
            client.do_handshake()
            return wrapped
    raise AssertionError("no handshake")


def client_context(material: TlsMaterial, cert: bool = True) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(material.ca.cert))
    if cert:
        context.load_cert_chain(str(material.client.cert), str(material.client.key))
    return context


def test_the_client_certificate_subject_is_an_rfc2253_name_mapped_by_the_rules(
    material: TlsMaterial,
) -> None:
    server = TlsSession(server_context(material))
    handshake(server, client_context(material))
    cert = server.peercert()
    assert cert is not None
    dn = distinguished_name(cert)
    assert dn == "CN=alice,OU=eng,O=kbroker-test"
    rules = parse_mapping_rules("RULE:^CN=([^,]+),OU=([^,]+),.*$/$1@$2/U,DEFAULT")
    assert map_name(rules, dn) == "ALICE@ENG"
    assert map_name(parse_mapping_rules("DEFAULT"), dn) == dn


@pytest.fixture(params=["c", "python"])
def reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both record readers: the C loop (_tlsread) and Python's, where C is unavailable."""
    if request.param == "python":
        monkeypatch.setattr(tls_session, "_RECORD_READER", False)
    return str(request.param)


def connected(material: TlsMaterial) -> tuple[TlsSession, Client]:
    server = TlsSession(server_context(material, "none"))
    return server, handshake(server, client_context(material, cert=False))


def test_the_c_record_reader_is_built_and_used(material: TlsMaterial) -> None:
    # Without it a produced GiB costs half a million Python calls into ssl; make test builds it.
    server, _ = connected(material)
    assert server.reads_records_in_c


def test_bytes_written_after_the_handshake_arrive_decrypted(
    material: TlsMaterial, reader: str
) -> None:
    server = TlsSession(server_context(material, "none"))
    client = handshake(server, client_context(material, cert=False))
    client.ssl.write(b"\x00\x00\x00\x02hi")
    assert server.receive(client.outgoing.read()) == b"\x00\x00\x00\x02hi"
    client.incoming.write(server.encrypt(b"answer"))
    assert client.ssl.read() == b"answer"
    assert server.peercert() is None


def test_much_ciphertext_at_once_decrypts_whole(material: TlsMaterial, reader: str) -> None:
    server, client = connected(material)
    assert server.reads_records_in_c == (reader == "c")
    payload = bytes(range(256)) * 4096 * 3  # 3 MiB: the read buffer must grow twice over
    client.ssl.write(payload)
    assert server.receive(client.outgoing.read()) == payload
    client.ssl.write(b"after")
    assert server.receive(client.outgoing.read()) == b"after"


@settings(max_examples=50, deadline=None)
@given(
    writes=st.lists(st.integers(1, 20_000), min_size=1, max_size=40),
    cuts=st.lists(st.integers(1, 70_000), max_size=10),
)
def test_records_of_any_size_cut_anywhere_decrypt_in_order(
    material: TlsMaterial, writes: list[int], cuts: list[int]
) -> None:
    server, client = connected(material)
    payload = b"".join(bytes([n % 251]) * n for n in writes)
    for n in writes:  # one TLS record per write, as librdkafka sends a value and its header
        client.ssl.write(bytes([n % 251]) * n)
    wire = client.outgoing.read()
    received = bytearray()
    at = 0
    for cut in sorted(set(cuts)):
        received += server.receive(wire[at:cut])
        at = max(at, cut)
    received += server.receive(wire[at:])
    assert received == payload


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(garbage=st.lists(st.binary(min_size=1, max_size=2000), min_size=1, max_size=4))
def test_garbage_after_the_handshake_is_an_ssl_error_or_nothing_never_plaintext(
    material: TlsMaterial, garbage: list[bytes]
) -> None:
    server, client = connected(material)
    client.ssl.write(b"genuine")
    assert server.receive(client.outgoing.read()) == b"genuine"
    try:
        for chunk in garbage:
            assert server.receive(chunk) == b""
    except ssl.SSLError:
        return


def test_a_corrupt_record_is_an_ssl_error_that_names_it(material: TlsMaterial, reader: str) -> None:
    server, client = connected(material)
    client.ssl.write(b"x" * 1000)
    wire = bytearray(client.outgoing.read())
    wire[-20] ^= 0xFF  # inside the record's authentication tag
    with pytest.raises(ssl.SSLError) as failed:
        server.receive(bytes(wire))
    assert "DECRYPTION_FAILED" in str(failed.value.reason) or "BAD_RECORD_MAC" in str(
        failed.value.reason
    )


def test_close_notify_after_data_delivers_the_data_and_marks_the_close(
    material: TlsMaterial, reader: str
) -> None:
    server, client = connected(material)
    client.ssl.write(b"last words")
    with contextlib.suppress(ssl.SSLWantReadError):
        client.ssl.unwrap()
    assert server.receive(client.outgoing.read()) == b"last words"
    assert server.closed_by_peer


def test_required_client_auth_refuses_a_client_without_certificate(material: TlsMaterial) -> None:
    server = TlsSession(server_context(material, "required"))
    with pytest.raises(ssl.SSLError):
        handshake(server, client_context(material, cert=False))
        server.receive(b"")


def test_a_rule_that_matches_nothing_is_a_refusal() -> None:
    with pytest.raises(ValueError, match="no ssl.principal.mapping.rules rule"):
        map_name(parse_mapping_rules("RULE:^CN=admin$/admin/"), "CN=alice")


@pytest.mark.parametrize("text", ["RULE:^CN=(.*$/x/", "RULE:missing-slashes", "SOMETHING"])
def test_malformed_mapping_rules_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_mapping_rules(text)


def test_a_key_store_of_another_type_is_refused_at_start(material: TlsMaterial) -> None:
    with pytest.raises(ConfigError, match="ssl.keystore.type.*PEM"):
        server_context(material, **{"ssl.keystore.type": "JKS"})


def test_inline_pem_key_and_chain_serve_as_a_key_store(material: TlsMaterial) -> None:
    context = server_context(
        material,
        "none",
        **{
            "ssl.keystore.location": "",
            "ssl.keystore.key": material.broker.key_text,
            "ssl.keystore.certificate.chain": material.broker.cert_text,
            "ssl.truststore.location": "",
            "ssl.truststore.certificates": material.ca.cert_text,
        },
    )
    server = TlsSession(context)
    handshake(server, client_context(material, cert=False))
    assert server.handshake_done


def test_enabled_protocols_bound_the_versions_offered(material: TlsMaterial) -> None:
    context = server_context(material, "none", **{"ssl.enabled.protocols": "TLSv1.3"})
    assert context.minimum_version == ssl.TLSVersion.TLSv1_3
    client = client_context(material, cert=False)
    client.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises(ssl.SSLError):
        handshake(TlsSession(context), client)


def test_cipher_suites_without_tls13_ones_are_refused_while_tls13_is_on(
    material: TlsMaterial,
) -> None:
    with pytest.raises(ConfigError, match="ssl.cipher.suites"):
        server_context(
            material, "none", **{"ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"}
        )


def narrowed_session(material: TlsMaterial, suites: str) -> TlsSession:
    security = server_security(material, "none", **{"ssl.cipher.suites": suites})
    assert security.ssl_context is not None
    return TlsSession(security.ssl_context, security.tls13_suites)


def test_tls13_suites_in_cipher_suites_narrow_what_a_session_negotiates(
    material: TlsMaterial,
) -> None:
    # A client offering all three would get TLS_AES_256_GCM_SHA384, OpenSSL's first.
    server = narrowed_session(material, "TLS_AES_128_GCM_SHA256")
    client = handshake(server, client_context(material, cert=False))
    assert client.ssl.cipher()[0] == "TLS_AES_128_GCM_SHA256"


def test_a_client_offering_only_other_tls13_suites_fails_the_handshake(
    material: TlsMaterial,
) -> None:
    server = narrowed_session(material, "TLS_AES_128_GCM_SHA256")
    client = Client(client_context(material, cert=False))
    assert tls_session._tlsread is not None
    tls_session._tlsread.set_ciphersuites(client.ssl._sslobj, "TLS_AES_256_GCM_SHA384")  # type: ignore[attr-defined]
    with contextlib.suppress(ssl.SSLWantReadError):
        client.ssl.do_handshake()
    with pytest.raises(ssl.SSLError, match="NO_SHARED_CIPHER"):
        server.receive(client.outgoing.read())


def test_narrowing_tls13_suites_without_the_c_reader_is_refused_at_start(
    material: TlsMaterial, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tls_session, "_RECORD_READER", False)
    with pytest.raises(ConfigError, match="ssl.cipher.suites"):
        server_security(material, "none", **{"ssl.cipher.suites": "TLS_AES_128_GCM_SHA256"})


@pytest.fixture(scope="module")
def fuzz_context(material: TlsMaterial) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(material.broker_keystore))
    return context


@settings(max_examples=200, deadline=None)
@given(chunks=st.lists(st.binary(min_size=1, max_size=300), min_size=1, max_size=4))
def test_bogus_bytes_fail_the_handshake_with_an_ssl_error_only(
    fuzz_context: ssl.SSLContext, chunks: list[bytes]
) -> None:
    session = TlsSession(fuzz_context)
    try:
        for chunk in chunks:
            assert session.receive(chunk) == b""
            session.outgoing()
    except ssl.SSLError:
        return


def test_an_encrypted_key_loads_with_ssl_key_password_and_not_without(
    material: TlsMaterial, tmp_path
) -> None:
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(material.broker.key.read_bytes(), None)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"key-pass"),
    ).decode()
    store = tmp_path / "encrypted-keystore.pem"
    store.write_text(encrypted + material.broker.cert_text)
    context = server_context(
        material,
        "none",
        **{"ssl.keystore.location": str(store), "ssl.key.password": "key-pass"},
    )
    assert handshake(TlsSession(context), client_context(material, cert=False))
    with pytest.raises(ConfigError, match="cannot load the key store"):
        server_context(
            material,
            "none",
            **{"ssl.keystore.location": str(store), "ssl.key.password": "wrong"},
        )


class _Raw:
    """The socket side of a TlsTransport: what it was given to send."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.sent.append(bytes(data))


class _Region:
    def __init__(self, file: Any, position: int, length: int) -> None:
        self.file, self.position, self.length = file, position, length


def _records(ciphertext: bytes) -> list[int]:
    """The lengths of the TLS records in ``ciphertext``."""
    lengths, at = [], 0
    while at < len(ciphertext):
        size = int.from_bytes(ciphertext[at + 3 : at + 5], "big")
        lengths.append(size)
        at += 5 + size
    assert at == len(ciphertext)
    return lengths


@settings(max_examples=30, deadline=None)
@given(
    layout=st.lists(
        st.tuples(st.integers(0, 40_000), st.integers(0, 150_000), st.integers(0, 200_000)),
        min_size=1,
        max_size=4,
    )
)
def test_an_answer_with_file_ranges_goes_out_as_full_records_in_order(
    material: TlsMaterial, tmp_path_factory: pytest.TempPathFactory, layout: list
) -> None:
    server, client = connected(material)
    assert server.writes_records_in_c
    raw = _Raw()
    transport = TlsTransport(raw, server)  # type: ignore[arg-type]
    content = bytes(range(251)) * 1400  # 351,400 bytes, no period of a power of two
    path = tmp_path_factory.mktemp("segment") / "00.log"
    path.write_bytes(content)
    parts: list[Any] = []
    expected = b""
    with open(path, "rb") as file:
        for index, (head, position, length) in enumerate(layout):
            length = min(length, len(content) - position)
            if head:
                parts.append(bytes([index]) * head)
                expected += bytes([index]) * head
            parts.append(_Region(file, position, length))
            expected += content[position : position + length]
        parts.append(b"tail")
        expected += b"tail"
        assert transport.write_parts(parts) is None
    ciphertext = b"".join(raw.sent)
    lengths = _records(ciphertext)
    # Every record but the last carries 16 KiB, whatever the parts' sizes.
    assert len(lengths) == -(-len(expected) // 16384)
    client.incoming.write(ciphertext)
    received = b""
    with contextlib.suppress(ssl.SSLWantReadError):
        while len(received) < len(expected):
            received += client.ssl.read(1 << 20)
    assert received == expected


def test_a_file_range_past_the_end_of_its_file_closes_and_sends_nothing(
    material: TlsMaterial, tmp_path: Any
) -> None:
    server, client = connected(material)
    raw = _Raw()
    transport = TlsTransport(raw, server)  # type: ignore[arg-type]
    path = tmp_path / "00.log"
    path.write_bytes(b"x" * 12_000)
    with open(path, "rb") as file:
        problem = transport.write_parts([b"head", _Region(file, 10_000, 45_000)])
    assert problem is not None and "shorter than the region" in problem
    assert raw.sent == []  # the frame's size is not sent for a body that cannot follow
    transport.write_parts([b"after"])
    client.incoming.write(b"".join(raw.sent))
    assert client.ssl.read() == b"after"


@pytest.mark.parametrize("cipher", ["ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-AES256-SHA384"])
def test_file_ranges_go_out_over_tls12_gcm_and_cbc_suites(
    material: TlsMaterial, tmp_path: Any, cipher: str
) -> None:
    # TLS 1.2's records carry more than TLS 1.3's (an explicit nonce; CBC's MAC and
    # padding): the writer's room for them must hold.
    server = TlsSession(server_context(material, "none"))
    context = client_context(material, cert=False)
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(cipher)
    client = handshake(server, context)
    assert client.ssl.version() == "TLSv1.2" and client.ssl.cipher()[0] == cipher
    raw = _Raw()
    transport = TlsTransport(raw, server)  # type: ignore[arg-type]
    content = bytes(range(256)) * 1000
    path = tmp_path / "00.log"
    path.write_bytes(content)
    with open(path, "rb") as file:
        assert transport.write_parts([b"a" * 100, _Region(file, 7, 250_000), b"z"]) is None
    client.incoming.write(b"".join(raw.sent))
    received = b""
    with contextlib.suppress(ssl.SSLWantReadError):
        while True:
            received += client.ssl.read(1 << 20)
    assert received == b"a" * 100 + content[7:250_007] + b"z"


def test_a_c_module_built_without_the_writer_leaves_answers_to_python(
    material: TlsMaterial, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tls_session, "_RECORD_WRITER", False)
    server, client = connected(material)
    assert server.reads_records_in_c and not server.writes_records_in_c
    raw = _Raw()
    TlsTransport(raw, server).write(b"answer")  # type: ignore[arg-type]
    client.incoming.write(b"".join(raw.sent))
    assert client.ssl.read() == b"answer"
