"""`kbroker completion`: the scripts complete the parser's own commands and options."""

from __future__ import annotations

import subprocess

from kbroker.admin.completion import command_tree, script
from kbroker.cli import _parser


def complete_in_bash(words: list[str]) -> list[str]:
    bash_script = script(_parser(), "bash")
    program = (
        bash_script
        + f"COMP_WORDS=({' '.join(words)}); COMP_CWORD={len(words) - 1}; _kbroker; "
        + 'printf "%s\\n" "${COMPREPLY[@]}"'
    )
    result = subprocess.run(["bash", "-c", program], capture_output=True, text=True, check=True)
    return result.stdout.split()


def test_bash_completes_commands_subcommands_and_options():
    assert complete_in_bash(["kbroker", "to"]) == ["topics"]
    assert set(complete_in_bash(["kbroker", "topics", "de"])) == {
        "describe",
        "delete",
        "delete-records",
    }
    assert set(complete_in_bash(["kbroker", "acls", "create", "--res"])) == {
        "--resource-pattern-type"
    }
    assert set(complete_in_bash(["kbroker", "topics", "create", "--par"])) == {"--partitions"}
    assert "--bootstrap-server" in complete_in_bash(["kbroker", "produce", "--boot"])


def test_every_command_of_the_parser_is_in_each_script():
    tree = command_tree(_parser())
    assert "cluster elect-leaders" in tree and "--version" in tree[""][1]
    for shell in ("bash", "zsh", "fish"):
        text = script(_parser(), shell)
        for path, (children, _) in tree.items():
            for child in children:
                assert child in text, (shell, path, child)
