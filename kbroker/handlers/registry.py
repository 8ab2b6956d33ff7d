"""The table of APIs the broker serves: one entry per API key, one source of truth.

ApiVersions answers from this table, the connection dispatches through it, and a
handler's declared version range is exactly what the broker advertises.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from kbroker.protocol.messages import known_versions

Handler = Callable[[Any, Any], Any]


@dataclass(frozen=True, slots=True)
class Api:
    key: int
    min_version: int
    max_version: int
    handler: Handler

    def serves(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


APIS: dict[int, Api] = {}


def handles(
    key: int, min_version: int, max_version: int | None = None
) -> Callable[[Handler], Handler]:
    """Register a handler for API `key`, versions min..max (max defaults to kio's newest)."""

    def register(fn: Handler) -> Handler:
        top = known_versions(key).stop - 1 if max_version is None else max_version
        if key in APIS:
            raise RuntimeError(f"API {key} registered twice")
        APIS[key] = Api(key, min_version, top, fn)
        return fn

    return register


@dataclass(frozen=True, slots=True)
class NoResponse:
    """Returned by a handler when the client expects no answer (Produce with acks=0)."""


NO_RESPONSE = NoResponse()

HandlerResult = dict[str, Any] | Any | NoResponse | Awaitable[Any]
