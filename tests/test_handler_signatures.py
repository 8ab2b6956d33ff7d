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
