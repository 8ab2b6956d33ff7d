"""`kbroker dev`'s plan: the ports, directory and node count README.md promises, kept
between runs with the secret readable by its owner only. compat_tests/test_dev_cluster.py
runs the cluster."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest

from kbroker.cli import _parser
from kbroker.devcluster import DevClusterError, load_or_plan, node_count


def test_defaults_are_one_node_per_core_in_data_cluster_from_port_9092() -> None:
    args = _parser().parse_args(["dev"])
    assert (args.nodes, args.dir, args.port) == (None, Path("data-cluster"), 9092)


def test_a_new_cluster_takes_one_node_per_core_on_consecutive_ports(tmp_path: Path) -> None:
    state = load_or_plan(tmp_path / "c", None, 29092)
    count = max(3, min(64, os.cpu_count() or 1))
    assert state["nodes"] == count
    assert state["ports"] == [29092 + i for i in range(count)]
    assert state["controller_ports"] == [30092 + i for i in range(count)]
    assert len(set(state["http_ports"])) == count
    assert len(state["secret"]) >= 32


def test_port_zero_takes_any_free_ports(tmp_path: Path) -> None:
    state = load_or_plan(tmp_path / "c", 2, 0)
    ports = [*state["ports"], *state["controller_ports"], *state["http_ports"]]
    assert len(ports) == len(set(ports)) == 6 and 0 not in ports


def test_the_plan_is_kept_for_the_next_run_and_readable_by_its_owner_only(tmp_path: Path) -> None:
    first = load_or_plan(tmp_path / "c", 3, 0)
    path = tmp_path / "c" / "cluster.json"
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert load_or_plan(tmp_path / "c", None, 9092) == first == json.loads(path.read_text())
    assert load_or_plan(tmp_path / "c", 3, 0) == first
    with pytest.raises(DevClusterError, match="holds a 3-node cluster; use --nodes 3"):
        load_or_plan(tmp_path / "c", 4, 0)


def test_nodes_cores_is_one_per_core_and_at_least_three() -> None:
    assert node_count("cores") == max(3, min(64, os.cpu_count() or 1))
    assert node_count("5") == 5
    for bad in ("0", "65", "many"):
        with pytest.raises(argparse.ArgumentTypeError):
            node_count(bad)


def test_a_port_of_the_kept_plan_in_use_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    from kbroker.devcluster import run

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = holder.getsockname()[1]
        state = load_or_plan(tmp_path / "c", 1, 0)
        state["http_ports"] = [busy]
        (tmp_path / "c" / "cluster.json").write_text(json.dumps(state))
        args = _parser().parse_args(["dev", "--dir", str(tmp_path / "c")])
        assert run(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"port {busy} is in use" in err
