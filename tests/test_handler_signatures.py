"""Every registered handler is typed: its first parameter is the RequestContext, its
second a kio request class of its own API (never Any)."""

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


def _body_type(key: int) -> object:
    handler = APIS[key].handler
    body = list(inspect.signature(handler).parameters)[1]
    return typing.get_type_hints(handler)[body]


@pytest.mark.parametrize("key", sorted(APIS), ids=lambda key: API_NAMES[key])
def test_the_body_is_typed_as_a_request_of_the_api(key: int) -> None:
    body = _body_type(key)
    members = typing.get_args(body) or (body,)
    assert body is not typing.Any
    assert all(isinstance(m, type) for m in members)
    assert all(getattr(m, "__api_key__", key) == key for m in members)
