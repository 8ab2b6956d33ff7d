"""How this broker connects to other brokers: the inter-broker listener's protocol, as
Kafka's broker configures its own client side.

The listener is ``inter.broker.listener.name`` (or the one named by
``security.inter.broker.protocol``). Over SSL or SASL_SSL the broker verifies the other
broker with the listener's trust store and offers its key store as its certificate; over
SASL it logs in with ``sasl.mechanism.inter.broker.protocol`` and the ``username`` /
``password`` options of the listener's JAAS line for that mechanism
(``listener.name.<l>.<mechanism>.sasl.jaas.config``, else ``sasl.jaas.config``), the
same line whose ``user_<name>`` options list PLAIN users; with OAUTHBEARER, an unsigned
token of the line's ``unsecuredLogin*`` options (Kafka's unsecured login module). Whatever cannot work is
refused at start, naming the setting, never showing the password.
"""

from __future__ import annotations

import ssl
import time
from dataclasses import dataclass, field

from kbroker.config.broker import BrokerConfig
from kbroker.config.errors import ConfigError
from kbroker.security.jaas import PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE, parse_jaas
from kbroker.security.oauthbearer import OAUTHBEARER, SIGNED_HANDLERS, UnsecuredLogin
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

    def login(self) -> Exchange:
        """The client side of the SASL exchange (sans-IO): yields each message, is sent
        each answer."""
        if self.mechanism == PLAIN:
            return plain(self.username, self.password)
        if self.bearer is not None:
            return oauthbearer(self.bearer.token(time.time()), self.bearer.extensions)
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
        handler = config.for_mechanism(listener, OAUTHBEARER, "sasl.server.callback.handler.class")
        if handler in SIGNED_HANDLERS:
            raise ConfigError(
                f"{name} OAUTHBEARER: a broker logs in with an unsigned token (Kafka's "
                f"unsecured login module), which listener {listener}'s {handler} refuses; "
                "use another mechanism or listener between brokers",
                setting=name,
            )
        try:
            bearer = UnsecuredLogin.from_jaas(entry.options)
        except ValueError as exc:
            raise ConfigError(f"{scoped}: {exc}", setting="sasl.jaas.config") from None
        return InterBrokerSecurity(
            listener, protocol, context, mechanism, bearer.principal, bearer=bearer
        )
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
