"""kbroker/protocol/requests.py names, per API, exactly the request classes of the
versions its handler serves (regenerate it with scripts/request_types.py)."""

from __future__ import annotations

import typing

import pytest
from kio.index import load_request_schema

from kbroker import handlers  # noqa: F401  (registers every API handler)
from kbroker.handlers.registry import APIS
from kbroker.protocol import requests
from kbroker.protocol.messages import API_NAMES

PRODUCE = 0  # decoded by hand into protocol.produce_request.ProduceRequest


@pytest.mark.parametrize("key", sorted(set(APIS) - {PRODUCE}), ids=lambda key: API_NAMES[key])
def test_the_request_type_is_the_union_of_the_served_versions(key: int) -> None:
    api = APIS[key]
    served = [load_request_schema(key, v) for v in range(api.min_version, api.max_version + 1)]
    alias = getattr(requests, served[-1].__name__)
    members = typing.get_args(alias) or (alias,)
    assert list(members) == served
