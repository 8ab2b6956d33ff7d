"""kbroker/protocol/requests.py names, per API, exactly the request classes of the
versions its handler serves (regenerate it with scripts/request_types.py)."""

from __future__ import annotations

import ast
import subprocess
import sys
import typing
from pathlib import Path

import pytest
from kio.index import load_request_schema

from kbroker import handlers  # noqa: F401  (registers every API handler)
from kbroker.handlers.registry import APIS
from kbroker.protocol import requests
from kbroker.protocol.messages import API_NAMES, known_versions

PRODUCE = 0  # decoded by hand into protocol.produce_request.ProduceRequest


def _kio_versions(key: int) -> range:
    """The served versions kio has classes for: older ones (protocol.legacy_messages) are
    decoded into the class of the oldest of these."""
    api = APIS[key]
    return range(max(api.min_version, known_versions(key).start), api.max_version + 1)


@pytest.mark.parametrize("key", sorted(set(APIS) - {PRODUCE}), ids=lambda key: API_NAMES[key])
def test_the_request_type_is_the_union_of_the_served_versions(key: int) -> None:
    served = [load_request_schema(key, v) for v in _kio_versions(key)]
    alias = getattr(requests, served[-1].__name__)
    members = typing.get_args(alias) or (alias,)
    assert list(members) == served


def _checked_aliases() -> dict[str, list[tuple[str, str]]]:
    """The aliases mypy sees (the file's `if TYPE_CHECKING:` block), as
    {alias: [(module, class), ...]}, read from the source since that block never runs."""
    tree = ast.parse(Path(requests.__file__).read_text())
    block = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    )
    modules = {
        name.asname: name.name
        for node in block.body
        if isinstance(node, ast.Import)
        for name in node.names
    }
    aliases: dict[str, list[tuple[str, str]]] = {}
    for node in block.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            members = ast.unparse(node.value).split(" | ")
            aliases[node.target.id] = [(modules[m.split(".")[0]], m.split(".")[1]) for m in members]
    return aliases


def test_the_type_checked_aliases_name_the_same_classes() -> None:
    checked = _checked_aliases()
    for key in sorted(set(APIS) - {PRODUCE}):
        served = [load_request_schema(key, v) for v in _kio_versions(key)]
        assert checked.pop(served[-1].__name__) == [(c.__module__, c.__name__) for c in served]
    assert checked == {}


def test_importing_the_module_loads_no_request_schema() -> None:
    code = (
        "import sys, kbroker.protocol.requests; "
        "print(sorted(m for m in sys.modules if m.startswith('kio.schema.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
