"""What a listener's security protocol asks of its connections, built once at start.

``listener.security.protocol.map`` gives each listener PLAINTEXT, SSL, SASL_PLAINTEXT or
SASL_SSL; its ``ssl.*`` and SASL settings come from ``listener.name.<listener>.*`` with
the broker-wide names as fallback. Anything a listener cannot serve (a non-PEM key
store, a mechanism kbroker does not speak, PLAIN without users, an OAUTHBEARER check
kbroker does not have) stops the start here.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field

from kbroker.config.broker import BrokerConfig
from kbroker.config.errors import ConfigError
from kbroker.config.listeners import Endpoint
from kbroker.config.principal_rules import MappingRule, parse_mapping_rules
from kbroker.security.jaas import parse_jaas, plain_users
from kbroker.security.oauthbearer import OAUTHBEARER, BearerSettings, bearer_settings
from kbroker.security.sasl import PLAIN, SUPPORTED_MECHANISMS
from kbroker.security.tls import server_context, tls13_suites
from kbroker.security.tls_session import TlsSession


@dataclass(frozen=True)
class ListenerSecurity:
    name: str
    protocol: str
    ssl_context: ssl.SSLContext | None = None
    tls13_suites: str | None = None  # TLS 1.3 suites each session narrows to (None: all)
    mechanisms: tuple[str, ...] = ()
    plain_users: dict[str, str] = field(default_factory=dict)
    principal_rules: tuple[MappingRule, ...] = ()
    reauth_ms: int = 0
    # connections.max.reauth.ms of a mechanism (listener.name.<l>.<mechanism>.*), where set
    reauth_ms_by_mechanism: dict[str, int] = field(default_factory=dict)
    bearer: BearerSettings | None = None  # how OAUTHBEARER tokens are checked

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def max_reauth_ms(self, mechanism: str | None) -> int:
        """connections.max.reauth.ms for a session of this mechanism."""
        return self.reauth_ms_by_mechanism.get(mechanism or "", self.reauth_ms)


def listener_security(config: BrokerConfig, endpoint: Endpoint) -> ListenerSecurity:
    name = endpoint.name
    protocol = config.protocol_map[name]

    listener_config = config.listener_settings(name)

    context = None
    suites = None
    if protocol in ("SSL", "SASL_SSL"):
        context = server_context(name, listener_config)
        suites = tls13_suites(listener_config)
        if suites is not None and not TlsSession(context).reads_records_in_c:
            raise ConfigError(
                f"listener {name}: ssl.cipher.suites narrows TLS 1.3's suites, which needs "
                "kbroker's C TLS reader (built with OpenSSL's headers: make serve builds it)",
                setting="ssl.cipher.suites",
            )
    mechanisms: tuple[str, ...] = ()
    users: dict[str, str] = {}
    bearer = None
    if protocol.startswith("SASL_"):
        mechanisms = tuple(m.strip().upper() for m in listener_config.sasl_enabled_mechanisms)
        unknown = [m for m in mechanisms if m not in SUPPORTED_MECHANISMS]
        if unknown or not mechanisms:
            raise ConfigError(
                f"listener {name}: sasl.enabled.mechanisms enables {', '.join(unknown) or 'none'}"
                f"; kbroker serves {', '.join(SUPPORTED_MECHANISMS)}",
                setting="sasl.enabled.mechanisms",
            )
        if PLAIN in mechanisms:
            jaas = config.jaas_config(name, PLAIN)
            if not jaas:
                raise ConfigError(
                    f"listener {name}: PLAIN needs listener.name.{name.lower()}.plain."
                    "sasl.jaas.config (or sasl.jaas.config) naming its users",
                    setting="sasl.jaas.config",
                )
            try:
                users = plain_users(parse_jaas(jaas))
            except ValueError as exc:
                raise ConfigError(
                    f"listener {name}: sasl.jaas.config: {exc}", setting="sasl.jaas.config"
                ) from None
        if OAUTHBEARER in mechanisms:
            bearer = bearer_settings(config, name)
    return ListenerSecurity(
        name=name,
        protocol=protocol,
        ssl_context=context,
        tls13_suites=suites,
        mechanisms=mechanisms,
        plain_users=users,
        principal_rules=parse_mapping_rules(listener_config.ssl_principal_mapping_rules),
        reauth_ms=listener_config.connections_max_reauth_ms,
        reauth_ms_by_mechanism={
            mechanism: config.for_mechanism(name, mechanism, "connections.max.reauth.ms")
            for mechanism in mechanisms
        },
        bearer=bearer,
    )
