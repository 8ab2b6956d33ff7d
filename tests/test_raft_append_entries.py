"""A metadata voter receiving AppendEntries from the leader keeps the entries it holds:
Raft cuts a follower's log only where an entry conflicts with the leader's."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from pysyncobj import SyncObjConf
from pysyncobj.node import Node

from kbroker.controller.machine import MetadataMachine
from kbroker.controller.raft import LocalTransport, _RaftNode

NO_OP = b"\x01"  # pysyncobj's no-op command: applied without touching the state
LEADER = Node("leader")


@pytest.fixture
def follower(tmp_path: Path) -> Iterator[_RaftNode]:
    conf = SyncObjConf(
        autoTick=False,
        appendEntriesUseBatch=False,
        raftMinTimeout=60.0,  # never an election of its own while the test runs
        raftMaxTimeout=61.0,
        connectionTimeout=61.0,
        journalFile=str(tmp_path / "journal"),
        fullDumpFile=str(tmp_path / "snapshot"),
    )
    node = _RaftNode(
        MetadataMachine(), None, Node("local-1"), [], conf, transportClass=LocalTransport
    )
    try:
        yield node
    finally:
        node._doDestroy()


def append_entries(node: _RaftNode, prev: int, prev_term: int, entries: list, term: int) -> None:
    message = {
        "type": "append_entries",
        "term": term,
        "commit_index": 6,
        "entries": entries,
        "prevLogIdx": prev,
        "prevLogTerm": prev_term,
    }
    node._SyncObj__onMessageReceived(LEADER, message)
    node.doTick(0.0)  # applies what is committed


def last_index(node: _RaftNode) -> int:
    return int(node._SyncObj__getCurrentLogIndex())


def test_a_repeated_append_entries_does_not_cut_applied_entries(
    follower: _RaftNode, caplog: pytest.LogCaptureFixture
) -> None:
    append_entries(follower, 1, 0, [(NO_OP, i, 2) for i in range(2, 7)], term=2)
    assert last_index(follower) == 6
    assert follower.getStatus()["last_applied"] == 6
    with caplog.at_level(logging.WARNING):
        # The leader resends from index 2 (its next index for this node was reset).
        append_entries(follower, 1, 0, [(NO_OP, 2, 2), (NO_OP, 3, 2)], term=2)
    assert last_index(follower) == 6
    assert not [r for r in caplog.records if "already-applied" in r.getMessage()]


def test_a_resent_prefix_appends_only_the_new_entries(follower: _RaftNode) -> None:
    append_entries(follower, 1, 0, [(NO_OP, i, 2) for i in range(2, 5)], term=2)
    append_entries(follower, 1, 0, [(NO_OP, i, 2) for i in range(2, 8)], term=2)
    assert last_index(follower) == 7


def test_a_tail_of_an_older_term_that_conflicts_is_cut(follower: _RaftNode) -> None:
    append_entries(follower, 1, 0, [(NO_OP, 2, 2), (NO_OP, 3, 2)], term=2)
    # A new leader (term 3) without entry 3: the follower's entry 3 of term 2 goes.
    follower._SyncObj__onMessageReceived(
        LEADER,
        {
            "type": "append_entries",
            "term": 3,
            "commit_index": 2,
            "entries": [(NO_OP, 3, 3)],
            "prevLogIdx": 2,
            "prevLogTerm": 2,
        },
    )
    entries = follower._SyncObj__getEntries(3)
    assert [(e[1], e[2]) for e in entries] == [(3, 3)]
