"""How this broker connects to other brokers: the inter-broker listener's protocol, as
Kafka's broker configures its own client side.

The listener is ``inter.broker.listener.name`` (or the one named by
``security.inter.broker.protocol``). Over SSL or SASL_SSL the broker verifies the other
broker with the listener's trust store and offers its key store as its certificate; over
SASL it logs in with ``sasl.mechanism.inter.broker.protocol`` and the ``username`` /
``password`` options of the listener's JAAS line for that mechanism
(``listener.name.<l>.<mechanism>.sasl.jaas.config``, else ``sasl.jaas.config``), the
same line whose ``user_<name>`` options list PLAIN users. With OAUTHBEARER it sends a
token from the identity provider's endpoint for the line's ``clientId`` and
``clientSecret`` (Kafka's OAuthBearerLoginCallbackHandler), or an unsigned token of the
line's ``unsecuredLogin*`` options (Kafka's unsecured login module). Whatever cannot work
is refused at start, naming the setting, never showing the password.
"""

from __future__ import annotations

import ssl
import time
from dataclasses import dataclass, field
from typing import Any

from kbroker.config.broker import BrokerConfig
from kbroker.config.errors import ConfigError
from kbroker.security.jaas import PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE, parse_jaas
from kbroker.security.oauth_login import LOGIN_HANDLERS, ClientCredentialsLogin, UnsecuredLogin
from kbroker.security.oauthbearer import OAUTHBEARER, SIGNED_HANDLERS
from kbroker.security.sasl import PLAIN, SUPPORTED_MECHANISMS
from kbroker.security.sasl_client import Exchange, oauthbearer, plain, scram
from kbroker.security.tls import client_context


@dataclass(eq=False)
class InterBrokerSecurity:
    """What a connection to another broker's inter-broker listener does before its first
    request: a TLS handshake when ``ssl_context`` is set, a SASL login when
    ``mechanism`` is. One object is shared by every link to other brokers (replica
    fetchers, coordinators' writers, transaction markers); each reads ``ssl_context``
    when it connects, so `reload_tls` reaches every new connection at once."""

    listener: str
    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str = ""
    password: str = field(default="", repr=False)
    bearer: UnsecuredLogin | None = field(default=None, repr=False)  # OAUTHBEARER's token
    oidc: ClientCredentialsLogin | None = None  # OAUTHBEARER with the provider's tokens

    async def prepare(self) -> None:
        """Before a login: a token from the provider when the one held is too old.
        Raises TokenEndpointError."""
        if self.oidc is not None:
            await self.oidc.refresh()

    def login(self) -> Exchange:
        """The client side of the SASL exchange (sans-IO): yields each message, is sent
        each answer."""
        if self.mechanism == PLAIN:
            return plain(self.username, self.password)
        if self.bearer is not None:
            return oauthbearer(self.bearer.token(time.time()), self.bearer.extensions)
        if self.oidc is not None:
            return oauthbearer(self.oidc.token)
        assert self.mechanism is not None
        return scram(self.mechanism, self.username, self.password)

    def reload_tls(self, config: BrokerConfig) -> None:
        """A dynamic change of the listener's key or trust store (listener.name.<l>.ssl.*):
        the next connection to another broker offers the new certificate and trusts the
        new store, as Kafka's broker reconfigures its inter-broker clients; connections
        already open keep theirs. Raises ConfigError (the context is kept) for a store
        that does not load."""
        if self.ssl_context is None:
            return
        self.ssl_context = client_context(self.listener, config.listener_settings(self.listener))


PLAINTEXT = InterBrokerSecurity("PLAINTEXT")


def inter_broker_security(config: BrokerConfig) -> InterBrokerSecurity:
    """Built once at start; raises ConfigError for a listener this broker could not log
    in to."""
    listener = config.inter_broker_endpoint.name
    protocol = config.protocol_map[listener]

    listener_config = config.listener_settings(listener)

    context = client_context(listener, listener_config) if protocol in ("SSL", "SASL_SSL") else None
    if not protocol.startswith("SASL_"):
        return InterBrokerSecurity(listener, protocol, context)
    mechanism = config.sasl_mechanism_inter_broker_protocol.strip().upper()
    name = "sasl.mechanism.inter.broker.protocol"
    if mechanism not in SUPPORTED_MECHANISMS:
        raise ConfigError(
            f"{name} is {mechanism}, but the inter-broker listener {listener} uses "
            f"{protocol} and kbroker logs in with {', '.join(SUPPORTED_MECHANISMS)} only",
            setting=name,
        )
    enabled = [m.strip().upper() for m in listener_config.sasl_enabled_mechanisms]
    if mechanism not in enabled:
        raise ConfigError(
            f"{name} {mechanism} must be in listener {listener}'s sasl.enabled.mechanisms "
            f"({', '.join(enabled)}), as Kafka requires",
            setting=name,
        )
    scoped = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    jaas = config.jaas_config(listener, mechanism)
    if not jaas:
        raise ConfigError(
            f"the inter-broker listener {listener} needs {scoped} (or sasl.jaas.config) "
            'with username="..." password="..." for this broker\'s own login',
            setting="sasl.jaas.config",
        )
    try:
        entry = parse_jaas(jaas)
    except ValueError as exc:
        raise ConfigError(f"{scoped}: {exc}", setting="sasl.jaas.config") from None
    if mechanism == OAUTHBEARER:
        return _oauthbearer_login(config, listener, protocol, context, entry.options, scoped)
    module = PLAIN_LOGIN_MODULE if mechanism == PLAIN else SCRAM_LOGIN_MODULE
    if entry.module != module:
        raise ConfigError(
            f"{scoped}: {mechanism} logs in with {module}, not {entry.module}",
            setting="sasl.jaas.config",
        )
    username, password = entry.options.get("username"), entry.options.get("password")
    if not username or password is None:
        raise ConfigError(
            f"{scoped}: the broker's own login needs username and password options",
            setting="sasl.jaas.config",
        )
    return InterBrokerSecurity(listener, protocol, context, mechanism, username, password)


def _oauthbearer_login(
    config: BrokerConfig,
    listener: str,
    protocol: str,
    context: ssl.SSLContext | None,
    options: dict[str, str],
    scoped: str,
) -> InterBrokerSecurity:
    """A token from the provider's endpoint (OAuthBearerLoginCallbackHandler), or an
    unsigned one of the unsecuredLogin* options; refused at start when the listener's
    own check would refuse that kind of token."""

    def setting(name: str) -> Any:
        return config.for_mechanism(listener, OAUTHBEARER, name)

    mechanism_setting = "sasl.mechanism.inter.broker.protocol"
    check = setting("sasl.server.callback.handler.class")
    signed_check = check in SIGNED_HANDLERS
    login = setting("sasl.login.callback.handler.class")
    if login is None:
        if signed_check:
            raise ConfigError(
                f"{mechanism_setting} OAUTHBEARER: without sasl.login.callback.handler.class a "
                f"broker logs in with an unsigned token, which listener {listener}'s {check} "
                f"refuses; set {sorted(LOGIN_HANDLERS)[0]} and sasl.oauthbearer.token.endpoint.url",
                setting=mechanism_setting,
            )
        try:
            bearer = UnsecuredLogin.from_jaas(options)
        except ValueError as exc:
            raise ConfigError(f"{scoped}: {exc}", setting="sasl.jaas.config") from None
        return InterBrokerSecurity(
            listener, protocol, context, OAUTHBEARER, bearer.principal, bearer=bearer
        )
    if not signed_check:
        raise ConfigError(
            f"{mechanism_setting} OAUTHBEARER: a broker logs in with a token from the "
            f"provider, which listener {listener}'s check of unsigned tokens refuses; set "
            "its sasl.server.callback.handler.class to OAuthBearerValidatorCallbackHandler",
            setting=mechanism_setting,
        )
    url = setting("sasl.oauthbearer.token.endpoint.url")
    client_id = options.get("clientId") or setting("sasl.oauthbearer.client.credentials.client.id")
    secret = options.get("clientSecret") or setting(
        "sasl.oauthbearer.client.credentials.client.secret"
    )
    if not url or (not url.startswith("file:") and (not client_id or secret is None)):
        raise ConfigError(
            f"listener {listener}: {login} needs sasl.oauthbearer.token.endpoint.url and "
            f'clientId="..." clientSecret="..." in {scoped}',
            setting="sasl.oauthbearer.token.endpoint.url",
        )
    timeouts = [setting("sasl.login.connect.timeout.ms"), setting("sasl.login.read.timeout.ms")]
    known = [t for t in timeouts if t is not None]
    oidc = ClientCredentialsLogin(
        token_url=url,
        client_id=client_id or "",
        client_secret=secret or "",
        scope=options.get("scope") or setting("sasl.oauthbearer.scope") or "",
        timeout_s=max(known) / 1000 if known else 10.0,
        backoff_s=setting("sasl.login.retry.backoff.ms") / 1000,
        backoff_max_s=setting("sasl.login.retry.backoff.max.ms") / 1000,
    )
    return InterBrokerSecurity(listener, protocol, context, OAUTHBEARER, oidc.principal, oidc=oidc)
