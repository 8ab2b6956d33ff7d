"""A handler's RequestContext around fakes of the broker parts a test needs."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from kbroker.handlers.context import BrokerParts, RequestContext
from kbroker.protocol.header import RequestHeader
from kbroker.protocol.messages import known_versions, request_class
from kbroker.security.principal import ANONYMOUS, KafkaPrincipal


@dataclass
class FakeConnection:
    peer: str = "10.1.2.3:5555"
    closed_with: str | None = None
    listener_name: str = "PLAINTEXT"
    principal: KafkaPrincipal = ANONYMOUS

    def close(self, reason: str) -> None:
        self.closed_with = reason


def handler_context(
    api_key: int, version: int, client_id: str = "client", **parts: Any
) -> RequestContext:
    """A context whose broker has the given parts (by BrokerParts' field names); the parts
    a test leaves out are None, so a handler touching one fails the test loudly."""
    known = {f.name for f in fields(BrokerParts)}
    unknown = set(parts) - known
    assert not unknown, f"not parts of a broker: {unknown}"
    broker = BrokerParts(**{name: parts.get(name) for name in known})
    # A request the test builds itself reads the fields its version lacks as a decoded
    # one does (their Kafka defaults); Produce is decoded by hand.
    if api_key != 0:
        request_class(api_key, max(version, known_versions(api_key).start))
    return RequestContext(RequestHeader(api_key, version, 0, client_id), broker, FakeConnection())
