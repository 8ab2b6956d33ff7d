"""The reference pages in docs/ against the code they describe.

Generated pages (configuration, compatibility, the metric table of operations) must be
what ``make docs`` makes from the code now; the hand-written architecture page may name
only files and functions that exist.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

from kbroker.config import BROKER_CONFIGS, TOPIC_CONFIGS
from kbroker.config.broker_settings import KBROKER_OWN
from kbroker.config.types import ConfigType, SettingRole, valid_values
from kbroker.docs import __main__ as docs_main
from kbroker.docs import compatibility, layers, metrics
from kbroker.docs.kafka_apis import KAFKA_APIS
from kbroker.handlers.registry import APIS

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"


@pytest.mark.parametrize("page", sorted(p.name for p in docs_main.pages()))
def test_generated_page_is_what_make_docs_makes_now(page: str) -> None:
    path = DOCS / page
    make = docs_main.pages()[path]
    current = path.read_text()
    assert make(current) == current, f"docs/{page} is stale: run `make docs` and commit it"


def test_check_mode_names_a_stale_page_and_fails(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    for path in docs_main.pages():
        (tmp_path / path.name).write_text(path.read_text())
    page = tmp_path / "configuration.md"
    page.write_text(page.read_text().replace("`log.retention.hours`", "`log.retention.days`"))
    original = docs_main.DOCS
    docs_main.DOCS = tmp_path
    try:
        assert docs_main.main(["--check"]) == 1
        assert "configuration.md is stale" in capsys.readouterr().err
        assert docs_main.main([]) == 0
        assert docs_main.main(["--check"]) == 0
    finally:
        docs_main.DOCS = original


def _table_rows(page: str, heading: str) -> dict[str, list[str]]:
    """The rows of the first table under ``heading``, by the first cell's text."""
    section = page.split(f"\n## {heading}", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            rows[cells[0].strip("`")] = cells
    return rows


def test_configuration_page_has_a_row_per_setting_with_its_table_values() -> None:
    page = (DOCS / "configuration.md").read_text()
    broker = _table_rows(page, "Broker settings")
    assert set(broker) == set(BROKER_CONFIGS)
    for name, d in BROKER_CONFIGS.items():
        _, kind, default, valid, mode, origin, role, _doc = broker[name]
        assert kind == d.type.name.lower()
        if d.type is not ConfigType.PASSWORD and d.default not in (None, "", []):
            assert default == f"`{d.format(d.default)}`", name
        assert valid == valid_values(d.validator).replace("|", "\\|")
        assert mode == d.mode.value
        assert origin == ("kbroker" if name in KBROKER_OWN else "Kafka")
        assert role == d.role.value
    topic = _table_rows(page, "Topic configs")
    assert set(TOPIC_CONFIGS) <= set(topic)
    assert all(topic[name][4] == "per-topic" for name in TOPIC_CONFIGS)


def test_every_validated_setting_says_what_it_accepts() -> None:
    unstated = [
        d.name
        for d in (*BROKER_CONFIGS.values(), *TOPIC_CONFIGS.values())
        if d.validator is not None and not valid_values(d.validator)
    ]
    assert unstated == []


def test_kbroker_own_settings_are_in_the_table_and_say_so() -> None:
    assert set(BROKER_CONFIGS) >= KBROKER_OWN
    for name in KBROKER_OWN:
        d = BROKER_CONFIGS[name]
        assert d.role is SettingRole.SYNONYM or d.documentation.startswith("kbroker"), name


def test_compatibility_page_lists_every_kafka_api_with_what_the_registry_serves() -> None:
    page = (DOCS / "compatibility.md").read_text()
    rows = {}
    for line in page.splitlines():
        match = re.match(r"\| (\d+) \| (\w+|\?) \| ([^|]+) \| ([^|]+) \|", line)
        if match:
            rows[int(match[1])] = (match[2], match[3].strip(), match[4].strip())
    assert set(rows) == {api.key for api in KAFKA_APIS} | set(APIS)
    for api in KAFKA_APIS:
        name, _kafka, ours = rows[api.key]
        assert name == api.name
        served = APIS.get(api.key)
        if served is None:
            assert ours == "-"
        else:
            low, _, high = ours.split(" ")[0].partition("-")
            assert (int(low), int(high or low)) == (served.min_version, served.max_version)


def test_kafka_table_is_whole_and_ordered() -> None:
    keys = [api.key for api in KAFKA_APIS]
    assert keys == list(range(len(keys)))
    assert len(keys) == 93  # Kafka 4.3's ApiMessageType: keys 0 to 92


def test_tested_clients_name_compat_tests_that_exist() -> None:
    for client in compatibility.TESTED_CLIENTS:
        for module in client.tests:
            assert (REPO / "compat_tests" / module).is_file(), module


def test_metric_table_lists_every_family_the_code_defines() -> None:
    page = (DOCS / "operations.md").read_text()
    section = page.split(metrics.BEGIN, 1)[1].split(metrics.END, 1)[0]
    listed = set(re.findall(r"^\| `([a-z_]+)`", section, re.M))
    defined = {family.exposed for family in metrics.metric_families()}
    assert listed == defined
    # and the scan finds the collectors' families, not a subset of them
    assert "kafka_server_replicamanager_underreplicatedpartitions" in defined
    assert "kafka_network_requestmetrics_totaltimems_bucket" in defined


# -- docs/architecture.md: every file and function it names exists ------------------------

_PATH = re.compile(r"`(kbroker/[\w/]+\.py)`")


@functools.cache
def _defined_names(path: Path) -> set[str]:
    """Qualified names (``f``, ``Class``, ``Class.method``, ``CONSTANT``) a module defines."""
    names: set[str] = set()

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(prefix + node.name)
                if isinstance(node, ast.ClassDef):
                    visit(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, ast.Assign | ast.AnnAssign) and not prefix:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(t.id for t in targets if isinstance(t, ast.Name))

    visit(ast.parse(path.read_text()).body, "")
    return names


def test_architecture_names_only_files_and_functions_that_exist() -> None:
    page = (DOCS / "architecture.md").read_text()
    paths = set(_PATH.findall(page))
    assert len(paths) >= 20, "the walk should name the modules it goes through"
    missing = sorted(p for p in paths if not (REPO / p).is_file())
    assert missing == [], f"architecture.md names files that do not exist: {missing}"
    refs = re.findall(r"`(kbroker/[\w/]+\.py)::([\w.]+)`", page)
    assert len(refs) >= 20, "the walk should name the functions it goes through"
    absent = [f"{path}::{name}" for path, name in refs if name not in _defined_names(REPO / path)]
    assert absent == [], f"architecture.md names functions that do not exist: {absent}"


# -- commands and settings the hand-written pages show ------------------------------------


def _blocks(page: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", (DOCS / page).read_text(), re.S)


def test_properties_blocks_are_settings_kbroker_accepts(tmp_path: Path) -> None:
    from kbroker.config import load_broker_config

    blocks = [b for page in ("security.md", "cluster.md") for b in _blocks(page, "properties")]
    assert blocks
    for block in blocks:
        path = tmp_path / "server.properties"
        path.write_text(block)
        load_broker_config(path, [], {})  # raises ConfigError on what kbroker refuses
        for line in block.splitlines():
            name, _, value = line.partition("=")
            assert name.strip() in BROKER_CONFIGS, name


def test_cluster_page_commands_make_three_voters_of_one_quorum(tmp_path: Path) -> None:
    """The three `kbroker serve` lines of docs/cluster.md, after its printf and export,
    load as three nodes of one quorum, each a voter with its own listeners and data."""
    import shlex

    from kbroker.config import load_broker_config

    [block] = [b for b in _blocks("cluster.md", "sh") if "kbroker serve" in b]
    script = block.replace("\\\n", " ")
    lines = [line.split("#")[0].strip() for line in script.splitlines() if line.strip()]
    printf = shlex.split(next(line for line in lines if line.startswith("printf")))
    properties = printf[2 : printf.index(">")]
    (tmp_path / "cluster.properties").write_text("\n".join(properties) + "\n")
    env = {"KBROKER_CLUSTER_SECRET": "0123456789abcdef0123456789abcdef"}
    assert any(line.startswith("export KBROKER_CLUSTER_SECRET=") for line in lines)
    nodes = []
    for line in lines:
        if not line.startswith("kbroker serve"):
            continue
        words = shlex.split(line)
        config_file = tmp_path / words[words.index("--config") + 1]
        overrides = [words[i + 1] for i, w in enumerate(words) if w == "--override"]
        nodes.append(load_broker_config(config_file, overrides, env))
    assert len(nodes) == 3
    assert sorted(node.get("node.id") for node in nodes) == [1, 2, 3]
    voters = {tuple(node.get("controller.quorum.voters")) for node in nodes}
    assert len(voters) == 1 and len(next(iter(voters))) == 3
    for node in nodes:
        mine = f"{node.get('node.id')}@"
        [voter] = [v for v in next(iter(voters)) if v.startswith(mine)]
        assert f"CONTROLLER://{voter.split('@')[1]}" in node.get("listeners")
    assert len({tuple(node.get("log.dirs")) for node in nodes}) == 3
    assert len({tuple(node.get("http.listeners")) for node in nodes}) == 3


# Files other changes are writing (pages, alert rules); linked already.
FILES_BEING_WRITTEN = {
    "alerts.yml",
    "kafka-differences.md",
    "cli.md",
    "deployment.md",
    "dynamic-configuration.md",
    "schema-registry.md",
}


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


@pytest.mark.parametrize(
    "page",
    ["architecture.md", "cluster.md", "compatibility.md", "configuration.md", "operations.md"]
    + ["security.md"],
)
def test_relative_links_lead_to_files_and_headings_that_exist(page: str) -> None:
    text = (DOCS / page).read_text()
    links = re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", text)
    for target, anchor in links:
        if target.startswith(("http://", "https://")):
            continue
        path = (DOCS / (target or page)).resolve()
        if path.name in FILES_BEING_WRITTEN and not path.exists():
            continue
        assert path.exists(), f"{page} links to {target}, which does not exist"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", path.read_text(), re.M)
            assert anchor in {_anchor(h) for h in headings}, f"{page}: no #{anchor} in {target}"


def test_operations_page_commands_are_ones_the_cli_parses() -> None:
    import shlex

    from kbroker.cli import _parser

    [block] = [b for b in _blocks("operations.md", "sh") if "kbroker topics" in b]
    commands = [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]
    assert len(commands) >= 10
    for command in commands:
        words = shlex.split(command)
        assert words[0] == "kbroker", command
        try:
            _parser(admin=words[1] != "serve").parse_args(words[1:])
        except SystemExit:
            pytest.fail(f"kbroker does not take: {command}")


def test_architecture_layers_are_the_import_contract() -> None:
    """The layer list of docs/architecture.md is pyproject's import-linter contract."""
    import tomllib

    contract = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    [contract_layers] = [c["layers"] for c in contract["contracts"] if c["type"] == "layers"]
    expected = [
        sorted(part.strip(" ()").removeprefix("kbroker.") for part in layer.split(":"))
        for layer in contract_layers
    ]
    page = (DOCS / "architecture.md").read_text()
    block = page.split(layers.BEGIN, 1)[1].split(layers.END, 1)[0].strip("\n")
    rows: list[list[str]] = []
    for line in block.splitlines():
        indent = len(line) - len(line.lstrip())
        names = [n.strip() for n in re.split(r"\s{2,}", line.strip())[0].split(",")]
        if indent >= 20:  # the description goes on
            continue
        if indent > 4:  # the row's names go on
            rows[-1] += [n for n in names if n]
        else:
            rows.append([n for n in names if n])
    assert [sorted(row) for row in rows] == expected


def test_a_layer_the_page_says_nothing_of_stops_make_docs(tmp_path: Path) -> None:
    text = (REPO / "pyproject.toml").read_text()
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        text.replace('"kbroker.security",', '"kbroker.security",\n    "kbroker.newlayer",')
    )
    assert ["newlayer"] in layers.contract_layers(pyproject)
    with pytest.raises(ValueError, match="newlayer"):
        layers.render_block(pyproject)
