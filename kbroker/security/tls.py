"""A listener's TLS server context from Kafka's ``ssl.*`` settings (PEM key stores only).

Kafka's PEM support takes the key store either as one file (``ssl.keystore.location``:
private key and certificate chain) or as inline text (``ssl.keystore.key`` and
``ssl.keystore.certificate.chain``); the trust store likewise as a file or as
``ssl.truststore.certificates``. Python's ``ssl`` loads a key only from a file, so
inline PEM is written to a private temporary file for the load and removed at once.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from kbroker.config.errors import ConfigError
from kbroker.config.typed import ListenerSettings

_CLIENT_AUTH = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}
_VERSIONS = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
# IANA names (what Java and Kafka's documentation use) of the TLS 1.2 suites OpenSSL
# names differently; an OpenSSL name is accepted as it is.
_IANA_TO_OPENSSL = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256": "DHE-RSA-AES128-GCM-SHA256",
    "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384": "DHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384": "ECDHE-RSA-AES256-SHA384",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
}
_TLS13_SUITES = frozenset(
    {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"}
)


def server_context(listener: str, config: ListenerSettings) -> ssl.SSLContext:
    """Build the context from the listener's ``ssl.*`` settings. Raises ConfigError
    naming the setting when the files or values are wrong."""
    fail = _failure(listener)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _set_versions(context, config.ssl_enabled_protocols, fail)
    _set_ciphers(context, config.ssl_cipher_suites, config.ssl_enabled_protocols, fail)
    if not _load_keystore(context, config, fail):
        raise fail(
            "ssl.keystore.location",
            "a TLS listener needs a key store (ssl.keystore.location, or "
            "ssl.keystore.key with ssl.keystore.certificate.chain)",
        )
    client_auth = config.ssl_client_auth
    trusted = _load_truststore(context, config, fail)
    if client_auth != "none" and not trusted:
        raise fail("ssl.client.auth", f"{client_auth} needs a trust store to check certificates")
    context.verify_mode = _CLIENT_AUTH[client_auth]
    return context


def client_context(listener: str, config: ListenerSettings) -> ssl.SSLContext:
    """The context a broker connects to other brokers' ``listener`` with, built as Kafka
    builds its inter-broker client from the same listener's ``ssl.*`` settings: the trust
    store checks the other broker's certificate (the platform's CAs when none is set),
    the key store is offered as this broker's certificate (which a listener with
    ``ssl.client.auth=required`` needs), and ``ssl.endpoint.identification.algorithm=
    https`` checks that the certificate names the host dialled."""
    fail = _failure(listener)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _set_versions(context, config.ssl_enabled_protocols, fail)
    _set_ciphers(context, config.ssl_cipher_suites, config.ssl_enabled_protocols, fail)
    _load_keystore(context, config, fail)
    if not _load_truststore(context, config, fail):
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    context.check_hostname = config.ssl_endpoint_identification_algorithm.lower() == "https"
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def _failure(listener: str) -> Callable[[str, str], ConfigError]:
    def fail(name: str, reason: str) -> ConfigError:
        return ConfigError(f"listener {listener}: {name}: {reason}", setting=name)

    return fail


def _load_keystore(
    context: ssl.SSLContext, config: ListenerSettings, fail: Callable[[str, str], ConfigError]
) -> bool:
    """Load the key store into ``context``; False when none is configured."""
    if config.ssl_keystore_type.upper() != "PEM":
        raise fail("ssl.keystore.type", "kbroker reads PEM key stores only; set it to PEM")
    location = config.ssl_keystore_location
    chain, key = config.ssl_keystore_certificate_chain, config.ssl_keystore_key
    password = config.ssl_key_password
    if location and (chain or key):
        raise fail("ssl.keystore.location", "set it or ssl.keystore.key, not both")
    try:
        if location:
            context.load_cert_chain(location, password=password)
        elif chain and key:
            with _private_file(key + "\n" + chain) as path:
                context.load_cert_chain(path, password=password)
        else:
            return False
    except (OSError, ssl.SSLError) as exc:
        raise fail("ssl.keystore.location", f"cannot load the key store: {exc}") from None
    return True


def _load_truststore(
    context: ssl.SSLContext, config: ListenerSettings, fail: Callable[[str, str], ConfigError]
) -> bool:
    """Load the trusted CAs into ``context``; False when none is configured."""
    trust_location, trust_pem = (
        config.ssl_truststore_location,
        config.ssl_truststore_certificates,
    )
    if not (trust_location or trust_pem):
        return False
    if config.ssl_truststore_type.upper() != "PEM":
        raise fail("ssl.truststore.type", "kbroker reads PEM trust stores only; set it to PEM")
    try:
        if trust_location:
            context.load_verify_locations(cafile=trust_location)
        if trust_pem:
            context.load_verify_locations(cadata=trust_pem)
    except (OSError, ssl.SSLError) as exc:
        raise fail("ssl.truststore.location", f"cannot load the trust store: {exc}") from None
    return True


def _set_versions(context: ssl.SSLContext, enabled: list[str], fail: Any) -> None:
    versions = sorted(_VERSIONS[name] for name in enabled)
    if not versions:
        raise fail("ssl.enabled.protocols", "enables no TLS version")
    context.minimum_version, context.maximum_version = versions[0], versions[-1]
    if not _contiguous(versions):
        raise fail("ssl.enabled.protocols", "must name a contiguous range of TLS versions")


def _contiguous(versions: list[ssl.TLSVersion]) -> bool:
    order = list(_VERSIONS.values())
    indexes = [order.index(v) for v in versions]
    return indexes == list(range(indexes[0], indexes[-1] + 1))


def tls13_suites(config: ListenerSettings) -> str | None:
    """The TLS 1.3 suites ``ssl.cipher.suites`` names, as OpenSSL's list for each
    session (TlsSession), or None where it names none and all stay available. Python's
    context cannot narrow them; the session does, before its handshake."""
    return ":".join(s for s in config.ssl_cipher_suites if s in _TLS13_SUITES) or None


def _set_ciphers(context: ssl.SSLContext, suites: list[str], enabled: list[str], fail: Any) -> None:
    """TLS 1.2 suites through OpenSSL's cipher list (TLS 1.3's: see tls13_suites). A
    list naming no TLS 1.3 suite while TLS 1.3 is enabled is refused, rather than
    served with every TLS 1.3 suite on, wider than asked."""
    if not suites:
        return
    tls12 = [_IANA_TO_OPENSSL.get(s, s) for s in suites if s not in _TLS13_SUITES]
    if "TLSv1.3" in enabled and not _TLS13_SUITES.intersection(suites):
        raise fail(
            "ssl.cipher.suites",
            "names no TLS 1.3 suite while TLSv1.3 is enabled; kbroker cannot turn TLS 1.3's "
            "suites off, so remove TLSv1.3 from ssl.enabled.protocols",
        )
    if tls12:
        try:
            context.set_ciphers(":".join(tls12))
        except ssl.SSLError:
            raise fail("ssl.cipher.suites", f"no cipher suite of {suites} is available") from None
    elif "TLSv1.3" not in enabled:
        raise fail("ssl.cipher.suites", "names no suite of the enabled TLS versions")


@contextmanager
def _private_file(text: str) -> Iterator[str]:
    fd, path = tempfile.mkstemp(prefix="kbroker-pem-", suffix=".pem")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        yield path
    finally:
        os.unlink(path)
