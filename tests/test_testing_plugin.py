"""kbroker.testing's pytest plugin loads in every pytest run where kbroker is installed,
kbroker's own included: it must import next to nothing and name no fixture the project's
conftest files define. The nodes it starts are planned here; compat_tests/test_packaging.py
and test_dev_cluster.py start them."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from kbroker.testing.nodes import cluster_nodes, single_node

ROOT = Path(__file__).resolve().parent.parent


def test_loading_the_plugin_imports_no_broker_module() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, kbroker.testing.plugin; "
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('kbroker'))))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        "kbroker",
        "kbroker.testing",
        "kbroker.testing.nodes",
        "kbroker.testing.plugin",
    ]


def fixtures_defined(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef) and any(
            "fixture" in ast.unparse(d) for d in node.decorator_list
        ):
            names.add(node.name)
    return names


def test_the_plugin_fixtures_clash_with_none_of_the_projects() -> None:
    plugin = fixtures_defined(ROOT / "kbroker/testing/plugin.py")
    assert plugin == {"kafka_broker", "kafka_cluster"}
    for conftest in [ROOT / "conftest.py", *ROOT.glob("*/conftest.py")]:
        assert not plugin & fixtures_defined(conftest), conftest


def test_the_entry_point_names_the_plugin_module() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["pytest11"] == {"kbroker": "kbroker.testing.plugin"}


def test_a_single_node_is_its_own_controller_on_loopback(tmp_path: Path) -> None:
    node = single_node(tmp_path, 19092, None, **{"num.partitions": "4"})
    assert node.settings["listeners"] == "PLAINTEXT://127.0.0.1:19092"
    assert node.settings["log.dirs"] == str(tmp_path / "data")
    assert node.settings["http.listeners"] == ""
    assert node.settings["num.partitions"] == "4"
    assert node.address == "127.0.0.1:19092"


def test_cluster_nodes_are_voters_and_brokers_with_one_secret(tmp_path: Path) -> None:
    nodes = cluster_nodes(tmp_path, [1, 2, 3], [11, 12, 13], [21, 22, 23], "s3cret")
    voters = "1@127.0.0.1:11,2@127.0.0.1:12,3@127.0.0.1:13"
    for i, node in enumerate(nodes, start=1):
        assert node.node_id == i
        assert node.settings["node.id"] == str(i)
        assert node.settings["controller.quorum.voters"] == voters
        assert node.settings["cluster.secret"] == "s3cret"
        assert node.settings["process.roles"] == "broker,controller"
        assert node.settings["http.listeners"] == f"http://127.0.0.1:{20 + i}"
        assert node.settings["log.dirs"] == str(tmp_path / f"node-{i}" / "data")
        assert node.settings["offsets.topic.replication.factor"] == "3"
        assert node.settings["default.replication.factor"] == "3"


def test_a_cluster_smaller_than_three_replicates_internal_topics_to_every_node(
    tmp_path: Path,
) -> None:
    (node,) = cluster_nodes(tmp_path, [1], [2], None, "s")
    assert node.settings["offsets.topic.replication.factor"] == "1"
    assert node.settings["transaction.state.log.min.isr"] == "1"
    two = cluster_nodes(tmp_path, [1, 2], [3, 4], None, "s", {"num.partitions": "2"})
    assert [n.settings["share.coordinator.state.topic.replication.factor"] for n in two] == [
        "2",
        "2",
    ]
    assert all(n.settings["num.partitions"] == "2" for n in two)


def test_a_free_port_is_handed_out_once_per_process(monkeypatch) -> None:
    """A registry's port asked for first, a node's listeners after: the second ask must
    not hand back the first port, though it was released and is still free."""
    from kbroker.testing import nodes

    monkeypatch.setattr(nodes, "_handed_out", set())
    first = nodes.free_ports(1)[0]
    real_choice = nodes.random.choice
    repeats = iter([first, first])  # the kernel's answer twice over, then anything
    monkeypatch.setattr(nodes.random, "choice", lambda ports: next(repeats, real_choice(ports)))
    second = nodes.free_ports(1)[0]
    assert second != first
    assert nodes._handed_out == {first, second}


def test_parallel_test_workers_draw_ports_from_disjoint_shares(monkeypatch) -> None:
    """Under pytest-xdist each worker remembers only its own ports: worker i of n takes
    those congruent to i modulo n, so two workers never hand out the same one."""
    from kbroker.testing import nodes

    drawn = {}
    for worker in ("gw0", "gw1"):
        monkeypatch.setattr(nodes, "_handed_out", set())
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
        drawn[worker] = nodes.free_ports(40)
    assert {port % 2 for port in drawn["gw0"]} == {0}
    assert {port % 2 for port in drawn["gw1"]} == {1}
