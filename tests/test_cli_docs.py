"""docs/cli.md documents every command the parser defines, and its reference is current."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbroker.admin.completion import command_tree
from kbroker.cli import _parser
from kbroker.docs import cli_reference as reference

PAGE_PATH = Path(__file__).resolve().parent.parent / "docs" / "cli.md"
PAGE = PAGE_PATH.read_text()
PROSE = PAGE.split(reference.BEGIN)[0]
TREE = command_tree(_parser())


def test_the_reference_is_what_the_parser_makes_now():
    assert reference.updated(PAGE, _parser()) == PAGE, "docs/cli.md is stale: run make docs"


@pytest.mark.parametrize("path", sorted(p for p in TREE if p))
def test_each_subcommand_has_a_section_with_its_options(path):
    section = PAGE.split(f"\n### kbroker {path}", 1)
    assert len(section) == 2, f"no section for kbroker {path}"
    body = section[1].split("\n### ", 1)[0]
    for option in TREE[path][1]:
        if option not in reference.COMMON | {"--bootstrap-server"}:
            assert f"`{option}`" in body, (path, option)


@pytest.mark.parametrize("command", sorted(TREE[""][0]))
def test_each_command_is_explained_in_the_prose(command):
    assert f"kbroker {command}" in PROSE


def test_a_stale_reference_is_made_current_again():
    stale = PAGE.replace("### kbroker topics trim", "### kbroker topics cut")
    assert reference.with_reference(stale) == PAGE
