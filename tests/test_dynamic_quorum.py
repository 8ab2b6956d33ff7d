"""The pieces of a dynamic controller quorum (KIP-853): kbroker format, the voters in the
metadata state, membership entries, and the leader's view keyed by directory id."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from kbroker.controller.commands import INIT_CLUSTER, VOTER_CHANGE, apply_command
from kbroker.controller.quorum import ReplicaTracker
from kbroker.controller.raft import VoterNode, _apply_voter_change, read_voters_file
from kbroker.controller.state import MetadataState, state_from_plain, state_to_plain
from kbroker.format import parse_initial_controllers, run
from kbroker.storage.meta_properties import new_directory_id, read_meta_properties


def test_initial_controllers_are_read_as_kafka_writes_them():
    voters = parse_initial_controllers("1@h1:9093:AAAAAAAAAAAAAAAAAAAAAQ,2@[::1]:9094:Bb-c_d")
    assert voters == {1: ("AAAAAAAAAAAAAAAAAAAAAQ", "h1:9093"), 2: ("Bb-c_d", "[::1]:9094")}


@pytest.mark.parametrize(
    "text", ["1@h1:9093", "x@h1:9093:d", "h1:9093:d", "1@h1:9093:d,1@h2:9093:e", "1@h1:port:d"]
)
def test_malformed_initial_controllers_are_refused(text):
    with pytest.raises(ValueError):
        parse_initial_controllers(text)


def test_directory_ids_never_start_with_a_dash():
    assert not any(new_directory_id().startswith("-") for _ in range(3000))


def _format(tmp_path: Path, node_id: int, *how: str) -> tuple[int, argparse.Namespace]:
    data = tmp_path / f"n{node_id}"
    args = argparse.Namespace(
        config=None,
        override=[
            f"node.id={node_id}",
            "process.roles=controller",
            f"listeners=CONTROLLER://127.0.0.1:{19090 + node_id}",
            "controller.listener.names=CONTROLLER",
            "controller.quorum.bootstrap.servers=127.0.0.1:19091",
            "cluster.secret=s3cret",
            f"log.dirs={data}",
        ],
        cluster_id="q8VxsVxBQqe3XxZcUWuFzg",
        ignore_formatted=False,
        standalone="--standalone" in how,
        initial_controllers=how[1] if how[:1] == ("--initial-controllers",) else None,
        no_initial_controllers="--no-initial-controllers" in how,
    )
    return run(args), args


def test_format_standalone_writes_the_directory_id_and_the_only_voter(tmp_path):
    code, _ = _format(tmp_path, 1, "--standalone")
    assert code == 0
    meta = read_meta_properties(tmp_path / "n1")
    assert meta is not None and (meta.cluster_id, meta.node_id) == ("q8VxsVxBQqe3XxZcUWuFzg", 1)
    voters = read_voters_file(str(tmp_path / "n1" / "__controller" / "quorum-voters.json"))
    assert voters == {1: (meta.directory_id, "127.0.0.1:19091")}


def test_format_without_initial_controllers_leaves_an_observer(tmp_path):
    assert _format(tmp_path, 2, "--no-initial-controllers")[0] == 0
    assert read_meta_properties(tmp_path / "n2") is not None
    assert not (tmp_path / "n2" / "__controller" / "quorum-voters.json").exists()


def test_format_initial_controllers_takes_this_nodes_directory_id(tmp_path):
    spec = "1@127.0.0.1:19091:AAAAAAAAAAAAAAAAAAAAAQ,2@127.0.0.1:19092:AAAAAAAAAAAAAAAAAAAAAg"
    assert _format(tmp_path, 2, "--initial-controllers", spec)[0] == 0
    meta = read_meta_properties(tmp_path / "n2")
    assert meta is not None and meta.directory_id == "AAAAAAAAAAAAAAAAAAAAAg"
    written = json.loads((tmp_path / "n2" / "__controller" / "quorum-voters.json").read_text())
    assert [v[0] for v in written["voters"]] == [1, 2]


def test_format_refuses_a_formatted_directory_and_a_spec_without_this_node(tmp_path, capsys):
    assert _format(tmp_path, 1, "--standalone")[0] == 0
    assert _format(tmp_path, 1, "--standalone")[0] == 1
    assert "already formatted" in capsys.readouterr().err
    assert _format(tmp_path, 3, "--initial-controllers", "1@h:1:AAAAAAAAAAAAAAAAAAAAAQ")[0] == 1
    assert "does not name node.id 3" in capsys.readouterr().err
    assert read_meta_properties(tmp_path / "n3") is None  # nothing written in part


def test_the_voters_are_created_with_the_cluster_and_changed_one_at_a_time():
    state = apply_command(
        MetadataState(),
        INIT_CLUSTER,
        {"cluster_id": "c", "features": {"kraft.version": 1}, "voters": [[1, "d1", "h:1"]]},
    ).state
    assert state.voters == {1: ("d1", "h:1")} and state.features["kraft.version"] == 1
    add = {"op": "add", "node_id": 2, "directory_id": "d2", "address": "h:2"}
    state = apply_command(state, VOTER_CHANGE, add).state
    assert state.voters == {1: ("d1", "h:1"), 2: ("d2", "h:2")}
    assert state_from_plain(state_to_plain(state)).voters == state.voters
    state = apply_command(state, VOTER_CHANGE, {**add, "op": "rem"}).state
    assert state.voters == {1: ("d1", "h:1")}


def test_a_membership_entry_changes_the_voter_it_names_only():
    voters = {1: ("d1", "h:1"), 2: ("d2", "h:2")}
    _apply_voter_change(voters, ["rem", "h:2", VoterNode("h:2", 2, "other")], False)
    assert 2 in voters  # another directory id: another replica
    _apply_voter_change(voters, ["rem", "h:2", VoterNode("h:2", 2, "d2")], False)
    assert voters == {1: ("d1", "h:1")}
    _apply_voter_change(voters, ["add", "h:3", VoterNode("h:3", 3, "d3")], False)
    _apply_voter_change(voters, ["add", "h:3", VoterNode("h:3", 3, "d3")], True)  # rolled back
    assert voters == {1: ("d1", "h:1")}


def test_a_replica_whose_directory_changed_is_an_observer_beside_the_voter_of_its_id():
    tracker = ReplicaTracker(1, {})
    tracker.set_voters({1: ("d1", "h:1"), 3: ("old", "h:3")})
    tracker.on_response(5, 3, 10, 10, 1_000, directory_id="new")
    view = tracker.describe(5, high_watermark=10, leader_end=10, now_ms=1_000)
    voter3 = next(v for v in view.voters if v.replica_id == 3)
    assert (voter3.directory_id, voter3.log_end_offset) == ("old", -1)
    (observer,) = view.observers
    assert (observer.replica_id, observer.directory_id, observer.log_end_offset) == (3, "new", 10)
