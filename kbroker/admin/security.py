"""How the admin client reaches a secured listener: TLS, SASL PLAIN, SCRAM and OAUTHBEARER.

Settings come from a Kafka client properties file, as the `--command-config` of Kafka's
tools: `security.protocol`, `sasl.mechanism`, the credentials in `sasl.jaas.config`
(`username="..." password="..."`) or librdkafka's `sasl.username` / `sasl.password`, and
PEM files for TLS (`ssl.truststore.location` with `ssl.truststore.type=PEM`, or
librdkafka's `ssl.ca.location`; a client certificate from `ssl.keystore.location` or
`ssl.certificate.location` + `ssl.key.location`). `ssl.endpoint.identification.algorithm=`
(empty) turns host name checking off, as in Kafka.

OAUTHBEARER takes its token as Kafka's clients do: from the identity provider's
`sasl.oauthbearer.token.endpoint.url` with the client credentials of the JAAS line
(`clientId="..." clientSecret="..."`, optional `scope`), or librdkafka's
`sasl.oauthbearer.client.id` / `sasl.oauthbearer.client.secret` / `sasl.oauthbearer.scope`
(a `file://` URL names a file holding the token); or, for a development listener, an
unsigned token of the unsecured login module's `unsecuredLogin*` options.

The SASL exchanges (kbroker.security.sasl_client, shared with the broker's own
inter-broker login) are plain functions of the server's answers (no I/O): the
connection carries their messages in SaslAuthenticate requests.
"""

from __future__ import annotations

import re
import ssl
import time
from dataclasses import dataclass
from pathlib import Path

from kbroker.security.oauth_login import (
    TokenEndpointError,
    UnsecuredLogin,
    fetch_client_credentials_token,
)
from kbroker.security.sasl_client import Exchange, oauthbearer, plain, scram

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
TOKEN_TIMEOUT_S = 10.0


class SecurityConfigError(ValueError):
    """The client properties ask for something this client cannot do."""


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    check_hostname: bool = True
    bearer: BearerSource | None = None  # OAUTHBEARER: where the token comes from

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca_file) if self.ca_file else None)
        context.check_hostname = self.check_hostname
        if self.cert_file is not None:
            context.load_cert_chain(
                str(self.cert_file), str(self.key_file) if self.key_file else None
            )
        return context


_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def parse_properties(text: str) -> dict[str, str]:
    """`key=value` (or `key: value`) lines; `#` and `!` start comments."""
    values = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=len(line))
        values[line[:cut].strip()] = line[cut + 1 :].strip()
    return values


def from_properties(values: dict[str, str]) -> ClientSecurity:
    protocol = values.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise SecurityConfigError(f"security.protocol {protocol} is not one of {PROTOCOLS}")
    mechanism = values.get("sasl.mechanism", "GSSAPI" if protocol.startswith("SASL") else "")
    username, password = values.get("sasl.username"), values.get("sasl.password")
    jaas = values.get("sasl.jaas.config")
    if jaas:
        options = dict(_JAAS_OPTION.findall(jaas))
        username = options.get("username", username)
        password = options.get("password", password)
    bearer = None
    if protocol.startswith("SASL"):
        if mechanism not in MECHANISMS:
            raise SecurityConfigError(f"sasl.mechanism {mechanism} is not one of {MECHANISMS}")
        if mechanism == "OAUTHBEARER":
            bearer = bearer_source(values, dict(_JAAS_OPTION.findall(jaas or "")))
        elif username is None or password is None:
            raise SecurityConfigError("SASL needs a username and a password")
    ca = values.get("ssl.ca.location")
    if ca is None and values.get("ssl.truststore.location"):
        if values.get("ssl.truststore.type", "JKS").upper() != "PEM":
            raise SecurityConfigError("only PEM trust stores are read (ssl.truststore.type=PEM)")
        ca = values["ssl.truststore.location"]
    cert = values.get("ssl.certificate.location")
    key = values.get("ssl.key.location")
    if cert is None and values.get("ssl.keystore.location"):
        if values.get("ssl.keystore.type", "JKS").upper() != "PEM":
            raise SecurityConfigError("only PEM key stores are read (ssl.keystore.type=PEM)")
        cert = values["ssl.keystore.location"]  # key and certificate chain in one file
    return ClientSecurity(
        protocol=protocol,
        mechanism=mechanism if protocol.startswith("SASL") else None,
        username=username,
        password=password,
        ca_file=Path(ca) if ca else None,
        cert_file=Path(cert) if cert else None,
        key_file=Path(key) if key else None,
        check_hostname=values.get("ssl.endpoint.identification.algorithm", "https") != "",
        bearer=bearer,
    )


def load_command_config(path: Path) -> ClientSecurity:
    try:
        text = path.read_text()
    except OSError as exc:
        raise SecurityConfigError(f"cannot read {path}: {exc.strerror}") from None
    return from_properties(parse_properties(text))


# -- SASL exchanges (RFC 4616 PLAIN, RFC 5802 / 7677 SCRAM) ---------------------------------


def exchange(security: ClientSecurity) -> Exchange:
    if security.mechanism == "OAUTHBEARER":
        assert security.bearer is not None
        return oauthbearer(security.bearer.token())
    assert security.mechanism and security.username is not None and security.password is not None
    if security.mechanism == "PLAIN":
        return plain(security.username, security.password)
    return scram(security.mechanism, security.username, security.password)


# -- OAUTHBEARER tokens ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BearerSource:
    """Where an OAUTHBEARER token comes from: the provider's token endpoint (client
    credentials), a file, or an unsigned token minted here."""

    token_url: str | None = None
    client_id: str = ""
    client_secret: str = ""
    scope: str = ""
    unsigned: UnsecuredLogin | None = None

    def token(self) -> str:
        """Raises SecurityConfigError (one line, no secret) when none can be had."""
        if self.unsigned is not None:
            return self.unsigned.token(time.time())
        assert self.token_url is not None
        try:
            token, _expires_in = fetch_client_credentials_token(
                self.token_url, self.client_id, self.client_secret, self.scope, TOKEN_TIMEOUT_S
            )
        except TokenEndpointError as exc:
            raise SecurityConfigError(str(exc)) from None
        return token


def bearer_source(values: dict[str, str], jaas: dict[str, str]) -> BearerSource:
    """The token source Kafka's (or librdkafka's) client settings describe."""
    url = values.get("sasl.oauthbearer.token.endpoint.url")
    if url:
        client_id = jaas.get("clientId") or values.get("sasl.oauthbearer.client.id")
        secret = jaas.get("clientSecret") or values.get("sasl.oauthbearer.client.secret")
        if not url.startswith("file:") and (not client_id or secret is None):
            raise SecurityConfigError(
                "OAUTHBEARER with sasl.oauthbearer.token.endpoint.url needs clientId and "
                "clientSecret in sasl.jaas.config (or sasl.oauthbearer.client.id and "
                "sasl.oauthbearer.client.secret)"
            )
        scope = jaas.get("scope") or values.get("sasl.oauthbearer.scope", "")
        return BearerSource(url, client_id or "", secret or "", scope)
    options = dict(jaas)
    config = values.get("sasl.oauthbearer.config", "")
    if not options and config:  # librdkafka's unsecured JWT: principal=alice scope=a,b
        pairs = dict(item.split("=", 1) for item in config.split() if "=" in item)
        if "principal" in pairs:
            options["unsecuredLoginStringClaim_sub"] = pairs["principal"]
        if "scope" in pairs:
            options["unsecuredLoginListClaim_scope"] = "," + pairs["scope"]
    try:
        return BearerSource(unsigned=UnsecuredLogin.from_jaas(options))
    except ValueError as exc:
        raise SecurityConfigError(
            f"OAUTHBEARER needs sasl.oauthbearer.token.endpoint.url, or an unsigned "
            f"token's claims: {exc}"
        ) from None
