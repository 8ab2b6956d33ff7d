"""Wiring the schema registry into a broker: the `_schemas` service every node runs, and
the REST listeners of `schema.registry.listeners`, with authentication and ACLs."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from kbroker.config.listeners import parse_registry_listener
from kbroker.coordinator_runtime.internal_topics import ServiceBroker
from kbroker.schemas.api import CONFIGURE, READ, WRITE, RegistryApi, Request
from kbroker.schemas.http import (
    BearerCheck,
    RegistryHttpServer,
    Unauthenticated,
    password_checker,
)
from kbroker.schemas.service import SCHEMAS_TOPIC, SchemaRegistryService
from kbroker.security.acl import Operation, ResourceType, StandardAuthorizer
from kbroker.security.jwt import TokenRefused
from kbroker.security.oauthbearer import BearerSettings, bearer_settings
from kbroker.security.principal import KafkaPrincipal

if TYPE_CHECKING:
    from kbroker.security.oauthbearer import Validate
    from kbroker.security.scram import ScramCredential

log = logging.getLogger("kbroker.schemas")


class RegistryBroker(ServiceBroker, Protocol):
    """What the registry reads of the broker running it, beside what every service on an
    internal topic does: the listeners' users and the ACLs."""

    @property
    def listener_security(self) -> Iterable[tuple[Any, object]]: ...

    @property
    def authorizer(self) -> StandardAuthorizer | None: ...

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None: ...

    def bearer_check(self, bearer: BearerSettings) -> Validate: ...


REGISTRY_LISTENER = "SCHEMA_REGISTRY"  # whose ssl.* settings https listeners use
# What each kind of request needs of the TOPIC _schemas (see docs/schema-registry.md).
OPERATIONS = {READ: Operation.DESCRIBE, WRITE: Operation.WRITE, CONFIGURE: Operation.ALTER_CONFIGS}


def advertised_url(broker: RegistryBroker) -> str | None:
    config = broker.config
    explicit = config.schema_registry_advertised_listener
    if explicit:
        return str(explicit).rstrip("/")
    listeners = config.schema_registry_listeners
    if not listeners:
        return None
    endpoint = parse_registry_listener(listeners[0])
    host = endpoint.host
    if endpoint.is_wildcard or not host:
        host = broker.config.inter_broker_endpoint.host or "127.0.0.1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{endpoint.name.lower()}://{host}:{endpoint.port}"


class RegistryFront:
    def __init__(self, broker: RegistryBroker) -> None:
        self.broker = broker
        config = broker.config
        self.endpoints = [parse_registry_listener(t) for t in config.schema_registry_listeners]
        self.service = SchemaRegistryService(
            broker, advertised_url(broker) if self.endpoints else None
        )
        self.context: Any = None
        if any(e.name == "HTTPS" for e in self.endpoints):
            from kbroker.security.tls import client_context, server_context

            listener_config = config.listener_settings(REGISTRY_LISTENER)
            self.context = server_context(REGISTRY_LISTENER, listener_config)
            self.service.ssl_context = client_context(REGISTRY_LISTENER, listener_config)
        authenticate = None
        bearer = None
        method = str(config.schema_registry_authentication_method).upper()
        if method == "BASIC":
            plain: dict[str, str] = {}
            for _, security in broker.listener_security:
                plain.update(getattr(security, "plain_users", None) or {})
            authenticate = password_checker(plain, broker.scram_credential)
        elif method == "BEARER":
            bearer = self._bearer_check()
        self.api = RegistryApi(self.service, self._authorize if broker.authorizer else None)
        self.http = RegistryHttpServer(
            self.api, authenticate, config.schema_registry_request_timeout_ms / 1000, bearer
        )

    def _bearer_check(self) -> BearerCheck:
        """Tokens are checked as an OAUTHBEARER listener named SCHEMA_REGISTRY would check
        them: ``listener.name.schema_registry.oauthbearer.*`` settings, else the
        broker-wide ``sasl.server.callback.handler.class`` and ``sasl.oauthbearer.*``."""
        settings = bearer_settings(self.broker.config, REGISTRY_LISTENER, require_jaas=False)
        validate = self.broker.bearer_check(settings)

        def check(token: str) -> str:
            try:
                return validate(token).principal
            except TokenRefused as exc:
                raise Unauthenticated(str(exc)) from None

        log.info(
            "schema registry requests authenticate with %s bearer tokens",
            "unsigned (development)" if settings.signed is None else "signed",
        )
        return check

    def _authorize(self, request: Request, action: str) -> bool:
        authorizer = self.broker.authorizer
        if authorizer is None:
            return True
        principal = KafkaPrincipal("User", request.principal or "ANONYMOUS")
        host = request.peer
        return authorizer.authorize(
            principal, host, OPERATIONS[action], ResourceType.TOPIC, SCHEMAS_TOPIC
        )

    async def start_service(self) -> None:
        await self.service.start()

    async def start_listeners(self) -> None:
        for endpoint in self.endpoints:
            context = self.context if endpoint.name == "HTTPS" else None
            try:
                await self.http.start(endpoint.host, endpoint.port, context)
            except OSError as exc:
                log.error(
                    "cannot serve the schema registry on %s:%d: %s",
                    endpoint.host,
                    endpoint.port,
                    exc,
                )
                raise
            log.info(
                "serving the schema registry on %s://%s:%d (writes forwarded to the writer; "
                "this node advertises %s)",
                endpoint.name.lower(),
                endpoint.host,
                endpoint.port,
                self.service.url,
            )

    async def stop(self) -> None:
        await self.http.stop()
        await self.service.stop()
