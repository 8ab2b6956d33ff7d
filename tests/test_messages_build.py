"""Responses described as dicts become the kio dataclass of the version asked for:
fields of other versions are dropped, a key no version has is an error."""

from __future__ import annotations

import subprocess
import sys

import pytest
from kio.schema.errors import ErrorCode

from kbroker.protocol.messages import UnknownFieldError, build_response

LIST_GROUPS = 16
DESCRIBE_GROUPS = 15


def test_a_field_of_a_newer_version_is_dropped_from_an_older_one() -> None:
    # group_state arrived in ListGroups v4.
    groups = [{"group_id": "g", "protocol_type": "consumer", "group_state": "Stable"}]
    old = build_response(LIST_GROUPS, 3, {"error_code": 0, "groups": groups})
    new = build_response(LIST_GROUPS, 4, {"error_code": 0, "groups": groups})
    assert not hasattr(old.groups[0], "group_state")
    assert new.groups[0].group_state == "Stable"


def test_a_misspelled_top_level_key_is_refused() -> None:
    with pytest.raises(UnknownFieldError, match="eror_code"):
        build_response(LIST_GROUPS, 4, {"eror_code": ErrorCode.not_coordinator, "groups": []})


def test_a_misspelled_key_in_a_nested_entity_is_refused() -> None:
    groups = [{"group_id": "g", "protocl_type": "consumer"}]
    with pytest.raises(UnknownFieldError, match="protocl_type"):
        build_response(LIST_GROUPS, 4, {"error_code": 0, "groups": groups})


def test_a_key_known_only_at_another_nesting_is_refused() -> None:
    # `members` belongs to a described group, not to the response itself.
    with pytest.raises(UnknownFieldError, match="members"):
        build_response(DESCRIBE_GROUPS, 5, {"groups": [], "members": []})


def test_a_field_of_another_version_is_dropped_after_descriptions_without_one() -> None:
    # The first description names only v2's fields; the next one adds v4's group_state.
    plain = [{"group_id": "g", "protocol_type": "consumer"}]
    assert build_response(LIST_GROUPS, 2, {"error_code": 0, "groups": plain}).groups
    more = [{**plain[0], "group_state": "Stable"}]
    old = build_response(LIST_GROUPS, 2, {"error_code": 0, "groups": more})
    assert old.groups[0].group_id == "g"
    assert not hasattr(old.groups[0], "group_state")


def test_a_description_of_only_this_versions_fields_loads_no_other_version() -> None:
    # Gathering every version's fields imports every version's schema module: tens of
    # milliseconds per API at the first answer of each broker process.
    code = (
        "import sys\n"
        "from kbroker.protocol.messages import build_response\n"
        "groups = [{'group_id': 'g', 'protocol_type': 'consumer', 'group_state': 'Stable',"
        " 'group_type': 'classic'}]\n"
        f"build_response({LIST_GROUPS}, 5, {{'error_code': 0, 'groups': groups}})\n"
        "print(*sorted({m.split('.')[3] for m in sys.modules"
        " if m.startswith('kio.schema.list_groups.v')}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["v5"]


def test_produce_flexibility_known_by_hand_agrees_with_kio() -> None:
    from kio.index import load_request_schema

    from kbroker.protocol.messages import PRODUCE, is_flexible, known_versions

    for version in range(0, known_versions(PRODUCE).stop):
        expected = version >= 3 and bool(load_request_schema(PRODUCE, version).__flexible__)
        assert is_flexible(PRODUCE, version) is expected, version
