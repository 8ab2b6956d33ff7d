"""The handlers' typed edges: kbroker/protocol/requests.py and responses.py are what
scripts/message_types.py generates from kio's schemas and the handler registry, a request
of any served version reads every field of every served version, and no handler probes a
request with getattr or answers with an untyped dict."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import re
import subprocess
import sys
import typing
from dataclasses import fields
from pathlib import Path

import pytest
from kio.index import load_request_schema, load_response_schema

import kbroker
from kbroker import handlers  # noqa: F401  (registers every API handler)
from kbroker.handlers.registry import APIS
from kbroker.protocol import requests, responses
from kbroker.protocol.entity_build import nested_entity
from kbroker.protocol.messages import (
    API_NAMES,
    build,
    decode_request,
    encode,
    known_versions,
    request_class,
)

PRODUCE = 0  # decoded by hand into protocol.produce_request.ProduceRequest
ROOT = Path(kbroker.__file__).parent
SCRIPT = ROOT.parent / "scripts" / "message_types.py"


def _script() -> typing.Any:
    spec = importlib.util.spec_from_file_location("message_types", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["requests", "response_types"])
def test_the_generated_module_is_current(name: str, tmp_path: Path) -> None:
    script = _script()
    target = tmp_path / f"{name}.py"
    target.write_text(getattr(script, f"render_{name}")())
    script._format(target)
    current = (ROOT / "protocol" / f"{name}.py").read_text()
    assert target.read_text() == current, "run scripts/message_types.py"


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


def _field_names(cls: type, path: tuple[str, ...], into: dict[tuple[str, ...], set[str]]) -> None:
    hints = typing.get_type_hints(cls)
    for f in fields(cls):
        into.setdefault(path, set()).add(f.name)
        nested, _ = nested_entity(hints[f.name])
        if nested is not None:
            _field_names(nested, (*path, f.name), into)


def _classes(cls: type, path: tuple[str, ...], into: dict[tuple[str, ...], type]) -> None:
    into[path] = cls
    hints = typing.get_type_hints(cls)
    for f in fields(cls):
        nested, _ = nested_entity(hints[f.name])
        if nested is not None:
            _classes(nested, (*path, f.name), into)


@pytest.mark.parametrize("key", sorted(set(APIS) - {PRODUCE}), ids=lambda key: API_NAMES[key])
def test_a_request_of_any_version_reads_every_field_of_every_version(key: int) -> None:
    every: dict[tuple[str, ...], set[str]] = {}
    for version in _kio_versions(key):
        _field_names(load_request_schema(key, version), (), every)
    for version in _kio_versions(key):
        classes: dict[tuple[str, ...], type] = {}
        _classes(request_class(key, version), (), classes)
        for path, cls in classes.items():
            missing = {name for name in every[path] if not hasattr(cls, name)}
            assert not missing, f"v{version} {'.'.join(path) or 'request'} lacks {missing}"


def test_a_field_older_versions_lack_reads_as_kafkas_default() -> None:
    join_group, v0, newest = 11, 0, APIS[11].max_version
    body = {
        "group_id": "g",
        "session_timeout": 10_000,
        "member_id": "",
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}],
    }
    old = encode(build(load_request_schema(join_group, v0), body))
    request = decode_request(join_group, v0, old, 0)
    assert request.rebalance_timeout.total_seconds() == -0.001  # Kafka's default, -1 ms
    assert request.group_instance_id is None and request.reason is None
    new = encode(build(load_request_schema(join_group, newest), {**body, "reason": "why"}))
    assert decode_request(join_group, newest, new, 0).reason == "why"


def test_importing_the_handlers_loads_no_schema_nor_creates_the_response_types() -> None:
    code = (
        "import sys, kbroker.protocol.requests, kbroker.protocol.responses, kbroker.handlers; "
        "print(sorted(m for m in sys.modules if m.startswith('kio.schema.')"
        " and m.endswith(('.request', '.response')) or m == 'kbroker.protocol.response_types'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_every_api_has_a_response_type() -> None:
    tops = set(typing.get_args(responses.Response))
    for key in APIS:
        name = load_response_schema(key, known_versions(key).stop - 1).__name__
        assert getattr(responses, name) in tops


# -- no probes, no untyped answers ---------------------------------------------------------

# getattr on a module is a lookup of a name, not a probe of a request.
NOT_PROBES = {"module"}


def request_probes() -> list[str]:
    """getattr/hasattr calls in the handlers: a request's fields are all typed (every
    version's, through protocol.requests), so none is needed."""
    found = []
    for path in sorted((ROOT / "handlers").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr")
                and not (isinstance(node.args[0], ast.Name) and node.args[0].id in NOT_PROBES)
            ):
                found.append(f"{path.name}:{node.lineno}")
    return found


def test_no_handler_probes_a_request_with_getattr() -> None:
    assert request_probes() == []


UNTYPED = re.compile(r"\bAny\b|\bdict\[")


def untyped_handlers() -> list[str]:
    """Registered handlers declared to return Any or a plain dict."""
    found = []
    for api in APIS.values():
        returns = inspect.signature(api.handler).return_annotation
        if UNTYPED.search(str(returns)):
            found.append(f"{Path(inspect.getfile(api.handler)).name}:{api.handler.__name__}")
    return sorted(found)


def test_handlers_answer_with_their_apis_typed_dict() -> None:
    assert untyped_handlers() == []


def test_old_fields_kio_lacks_reach_the_handler() -> None:
    # OffsetCommit v1's commit timestamp and ListOffsets v0's max_num_offsets are read
    # into a subclass of kio's oldest class; other versions read Kafka's defaults.
    import struct

    from kbroker.protocol import messages

    def s(text: str) -> bytes:
        return struct.pack(">h", len(text)) + text.encode()

    partition = struct.pack(">iqq", 0, 5, 1_234) + s("m")
    body = s("g") + struct.pack(">i", 3) + s("m1") + struct.pack(">i", 1) + s("t")
    body += struct.pack(">i", 1) + partition
    v1 = messages.decode_request(8, 1, body, 0)
    assert v1.topics[0].partitions[0].commit_timestamp == 1_234
    v0_body = s("g") + struct.pack(">i", 1) + s("t") + struct.pack(">iiq", 1, 0, 5) + s("m")
    v0 = messages.decode_request(8, 0, v0_body, 0)
    assert v0.topics[0].partitions[0].commit_timestamp == -1
    listed = (
        struct.pack(">ii", -1, 1) + s("t") + struct.pack(">i", 1) + struct.pack(">iqi", 0, -1, 7)
    )
    assert messages.decode_request(2, 0, listed, 0).topics[0].partitions[0].max_num_offsets == 7
