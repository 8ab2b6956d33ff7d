"""What `pip install kbroker` and `kbroker --version` show: the license, the project's
metadata, one version everywhere, and one-line answers to a wrong command line."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import kbroker
from kbroker.cli import _parser

ROOT = Path(__file__).resolve().parent.parent


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_license_is_apache_2_in_full_and_declared() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text  # the full text, not a pointer to it
    project = pyproject()["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]


def test_the_project_metadata_is_complete() -> None:
    project = pyproject()["project"]
    for key in ("description", "readme", "requires-python", "authors", "keywords", "urls"):
        assert project.get(key), key
    assert any(
        c.startswith("Programming Language :: Python :: 3.11") for c in project["classifiers"]
    )
    # What the broker needs and nothing the tests need: the test clients stay an extra.
    runtime = " ".join(project["dependencies"])
    for test_only in ("pytest", "confluent-kafka", "pyspark", "mypy", "ruff", "hypothesis"):
        assert test_only not in runtime


def test_the_version_has_one_source() -> None:
    config = pyproject()
    assert config["project"]["dynamic"] == ["version"]
    assert config["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "kbroker.__version__"}


def test_version_option_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        _parser().parse_args(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"kbroker {kbroker.__version__}\n"


@pytest.mark.parametrize(
    "argv, says",
    [
        ([], "the following arguments are required: command (see kbroker --help)"),
        (["frob"], "invalid choice: 'frob'"),
        (["serve", "--bogus"], "unrecognized arguments: --bogus (see kbroker --help)"),
        (["topics", "create"], "required: topic (see kbroker topics create --help)"),
    ],
)
def test_a_wrong_command_line_gets_one_line(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        _parser().parse_args(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err, err


def test_the_console_script_prints_the_version_without_a_traceback() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "kbroker", "--version"], capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        f"kbroker {kbroker.__version__}\n",
        "",
    )


# The pages README.md links itself; a page added later may instead be linked from one of
# these (README.md is rewritten by one hand, docs pages by many).
FRONT_DOOR_PAGES = [
    "configuration.md",
    "cluster.md",
    "security.md",
    "operations.md",
    "compatibility.md",
    "architecture.md",
    "benchmarks.md",
    "cli.md",
    "schema-registry.md",
    "dynamic-configuration.md",
    "kafka-differences.md",
    "deployment.md",
]


def test_the_readme_is_a_front_door_that_leads_to_every_docs_page() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)\s]*)?\)", text)
    for target in links:
        if not target.startswith(("http://", "https://")):
            assert (ROOT / target).exists(), f"README.md links to {target}, which does not exist"
    for page in FRONT_DOOR_PAGES:
        assert f"docs/{page}" in links, f"README.md does not link docs/{page}"
    second_hand = {
        link
        for target in links
        if target.startswith("docs/")
        for link in re.findall(r"\]\(([^)#\s/]+\.md)", (ROOT / target).read_text())
    }
    for page in (ROOT / "docs").glob("*.md"):
        assert f"docs/{page.name}" in links or page.name in second_hand, page.name
