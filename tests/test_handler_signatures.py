"""Every registered handler is typed: its first parameter is the RequestContext."""

from __future__ import annotations

import inspect
import typing

import pytest

from kbroker import handlers  # noqa: F401  (registers every API handler)
from kbroker.handlers.context import RequestContext
from kbroker.handlers.registry import APIS
from kbroker.protocol.messages import API_NAMES


@pytest.mark.parametrize("key", sorted(APIS), ids=lambda key: API_NAMES[key])
def test_the_handler_takes_a_request_context_not_any(key: int) -> None:
    handler = APIS[key].handler
    first = next(iter(inspect.signature(handler).parameters))
    assert typing.get_type_hints(handler)[first] is RequestContext


# Handlers reading fields that only some versions have, guarded by ctx.version where
# mypy cannot follow: their body stays untyped until narrowed by version.
UNTYPED_BODIES = {
    "add_partitions_to_txn",
    "alter_user_scram_credentials",
    "consumer_group_heartbeat",
    "find_coordinator",
    "leave_group",
    "offset_commit",
    "offset_fetch",
    "share_fetch",
}


def _body_type(key: int) -> object:
    handler = APIS[key].handler
    body = list(inspect.signature(handler).parameters)[1]
    return typing.get_type_hints(handler)[body]


def test_only_the_listed_handlers_take_an_untyped_body() -> None:
    untyped = {APIS[key].handler.__name__ for key in APIS if _body_type(key) is typing.Any}
    assert untyped == UNTYPED_BODIES


@pytest.mark.parametrize(
    "key",
    sorted(k for k in APIS if APIS[k].handler.__name__ not in UNTYPED_BODIES),
    ids=lambda key: API_NAMES[key],
)
def test_the_body_is_typed_as_a_request_of_the_api(key: int) -> None:
    body = _body_type(key)
    members = typing.get_args(body) or (body,)
    assert all(getattr(m, "__api_key__", key) == key for m in members)
    assert all(isinstance(m, type) for m in members)
