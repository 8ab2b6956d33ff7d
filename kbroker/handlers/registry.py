"""The table of APIs the broker serves: one entry per API key, one source of truth.

ApiVersions answers from this table, the connection dispatches through it, and a
handler's declared version range is exactly what the broker advertises.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

from kbroker.protocol.messages import known_versions

if TYPE_CHECKING:
    from kbroker.handlers.context import RequestContext
    from kbroker.protocol.encoded import EncodedBody
    from kbroker.protocol.responses import Response

Handler = Callable[["RequestContext", Any], "HandlerResult"]
"""A handler: the request's context and its decoded body (a `requests.<Api>Request`), to
an answer; `handles` refuses, under mypy, a handler declared to return anything else."""


@dataclass(frozen=True, slots=True)
class Api:
    key: int
    min_version: int
    max_version: int
    handler: Handler
    enabled_by: str | None = None  # a boolean broker setting the API is served only under
    # From this version on the API is one only brokers send, overlapping independent
    # requests on one link: its later answer holds back no later request of the
    # connection (others answer in the order they were sent, as Kafka's do).
    unordered_from: int | None = None

    def serves(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version

    def ordered(self, version: int) -> bool:
        """Whether later requests of the connection wait for this one's answer."""
        return self.unordered_from is None or version < self.unordered_from

    def enabled(self, config: SettingSource) -> bool:
        return self.enabled_by is None or bool(config.get(self.enabled_by))


class SettingSource(Protocol):
    def get(self, name: str) -> Any: ...


APIS: dict[int, Api] = {}


def handles(
    key: int,
    min_version: int,
    max_version: int | None = None,
    enabled_by: str | None = None,
    unordered_from: int | None = None,
) -> Callable[[Handler], Handler]:
    """Register a handler for API `key`, versions min..max (max defaults to kio's newest);
    with `enabled_by`, only while that boolean broker setting is on (neither advertised
    nor answered otherwise, as Kafka leaves out the APIs of a disabled feature); with
    `unordered_from`, its answers from that version on do not order the connection's
    later requests (`Api.ordered`)."""

    def register(fn: Handler) -> Handler:
        top = known_versions(key).stop - 1 if max_version is None else max_version
        if key in APIS:
            raise RuntimeError(f"API {key} registered twice")
        APIS[key] = Api(key, min_version, top, fn, enabled_by, unordered_from)
        return fn

    return register


def served_apis(config: SettingSource) -> list[Api]:
    """The APIs this broker serves under its settings, by key."""
    return [api for _, api in sorted(APIS.items()) if api.enabled(config)]


def api_gates(config: SettingSource) -> tuple[bool, ...]:
    """The settings that decide which APIs are served, by name: equal tuples, the same
    `served_apis`."""
    names = sorted({api.enabled_by for api in APIS.values() if api.enabled_by is not None})
    return tuple(bool(config.get(name)) for name in names)


@dataclass(frozen=True, slots=True)
class NoResponse:
    """Returned by a handler when the client expects no answer (Produce with acks=0)."""


NO_RESPONSE = NoResponse()


class Later:
    """An answer settled later by a plain callback: the connection writes it the moment
    `settle` or `fail` is called, with no task, future or loop iteration in between.

    For answers whose latency is the product, above all the acknowledgement that
    follows an fsync; anything that has to await uses a coroutine instead.
    """

    __slots__ = ("_listener", "_outcome", "on_abandon")

    def __init__(self) -> None:
        self._listener: Callable[[Any, BaseException | None], None] | None = None
        self._outcome: tuple[Any, BaseException | None] | None = None
        # Called when nobody will take the answer any more (its connection closed), so
        # whatever was to settle it can stop; only for answers that may wait long.
        self.on_abandon: Callable[[], None] | None = None

    def abandon(self) -> None:
        """The answer is no longer wanted: stop what would settle it, if it says how."""
        stop, self.on_abandon = self.on_abandon, None
        if stop is not None and self._outcome is None:
            stop()

    @property
    def settled(self) -> bool:
        return self._outcome is not None

    def settle(self, value: Any) -> None:
        self._finish(value, None)

    def fail(self, error: BaseException) -> None:
        self._finish(None, error)

    def then(self, listener: Callable[[Any, BaseException | None], None]) -> None:
        """Call `listener(value, error)` once settled (at once if it already is)."""
        if self._outcome is not None:
            listener(*self._outcome)
        else:
            self._listener = listener

    def _finish(self, value: Any, error: BaseException | None) -> None:
        if self._outcome is not None:
            return
        self._outcome = (value, error)
        # Settled, it drops both callbacks: each is usually a method or closure of what
        # holds this Later (a parked Fetch's `_abandon`, the connection's slot), a cycle
        # that would otherwise outlive the request until the cyclic collector ran.
        self.on_abandon = None
        listener, self._listener = self._listener, None
        if listener is not None:
            listener(value, error)


Answer: TypeAlias = "Response | bytes | EncodedBody"
"""A response as the API's TypedDict (protocol.responses), or encoded by the API's own
encoder (Fetch, Produce and the other hot APIs)."""

HandlerResult: TypeAlias = "Answer | NoResponse | Later | Awaitable[Answer | NoResponse | Later]"
"""What a handler returns: its answer now, none, or one to come (a coroutine may end in a
Later: its work is done, its answer is not)."""
