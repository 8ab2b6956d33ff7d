"""pysyncobj plumbing: the Raft node, its transport, and the thread that drives it.

We tick pysyncobj ourselves (autoTick=False) on one dedicated thread instead of using its
auto-tick thread, for two reasons measured on this machine:
- a single voter commits an entry one tick after appending it; the auto-tick thread waits
  a full `autoTickPeriod` (50 ms) in poll() in between, we tick again at once while a
  proposal is in flight, which brings a commit from ~50 ms to well under a millisecond;
- the auto-tick thread sleeps 100 ms before its first tick and elects a single voter only
  after `raftMinTimeout`; with no partners we use millisecond timeouts, so a node is leader
  a few milliseconds after start.
`appendEntriesUseBatch=False` gives pysyncobj's pipe notifier, so a proposal from the
asyncio thread wakes the tick thread's poll() at once, and followers get entries without
waiting for the next heartbeat.

A voter with no partners and no configured address needs no socket at all; it gets a
transport that never sends (`LocalTransport`). A broker-only node is an observer:
pysyncobj's read-only node, which follows the log without a vote and without a server
socket. Any socket is authenticated and encrypted with the cluster secret (pysyncobj's
`password`): unauthenticated pysyncobj peers would have their messages unpickled. pysyncobj elects a lone voter by itself
once its election timeout passes (a vote from itself is a majority of one).
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import os
import pickle
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pysyncobj import SyncObj, SyncObjConf, journal, replicated
from pysyncobj.config import FAIL_REASON
from pysyncobj.monotonic import monotonic as monotonic_time
from pysyncobj.node import Node, TCPNode
from pysyncobj.pipe_notifier import PipeNotifier
from pysyncobj.syncobj import _COMMAND_TYPE
from pysyncobj.tcp_connection import CONNECTION_STATE, TcpConnection
from pysyncobj.transport import TCPTransport, Transport

from kbroker.controller import pysyncobj_base
from kbroker.controller.commands import CONTROLLER_ELECTED, VOTER_CHANGE
from kbroker.controller.machine import MetadataMachine
from kbroker.controller.quorum import QuorumDescription, ReplicaTracker
from kbroker.controller.raft_handshake import HandshakeConnection, RefusalLog
from kbroker.controller.raft_listener import ListeningServer

# Refuse, at import and in one line, a pysyncobj whose private members differ from the
# ones the overrides below were written against (pysyncobj_base.py says why).
pysyncobj_base.check()

log = logging.getLogger("kbroker.controller")

_FOLLOWER, _LEADER = 0, 2  # pysyncobj's _RAFT_STATE.FOLLOWER and LEADER
PRE_VOTE, PRE_VOTE_RESPONSE = "pre_vote", "pre_vote_response"
TERM_AHEAD = "term_ahead"  # a voter's answer to an append of an earlier term: its own

FAIL_REASON_NAMES = {
    value: name for name, value in vars(FAIL_REASON).items() if not name.startswith("_")
}

ResultCallback = Callable[[Any, int], None]
PeerLost = Callable[[str], None]
# Told the leader's view of the quorum, or None when no leader could give it.
DescribeCallback = Callable[[QuorumDescription | None], None]

# A tick failing this many times in a row (10 ms apart) stops the node: a transient
# failure has passed long before, and a permanent one must not spin forever.
TICK_FAILURES_TO_STOP = 100

# kbroker's own Raft messages, beside pysyncobj's: a follower asks the leader for its view
# of the quorum (DescribeQuorum is answered by the leader, as in KRaft) and gets it back.
_DESCRIBE_QUORUM = "kbroker_describe_quorum"
# A node asks the leader to hand its leadership over (a dynamic quorum's RemoveRaftVoter
# of the active controller: pysyncobj's leader cannot remove itself).
_RESIGN = "kbroker_resign"
_QUORUM_DESCRIBED = "kbroker_quorum_described"
# A question the leader has not answered in this long is forgotten (its asker gave up).
_DESCRIBE_FORGET_S = 60.0


class _AllocatingJournalFile(journal.ResizableFile):
    """pysyncobj's memory-mapped journal file, growing by allocating its disk blocks
    first. pysyncobj extends the file sparsely and writes through the mapping, so a full
    disk would kill the process with SIGBUS at the first write into the new pages; with
    the blocks allocated up front the growth fails with ENOSPC as an OSError instead,
    which stops the Raft node and halts the process with one log line."""

    def write(self, offset: int, values: bytes) -> None:
        mapped = self._ResizableFile__mm
        end = offset + len(values)
        if end > len(mapped):
            # pysyncobj's growth, with the blocks allocated before the mapping grows.
            size = max(int(len(mapped) * self._ResizableFile__resizeFactor), end)
            os.posix_fallocate(self._ResizableFile__f.fileno(), 0, size)
            mapped.resize(size)
        super().write(offset, values)


# FileJournal builds its file through this module-level name.
journal.ResizableFile = _AllocatingJournalFile


class VoterNode(TCPNode):
    """A voter of a dynamic quorum (KIP-853): its Raft address (pysyncobj's node id), its
    Kafka node id and the directory id of its metadata directory. pysyncobj pickles the
    node into its membership entry, so the log says which replica each change is about."""

    def __init__(self, address: str, node_id: int = -1, directory_id: str = "") -> None:
        super().__init__(address, node_id=node_id, directory_id=directory_id)


def replica_key(node_id: int, directory_id: str) -> str:
    """A voter as Kafka's messages name it."""
    return f"ReplicaKey(id={node_id}, directoryId=Optional[{directory_id}])"


def read_voters_file(path: str) -> dict[int, tuple[str, str]]:
    """The voters a node last knew (its own `quorum-voters.json`); empty when it has none."""
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        return {}
    return {int(i): (str(d), str(a)) for i, d, a in data["voters"]}


def write_voters_file(path: str, voters: Mapping[int, tuple[str, str]]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump({"voters": [[i, d, a] for i, (d, a) in sorted(voters.items())]}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


_MEMBERSHIP = bytes([_COMMAND_TYPE.MEMBERSHIP])  # pysyncobj's membership entries


def _apply_voter_change(voters: dict[int, tuple[str, str]], request: Any, reverse: bool) -> None:
    """One pysyncobj membership change (["add" or "rem", id, VoterNode]) on `voters`."""
    if len(request) < 3 or not isinstance(request[2], VoterNode):
        return
    voter: VoterNode = request[2]
    key = (voter.directory_id, voter.address)
    if (request[0] == "add") != reverse:
        voters[voter.node_id] = key
    elif voters.get(voter.node_id) == key:
        del voters[voter.node_id]


def _voting(raft: Any) -> bool:
    return not isinstance(raft, _RaftNode) or raft.voting


class LocalTransport(Transport):
    """Transport of a voter without partners: nothing to bind, nobody to send to."""

    def send(self, node: Node, message: Any) -> bool:
        return False


class ReplicaIdTransport(TCPTransport):
    """pysyncobj's TCP transport that names this node in each AppendEntries answer
    (`next_node_idx`), as a Kafka replica names itself in every Fetch: the leader then
    knows which broker a read-only node (an observer, known to pysyncobj only by a
    connection counter) is, and keys every replica's progress by node id. A lost
    connection ends the DescribeQuorum questions waiting on that node at once. A
    connection that has not authenticated yet is bounded (raft_handshake.py), and the
    listener survives a transient accept() failure (raft_listener.py)."""

    def __init__(self, syncObj: SyncObj, selfNode: Node | None, otherNodes: Any) -> None:  # noqa: N803
        self._refusals = RefusalLog()
        # A voter of a dynamic quorum dials only the partners whose address sorts below
        # its own (pysyncobj's rule) and waits for the others to dial it; the others never
        # do if they removed it while it was down. Without a leader for the connection
        # timeout, it dials them all until one leads it (they take it as an observer, the
        # leader sends it the log), reads its removal, and stops claiming a vote.
        self._alone_since: float | None = None
        self._dial_all = False
        super().__init__(syncObj, selfNode, otherNodes)

    def _createServer(self) -> None:  # noqa: N802
        super()._createServer()
        ListeningServer.adopt(self._server, self._refusals)

    def _onNewIncomingConnection(self, conn: TcpConnection) -> None:  # noqa: N802
        super()._onNewIncomingConnection(HandshakeConnection.adopt(conn, self._refusals))

    def _onIncomingMessageReceived(self, conn: TcpConnection, message: Any) -> None:  # noqa: N802
        if (
            self._selfNode is not None
            and not _voting(self._syncObj)
            and conn in self._unknownConnections
            and isinstance(message, str)
            and message in self._nodeAddrToNode
            and (self._syncObj.encryptor is None or conn.sendRandKey)
        ):
            # A node of a dynamic quorum that is not a voter (not yet added, or its
            # directory was replaced) takes no voter's connection: the leader must not
            # count it toward a commit nor a candidate ask it for a vote.
            conn.disconnect()
            self._unknownConnections.discard(conn)
            return
        raft = self._syncObj
        if (
            isinstance(raft, _RaftNode)
            and raft.dynamic
            and conn in self._unknownConnections
            and isinstance(message, str)
            and message != "readonly"
            and message not in self._nodeAddrToNode
            and (raft.encryptor is None or conn.sendRandKey)
        ):
            # A controller that is no voter here (removed while it was down or cut off,
            # so it never read its removal): follow it as an observer, so it reads the
            # log, learns it, and stops claiming a vote.
            message = "readonly"
        super()._onIncomingMessageReceived(conn, message)
        if isinstance(conn, HandshakeConnection) and conn not in self._unknownConnections:
            conn.in_handshake = False  # identified as a voter or an observer (or dropped)

    def _onTick(self) -> None:  # noqa: N802
        super()._onTick()
        timeout = self._syncObj.conf.connectionTimeout
        for conn in list(self._unknownConnections):
            if isinstance(conn, HandshakeConnection) and conn.overdue(timeout):
                conn.refuse(f"it did not authenticate within {timeout:g} s")
        self._dial_all_when_alone(timeout)

    def _dial_all_when_alone(self, timeout: float) -> None:
        raft = self._syncObj
        if not isinstance(raft, _RaftNode) or not raft.dynamic or not raft.voting:
            self._alone_since = None
            return
        if raft._getLeader() is not None:
            # A leader is known (this node, or one whose log reaches it): pysyncobj's
            # rule again from here on. A connection alone is not enough: a removed voter
            # that reached only a follower would hear nothing, and never dial the leader.
            self._alone_since = None
            self._dial_all = False
            return
        now = monotonic_time()
        if self._alone_since is None:
            self._alone_since = now
        elif not self._dial_all and now - self._alone_since >= timeout and self._nodes:
            log.info(
                "controller %d has heard from no leader in %.0f s: dialling every voter",
                raft.node_id,
                now - self._alone_since,
            )
            self._dial_all = True
            self.redial()

    def _onNodeDisconnected(self, node: Node) -> None:
        super()._onNodeDisconnected(node)
        raft = self._syncObj
        if isinstance(raft, _RaftNode):
            raft.forget_questions_to(node)

    def _shouldConnect(self, node: Node) -> bool:  # noqa: N802
        if self._selfNode is not None and (self._dial_all or not _voting(self._syncObj)):
            # Not a voter (or a voter that has known no leader for a while): dial every
            # voter, as a read-only node does.
            return isinstance(node, TCPNode) and node not in self._preventConnectNodes
        return bool(super()._shouldConnect(node))

    def _sendSelfAddress(self, conn: TcpConnection) -> None:  # noqa: N802
        if self._selfNode is not None and not _voting(self._syncObj):
            conn.send("readonly")  # followed as an observer, never counted as a voter
            return
        super()._sendSelfAddress(conn)

    def dropNode(self, node: Node) -> None:  # noqa: N802
        """A voter left a dynamic quorum: its connection, if up, is kept as an observer's,
        so the leader goes on sending it the log and it reads its own removal (else a
        removed voter that waits to be dialled would never learn it)."""
        raft = self._syncObj
        conn = self._connections.get(node)
        if (
            not isinstance(raft, _RaftNode)
            or not raft.dynamic
            or not isinstance(node, TCPNode)
            or conn is None
            or conn.state != CONNECTION_STATE.CONNECTED
        ):
            super().dropNode(node)
            return
        del self._connections[node]
        self._nodes.discard(node)
        self._nodeAddrToNode.pop(node.address, None)
        self._lastConnectAttempt.pop(node, None)
        observer = Node(str(self._readonlyNodesCounter))
        self._readonlyNodesCounter += 1
        self._readonlyNodes.add(observer)
        self._connections[observer] = conn
        conn.setOnMessageReceivedCallback(functools.partial(self._onMessageReceived, observer))
        self._onReadonlyNodeConnected(observer)

    def redial(self) -> None:
        """Drop every connection and set them up again: this node's identity changed
        (it became a voter, or stopped being one)."""
        for node in list(self._nodes):
            super().dropNode(node)
            self.addNode(node)

    def send(self, node: Node, message: Any) -> bool:
        raft = self._syncObj
        if (
            isinstance(raft, _RaftNode)
            and isinstance(message, dict)
            and message.get("type") == "next_node_idx"
        ):
            message = {**message, "replica_id": raft.node_id}
            if raft.directory_id:
                message["directory_id"] = raft.directory_id
        return bool(super().send(node, message))


class PeerWatchingTransport(ReplicaIdTransport):
    """pysyncobj's TCP transport that also reports each lost connection to a voter (by
    its "host:port"), on the Raft thread. A killed voter's kernel closes its connections
    at once, so the active controller can check that broker's listener (liveness.py)
    without waiting for a missed heartbeat. A loss is only a hint: it also follows a
    network partition or a connection pysyncobj dropped itself."""

    def _onNodeDisconnected(self, node: Node) -> None:
        super()._onNodeDisconnected(node)
        raft = self._syncObj
        lost = raft.peer_lost if isinstance(raft, _RaftNode) else None
        if lost is not None and isinstance(node, TCPNode):
            lost(node.address)


@dataclass(frozen=True)
class RaftTimings:
    """Raft timers in seconds. A lone voter elects itself after `election_min`."""

    heartbeat: float
    election_min: float
    election_max: float
    idle_tick: float

    @classmethod
    def single_voter(cls) -> RaftTimings:
        return cls(heartbeat=0.002, election_min=0.007, election_max=0.01, idle_tick=0.1)

    @classmethod
    def cluster(cls, election_min: float = 0.5, election_max: float = 1.0) -> RaftTimings:
        heartbeat = election_min / 5
        return cls(heartbeat, election_min, election_max, idle_tick=min(0.05, heartbeat / 2))


class _RaftNode(SyncObj):
    """The pysyncobj object. One replicated method, so the method id pysyncobj writes
    into every journal entry never changes when command kinds are added."""

    _SyncObj__raftElectionDeadline: float  # pysyncobj's; the pre-vote round moves it

    def __init__(
        self,
        machine: MetadataMachine,
        peer_lost: PeerLost | None,
        *args: Any,
        node_id: int = 0,
        voters: Mapping[int, str] | None = None,
        dynamic: bool = False,
        directory_id: str = "",
        voting: bool = True,
        voter_set: Mapping[int, tuple[str, str]] | None = None,
        voters_path: str | None = None,
        **kwargs: Any,
    ) -> None:
        self.machine = machine
        self.peer_lost = peer_lost  # read by PeerWatchingTransport
        self.node_id = node_id  # read by ReplicaIdTransport
        # A dynamic quorum (KIP-853): voters are added and removed through the log, and a
        # node votes only while the voters name it with its own directory id.
        self.dynamic = dynamic
        self.directory_id = directory_id
        self.voting = voting
        # node id -> (directory id, Raft address) of every voter, as this node last
        # learnt them (a change counts from the moment it is in the log, as in KRaft);
        # kept in `voters_path` so a restart knows whether this node votes.
        self.voter_set: dict[int, tuple[str, str]] = dict(voter_set or {})
        self._voters_path = voters_path
        self._redial = False
        self._voters_marker: tuple[int, int] | None = None
        # On the leader: each replica's progress in this term (DescribeQuorum).
        self.replicas = ReplicaTracker(node_id, voters or {})
        # DescribeQuorum questions sent to the leader: request id -> (when, to, callback).
        self._describing: dict[int, tuple[float, Node, DescribeCallback]] = {}
        self._describe_ids = itertools.count(1)
        # Pre-vote: when this node last heard from a leader, the term of its current
        # pre-vote round and who granted it, and the term a round was won at.
        self._leader_contact = float("-inf")
        self._pre_vote_term = -1
        self._pre_votes: set[str] = set()
        self._pre_vote_won_term = -1
        self.pre_votes_refused = 0  # answers refusing one of this node's rounds, ever
        super().__init__(*args, **kwargs)
        if dynamic:
            self.replicas.set_voters(self.voter_set)

    @replicated
    def apply_command(self, kind: str, payload: dict[str, Any]) -> Any:
        return self.machine.apply(kind, payload)

    # pysyncobj registers its handler as self.__onMessageReceived, which this name overrides.
    def _SyncObj__onMessageReceived(self, node: Node, message: Any) -> None:  # noqa: N802
        kind = message.get("type") if isinstance(message, dict) else None
        if kind == _DESCRIBE_QUORUM:
            self._answer_describe(node, message)
            return
        if kind == _RESIGN:
            if self._isLeader() and message.get("leader") == self._SyncObj__selfNode.id:
                self.transferLeadership(callback=_log_transfer)
            return
        if kind == _QUORUM_DESCRIBED:
            self._on_described(message)
            return
        if not self.voting and kind in (PRE_VOTE, "request_vote", "timeout_now"):
            return  # not a voter: grants nothing and never stands
        if kind == PRE_VOTE:
            self._answer_pre_vote(node, message)
            return
        if kind == PRE_VOTE_RESPONSE:
            self._count_pre_vote(node, message)
            return
        if kind == TERM_AHEAD:
            self._step_down_for(node, message)
            return
        if kind == "append_entries":
            if message.get("term", -1) >= self._SyncObj__raftCurrentTerm:
                self._leader_contact = monotonic_time()
                # A round won before this leader was heard from has served its moment.
                self._pre_vote_won_term = -1
            elif self.voting and self._SyncObj__raftState != _LEADER:
                self._tell_term(node)
            message = self._without_held_entries(message)
        SyncObj._SyncObj__onMessageReceived(self, node, message)
        if kind == "next_node_idx" and self._isLeader():
            self._note_replica_answer(node, message)

    # --- DescribeQuorum: the leader's view, wherever it is asked ---

    def describe_quorum(self) -> QuorumDescription | None:
        """This node's view of the quorum if it is the leader; None otherwise."""
        if not self._isLeader():
            return None
        return self.replicas.describe(
            epoch=self.raftCurrentTerm,
            high_watermark=int(self._SyncObj__raftCommitIndex),
            leader_end=int(self._SyncObj__getCurrentLogIndex()),
            now_ms=int(time.time() * 1000),
        )

    def ask_leader(self, callback: DescribeCallback) -> None:
        """Answer from this node if it leads; otherwise ask the leader it knows, and tell
        `callback` what comes back. None at once when no leader is known or reachable."""
        own = self.describe_quorum()
        if own is not None:
            callback(own)
            return
        leader = self._getLeader()
        if leader is None or leader == self._SyncObj__selfNode:
            callback(None)
            return
        now = time.monotonic()
        for request_id, (asked, _, _) in list(self._describing.items()):
            if now - asked > _DESCRIBE_FORGET_S:
                del self._describing[request_id]
        request_id = next(self._describe_ids)
        self._describing[request_id] = (now, leader, callback)
        sent = self._SyncObj__transport.send(
            leader, {"type": _DESCRIBE_QUORUM, "request_id": request_id}
        )
        if not sent:
            self._describing.pop(request_id, None)
            callback(None)

    def forget_questions_to(self, node: Node) -> None:
        """`node` is gone: whatever was asked of it will not be answered."""
        for request_id, (_, asked_of, callback) in list(self._describing.items()):
            if asked_of == node:
                del self._describing[request_id]
                callback(None)

    def _answer_describe(self, node: Node, message: dict[str, Any]) -> None:
        described = self.describe_quorum()
        self._SyncObj__transport.send(
            node,
            {
                "type": _QUORUM_DESCRIBED,
                "request_id": message.get("request_id"),
                "quorum": None if described is None else described.to_wire(),
            },
        )

    def _on_described(self, message: dict[str, Any]) -> None:
        asked = self._describing.pop(message.get("request_id"), None)  # type: ignore[arg-type]
        if asked is None:
            return  # answered after its asker gave up
        wire = message.get("quorum")
        try:
            described = None if wire is None else QuorumDescription.from_wire(wire)
        except (KeyError, TypeError, ValueError) as exc:
            log.warning("malformed quorum description from the raft leader: %r", exc)
            described = None
        asked[2](described)

    def _note_replica_answer(self, node: Node, message: dict[str, Any]) -> None:
        """A replica answered an AppendEntries: count it as a Kafka replica's Fetch."""
        replica_id = message.get("replica_id")
        if not isinstance(replica_id, int):
            return  # a peer that does not name itself
        success = bool(message.get("success"))
        match = self._SyncObj__raftMatchIndex.get(node) if success else None
        directory = message.get("directory_id")
        self.replicas.on_response(
            epoch=self.raftCurrentTerm,
            replica_id=replica_id,
            match_index=match,
            leader_end=int(self._SyncObj__getCurrentLogIndex()),
            now_ms=int(time.time() * 1000),
            directory_id=directory if isinstance(directory, str) else "",
        )

    # --- a dynamic quorum (KIP-853) ----------------------------------------------------------
    # pysyncobj changes its voters one at a time through a membership entry, in force on
    # every replica from the moment the entry is in its log (rolled back if the entry is
    # cut). kbroker's entries carry a VoterNode, so each replica knows the voter's node id
    # and directory id; when the entry is committed the metadata state learns the change
    # too (VOTER_CHANGE), for DescribeQuorum and the checks of the next change.

    def _SyncObj__doChangeCluster(self, request: Any, reverse: bool = False) -> bool:  # noqa: N802
        changed = bool(SyncObj._SyncObj__doChangeCluster(self, request, reverse))
        if self.dynamic:
            if self._SyncObj__raftState == _LEADER:
                # The leader's entry is not in its log yet (and is refused if unchanged).
                if changed:
                    self._refresh_voters((request, reverse))
            else:
                # A follower's entry is in its log; a rolled-back one is still there.
                self._refresh_voters((request, True) if reverse else None)
        return changed

    def _refresh_voters(self, extra: tuple[Any, bool] | None = None) -> None:
        """Work out the voters from the log (the committed state's, then every membership
        entry not applied yet), keep them, and vote exactly while they name this node
        with its own directory id."""
        committed = self.machine.state.voters
        if not committed:
            return  # the cluster's first voters are not applied yet
        voters = dict(committed)
        applied = self._SyncObj__raftLastApplied
        for entry in self._SyncObj__getEntries(applied + 1):
            if entry[0][:1] == _MEMBERSHIP:
                _apply_voter_change(voters, pickle.loads(entry[0][1:]), False)
        if extra is not None:
            _apply_voter_change(voters, *extra)
        if voters != self.voter_set:
            self.voter_set = voters
            self.replicas.set_voters(voters)
            self._save_voters()
        own = voters.get(self.node_id)
        voting = own is not None and own[0] == self.directory_id
        if voting != self.voting:
            self._set_voting(voting)
        elif voting:
            others = {a for i, (_, a) in voters.items() if i != self.node_id}
            if others != {n.id for n in self._SyncObj__otherNodes}:
                self._SyncObj__updateClusterConfiguration(
                    [VoterNode(a, i, d) for i, (d, a) in voters.items() if i != self.node_id]
                )

    def _SyncObj__doApplyCommand(self, command: bytes) -> Any:  # noqa: N802
        result = SyncObj._SyncObj__doApplyCommand(self, command)
        if self.dynamic and command[:1] == _MEMBERSHIP:
            request = pickle.loads(command[1:])
            if len(request) >= 3 and isinstance(request[2], VoterNode):
                voter: VoterNode = request[2]
                self.machine.apply(
                    VOTER_CHANGE,
                    {
                        "op": request[0],
                        "node_id": voter.node_id,
                        "directory_id": voter.directory_id,
                        "address": voter.address,
                    },
                )
        return result

    def _set_voting(self, voting: bool) -> None:
        if voting == self.voting:
            return
        self.voting = voting
        if voting:
            others = [
                VoterNode(a, i, d) for i, (d, a) in self.voter_set.items() if i != self.node_id
            ]
            self._SyncObj__updateClusterConfiguration(others)
        log.warning(
            "controller %d (directory %s) %s",
            self.node_id,
            self.directory_id,
            "is a voter of the metadata quorum now"
            if voting
            else "is no voter of the metadata quorum: it follows the log as an observer",
        )
        self._redial = True

    def _save_voters(self) -> None:
        if self._voters_path is not None:
            write_voters_file(self._voters_path, self.voter_set)

    # -- pre-vote ----------------------------------------------------------------------------
    # pysyncobj starts an election, raising its term, as soon as its election timeout
    # passes without word from a leader. A voter that only missed the leader's messages (a
    # restarted or SIGCONTed process, a voter cut off from the leader but not from the
    # others) then deposes a healthy leader: every node that sees the higher term steps
    # down. KRaft asks first (KIP-996, the Raft thesis' section 9.6): a voter whose timeout
    # passed sends a pre-vote for the next term, without raising its own, and runs the real
    # election only once a majority would vote for it. A voter grants a pre-vote only if it
    # has not heard from a leader for the minimum election timeout and the candidate's log
    # is at least as up to date as its own. A leadership transfer (TimeoutNow) skips the
    # round: the leader itself asked for that election.

    def _onTick(self, timeToWait: float = 0.0) -> None:  # noqa: N802 (pysyncobj's name)
        if self.dynamic:
            marker = (self.machine.state.version, self._SyncObj__getCurrentLogIndex())
            if marker != self._voters_marker:
                self._voters_marker = marker
                self._refresh_voters()
            if self._redial:
                self._redial = False
                transport = self._SyncObj__transport
                if isinstance(transport, ReplicaIdTransport):
                    transport.redial()
            if not self.voting:
                # Not a voter: never stands for election.
                self._SyncObj__raftElectionDeadline = (
                    monotonic_time() + self._SyncObj__generateRaftTimeout()
                )
        self._pre_vote_first()
        super()._onTick(timeToWait)

    def _pre_vote_first(self) -> None:
        """Turn an election pysyncobj is about to start into a pre-vote round, unless
        one was won for this term already (then the election goes ahead this tick)."""
        if self._SyncObj__selfNode is None or self._SyncObj__raftState == _LEADER:
            return
        now = monotonic_time()
        if self._SyncObj__raftElectionDeadline >= now or self._SyncObj__transferInProgress:
            return
        term = self._SyncObj__raftCurrentTerm
        if self._pre_vote_won_term == term or not self._SyncObj__connectedToAnyone():
            return
        self._SyncObj__raftElectionDeadline = now + self._SyncObj__generateRaftTimeout()
        self._pre_vote_term = term
        self._pre_votes = {self._SyncObj__selfNode.id}
        message = {
            "type": PRE_VOTE,
            "term": term + 1,
            "last_log_index": self._SyncObj__getCurrentLogIndex(),
            "last_log_term": self._SyncObj__getCurrentLogTerm(),
        }
        for other in self._SyncObj__otherNodes:
            self._SyncObj__transport.send(other, message)
        self._check_pre_vote_won()

    def _answer_pre_vote(self, node: Node, message: dict[str, Any]) -> None:
        term = self._SyncObj__raftCurrentTerm
        leader_heard = self._SyncObj__raftState == _LEADER or (
            self._SyncObj__raftLeader is not None
            and monotonic_time() - self._leader_contact < self._SyncObj__conf.raftMinTimeout
        )
        up_to_date = (message["last_log_term"], message["last_log_index"]) >= (
            self._SyncObj__getCurrentLogTerm(),
            self._SyncObj__getCurrentLogIndex(),
        )
        granted = message["term"] > term and up_to_date and not leader_heard
        self._SyncObj__transport.send(
            node,
            {"type": PRE_VOTE_RESPONSE, "term": message["term"], "granted": granted, "at": term},
        )

    def _count_pre_vote(self, node: Node, message: dict[str, Any]) -> None:
        term = self._SyncObj__raftCurrentTerm
        if message.get("at", -1) > term and self._SyncObj__raftState != _LEADER:
            # A voter is at a later term: catch up with it, or this node's pre-votes for
            # a term that voter has passed would never be granted.
            self._SyncObj__setCurrentTerm(message["at"], None)
            self._SyncObj__setState(_FOLLOWER)
            return
        if message["term"] != term + 1 or self._pre_vote_term != term:
            return
        if not message["granted"]:
            self.pre_votes_refused += 1
            return
        self._pre_votes.add(node.id)
        self._check_pre_vote_won()

    # A voter can be at a later term than the leader without the others knowing: it raised
    # its term in an election whose vote requests were lost (killed right after a SIGCONT,
    # cut off as it stood), and kept it on disk. pysyncobj drops the leader's appends as
    # stale without a word, and the pre-vote keeps the others from ever raising theirs, so
    # that voter would never follow again. As etcd's raft and KRaft do, it answers such an
    # append with its term; the leader steps down, and the election at the next term
    # brings it back.

    def _tell_term(self, leader: Node) -> None:
        self._SyncObj__transport.send(
            leader, {"type": TERM_AHEAD, "term": self._SyncObj__raftCurrentTerm}
        )

    def _step_down_for(self, voter: Node, message: dict[str, Any]) -> None:
        term = message.get("term")
        if not isinstance(term, int) or voter not in self._SyncObj__otherNodes:
            return  # only a voter's term counts (an observer never stands)
        if self._SyncObj__raftState != _LEADER or term <= self._SyncObj__raftCurrentTerm:
            return  # already a follower, or told of a term this node has reached
        log.warning(
            "controller %d steps down: a voter is at raft term %d, past this leader's %d",
            self.node_id,
            term,
            self._SyncObj__raftCurrentTerm,
        )
        self._SyncObj__setCurrentTerm(term, None)
        self._SyncObj__raftLeader = None
        self._SyncObj__setState(_FOLLOWER)
        self._SyncObj__onLeaderChanged()

    def _check_pre_vote_won(self) -> None:
        if len(self._pre_votes) > (len(self._SyncObj__otherNodes) + 1) / 2:
            self._pre_vote_won_term = self._pre_vote_term
            self._SyncObj__raftElectionDeadline = 0.0

    def _without_held_entries(self, message: dict[str, Any]) -> dict[str, Any]:
        """An AppendEntries as Raft's receiver rule reads it: only an entry that conflicts
        (same index, other term) cuts the log there. pysyncobj drops everything after
        `prevLogIdx` whenever the log goes on past it, then appends what came, so a
        repeated or stale AppendEntries (a leader resending after a lagging answer reset
        its next index for this node, common after a voter restarts) cuts entries this
        node already holds, often applied ones ("truncating already-applied log
        entries"), and the leader, which counted them as replicated, does not resend
        them until a later AppendEntries fails. Entries held already are taken off the
        front of the message instead, and a tail of the leader's own term beyond it
        (only that leader wrote entries of its term) is kept: pysyncobj then appends
        only what is new and acknowledges everything this node holds of the leader's."""
        if "prevLogIdx" in message and message.get("transmission") is None:
            get = self._SyncObj__getEntries
            prev_idx = message["prevLogIdx"]
            prev = get(prev_idx, 1)
            held = get(prev_idx + 1)
            if not held or not prev or prev[0][2] != message["prevLogTerm"]:
                return message  # nothing to cut, or pysyncobj's refusal stands
            entries = message.get("entries") or []
            overlap = min(len(held), len(entries))
            if any(
                held[i][1] != entries[i][1] or held[i][2] != entries[i][2] for i in range(overlap)
            ):
                return message  # a real conflict: pysyncobj's cut is Raft's
            if len(held) > len(entries) and any(e[2] != message["term"] for e in held[overlap:]):
                return message  # a tail from an older leader: cut it, as pysyncobj does
            last = held[-1]
            return {
                **message,
                "prevLogIdx": last[1],
                "prevLogTerm": last[2],
                "entries": entries[len(held) :],
            }
        return message


class RaftThread:
    """Owns the Raft node and the only thread that touches it (apart from proposals,
    which pysyncobj queues thread-safely)."""

    def __init__(
        self,
        *,
        node_id: int,
        machine: MetadataMachine,
        journal_path: str,
        snapshot_path: str,
        self_address: str | None,
        peers: list[str],
        timings: RaftTimings,
        snapshot_every: int = 1000,
        fsync: bool = False,
        bind_address: str | None = None,
        observer: bool = False,
        password: str | None = None,
        peer_lost: PeerLost | None = None,
        on_fault: Callable[[OSError], None] | None = None,
        on_stuck: Callable[[Exception], None] | None = None,
        voters: Mapping[int, str] | None = None,
        dynamic: bool = False,
        directory_id: str = "",
        voter_set: Mapping[int, tuple[str, str]] | None = None,
        voters_path: str | None = None,
    ) -> None:
        self.node_id = node_id
        # A dynamic quorum (KIP-853): this node votes only while `voter_set` names it
        # with its own directory id; `voters_path` keeps the set across restarts.
        self._dynamic = dynamic
        self._directory_id = directory_id
        self._voter_set = dict(voter_set or {})
        self._voters_path = voters_path
        # node id -> Raft address of every voter, for the leader's DescribeQuorum answer.
        self._voters = dict(voters or {})
        self._peer_lost = peer_lost
        # Told of the I/O error that stopped the node (the process then halts, as Kafka
        # does when its metadata log directory fails); without it the error is logged.
        self._on_fault = on_fault
        # Told of the error that stopped the node after TICK_FAILURES_TO_STOP ticks in a
        # row failed (the process then halts); without it the node stops alone.
        self._on_stuck = on_stuck
        self.machine = machine
        self._journal_path = journal_path
        self._snapshot_path = snapshot_path
        self._self_address = self_address
        self._peers = peers
        self._timings = timings
        self._snapshot_every = snapshot_every
        self._fsync = fsync
        self._bind_address = bind_address or self_address
        self._observer = observer
        self._password = password
        self._node: _RaftNode | None = None
        self._wake: PipeNotifier | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._inflight = 0
        self._inflight_lock = threading.Lock()
        self._journal_fd: int | None = None
        self.constructed = threading.Event()
        # Work for the Raft thread, which alone may touch the pysyncobj node.
        self._calls: list[Callable[[_RaftNode], None]] = []
        self._calls_lock = threading.Lock()
        self.construct_error: BaseException | None = None
        # Set when the node stopped: its journal could not be written, or its tick
        # kept failing.
        self.fault: Exception | None = None

    # --- called from any thread ---

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name=f"kbroker-controller-raft-{self.node_id}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Blocks until the tick thread has closed the journal and the socket."""
        self._stopping = True
        if self._wake is not None:
            self._wake.notify()
        if self._thread is not None:
            self._thread.join()

    def propose(self, kind: str, payload: dict[str, Any], callback: ResultCallback) -> None:
        """Queue a command; `callback(outcome, fail_reason)` runs on the Raft thread once
        it is applied here (fail_reason 0) or has failed."""
        node = self._node
        if node is None or self._stopping:
            callback(None, FAIL_REASON.NOT_LEADER)
            return
        with self._inflight_lock:
            self._inflight += 1

        def done(outcome: Any, fail_reason: int) -> None:
            with self._inflight_lock:
                self._inflight -= 1
            if fail_reason == FAIL_REASON.SUCCESS and self._journal_fd is not None:
                os.fsync(self._journal_fd)
            callback(outcome, fail_reason)

        node.apply_command(kind, payload, callback=done)

    def resign_leader(self, address: str) -> None:
        """Have the leader hand its leadership to the most caught-up voter, if it is still
        the voter at `address` (once another leads, nothing is asked). Best effort, as
        transfer_leadership."""

        def resign(node: _RaftNode) -> None:
            leader = node._getLeader()
            if leader is None or leader.id != address:
                return
            if node._isLeader():
                node.transferLeadership(callback=_log_transfer)
            else:
                node._SyncObj__transport.send(leader, {"type": _RESIGN, "leader": address})

        with self._calls_lock:
            self._calls.append(resign)
        if self._wake is not None:
            self._wake.notify()

    def transfer_leadership(self) -> None:
        """Ask the most caught-up connected voter to take over leadership now (Raft's
        TimeoutNow), instead of letting the others wait out an election timeout after
        this leader stops. Best effort: pysyncobj refuses when no voter is caught up."""

        def transfer(node: _RaftNode) -> None:
            node.transferLeadership(callback=_log_transfer)

        with self._calls_lock:
            self._calls.append(transfer)
        if self._wake is not None:
            self._wake.notify()

    @property
    def is_leader(self) -> bool:
        node = self._node
        return node is not None and node._isLeader()

    @property
    def leader_known(self) -> bool:
        node = self._node
        return node is not None and node._getLeader() is not None

    @property
    def term(self) -> int:
        node = self._node
        return node.raftCurrentTerm if node is not None else 0

    def describe_quorum(self, callback: DescribeCallback) -> None:
        """Have the Raft thread tell `callback` (on that thread) the leader's view of the
        quorum: its own if this node leads, else the leader's, asked over Raft. None when
        there is no leader to ask."""
        if self._node is None or self._stopping:
            callback(None)
            return

        def ask(node: _RaftNode) -> None:
            node.ask_leader(callback)

        with self._calls_lock:
            self._calls.append(ask)
        if self._wake is not None:
            self._wake.notify()

    def change_voters(self, op: str, voter: VoterNode, callback: ResultCallback) -> None:
        """Propose adding (`op` "add") or removing ("rem") one voter of a dynamic quorum;
        `callback(None, fail_reason)` runs on the Raft thread once the change is
        committed (fail_reason 0) or has failed. pysyncobj forwards it to the leader, which
        refuses (REQUEST_DENIED) while another change is not committed yet."""
        node = self._node
        if node is None or self._stopping:
            callback(None, FAIL_REASON.NOT_LEADER)
            return
        if op == "add":
            node.addNodeToCluster(voter, callback=callback)
        else:
            node.removeNodeFromCluster(voter, callback=callback)

    @property
    def voting(self) -> bool:
        node = self._node
        return node is not None and node.voting

    def connected_peers(self) -> tuple[int, int] | None:
        """(other voters this node is connected to, other voters); None without a Raft
        node or partners. A racy read from another thread, for reports only."""
        try:
            status = self.status()
        except RuntimeError:  # a dict changed size under the Raft thread
            return None
        links = [v for k, v in status.items() if k.startswith("partner_node_status_server_")]
        if not links:
            return None
        return sum(1 for v in links if v == 2), len(links)

    def status(self) -> dict[str, Any]:
        """pysyncobj's debug status (racy read from another thread; for logs and tests)."""
        node = self._node
        return node.getStatus() if node is not None else {}

    # --- the Raft thread ---

    def _conf(self) -> SyncObjConf:
        t = self._timings
        return SyncObjConf(
            autoTick=False,
            appendEntriesUseBatch=False,
            appendEntriesPeriod=t.heartbeat,
            raftMinTimeout=t.election_min,
            raftMaxTimeout=t.election_max,
            connectionTimeout=max(3.5, t.election_max),
            connectionRetryTime=0.5,
            # A leader cut off from the majority steps down after this, instead of
            # pysyncobj's 30 s default, so it stops claiming to be the controller.
            leaderFallbackTimeout=max(1.0, 2 * t.election_max),
            journalFile=self._journal_path,
            fullDumpFile=self._snapshot_path,
            serializer=self.machine.write_snapshot,
            deserializer=self.machine.read_snapshot,
            logCompactionMinEntries=self._snapshot_every,
            bindAddress=self._bind_address,
            password=self._password,
            maxBindRetries=1,
            # A dynamic quorum changes its voters through the log; an observer follows
            # such changes to know whom to read from.
            dynamicMembershipChange=self._dynamic or self._observer,
            onStateChanged=self._on_state_changed,
        )

    def _construct(self) -> _RaftNode:
        conf = self._conf()
        if self._observer:
            # pysyncobj's read-only node: dials every voter, applies the committed log the
            # leader sends it, never votes; its proposals are forwarded to the leader.
            return _RaftNode(
                self.machine,
                None,
                None,
                [TCPNode(p) for p in self._peers],
                conf,
                transportClass=ReplicaIdTransport,
                node_id=self.node_id,
                voters=self._voters,
            )
        if self._dynamic and self._self_address is not None:
            own = self._voter_set.get(self.node_id)
            voting = own is not None and own[0] == self._directory_id
            return _RaftNode(
                self.machine,
                self._peer_lost,
                VoterNode(self._self_address, self.node_id, self._directory_id),
                [TCPNode(p) for p in self._peers if p != self._self_address],
                conf,
                transportClass=PeerWatchingTransport,
                node_id=self.node_id,
                voters={i: a for i, (_, a) in self._voter_set.items()},
                dynamic=True,
                directory_id=self._directory_id,
                voting=voting,
                voter_set=self._voter_set,
                voters_path=self._voters_path,
            )
        if self._self_address is None:
            return _RaftNode(
                self.machine,
                None,
                Node(f"local-{self.node_id}"),
                [],
                conf,
                transportClass=LocalTransport,
                node_id=self.node_id,
                voters=self._voters,
            )
        return _RaftNode(
            self.machine,
            self._peer_lost,
            TCPNode(self._self_address),
            [TCPNode(p) for p in self._peers],
            conf,
            transportClass=PeerWatchingTransport,
            node_id=self.node_id,
            voters=self._voters,
        )

    def _run(self) -> None:
        try:
            node = self._construct()
            self._wake = PipeNotifier(node._poller)
            if self._fsync:
                self._journal_fd = os.open(self._journal_path, os.O_RDONLY)
        except BaseException as e:  # handed to start(), which raises it on the loop
            self.construct_error = e
            self.constructed.set()
            return
        self._node = node
        self.constructed.set()
        failures = 0
        try:
            while not self._stopping:
                try:
                    self._run_calls(node)
                    node.doTick(self._tick_timeout(node))
                except OSError as exc:
                    # The journal (or its directory) cannot be written: retrying every
                    # tick would fail forever and log each time. The node stops, once
                    # and loudly; proposals then fail as they do on a node that is not
                    # the leader, and other voters (if any) elect one that can write.
                    self.fault = exc
                    if self._on_fault is not None:
                        self._on_fault(exc)
                    else:
                        log.error(
                            "controller raft node %d stops: its journal cannot be written (%s: %s)",
                            self.node_id,
                            type(exc).__name__,
                            exc,
                        )
                    break
                except Exception as exc:
                    # A tick that keeps failing would fail every few ms forever (a bug,
                    # or a pysyncobj member that changed): the node stops, in one line.
                    failures += 1
                    if failures == 1:
                        log.debug("raft tick failed", exc_info=True)
                    if failures >= TICK_FAILURES_TO_STOP:
                        self.fault = exc
                        if self._on_stuck is not None:
                            self._on_stuck(exc)
                        else:
                            log.error(
                                "controller raft node %d stops: its tick failed %d times in"
                                " a row (%s: %s)",
                                self.node_id,
                                failures,
                                type(exc).__name__,
                                exc,
                            )
                        break
                    threading.Event().wait(0.01)
                else:
                    failures = 0
        finally:
            self._node = None
            node._doDestroy()
            if self._journal_fd is not None:
                os.close(self._journal_fd)
                self._journal_fd = None
            log.info("controller raft node %d stopped", self.node_id)

    def _run_calls(self, node: _RaftNode) -> None:
        with self._calls_lock:
            calls, self._calls = self._calls, []
        for call in calls:
            call(node)

    def _tick_timeout(self, node: _RaftNode) -> float:
        if self._peers or self._dynamic:
            return self._timings.idle_tick
        # A lone voter commits an appended entry on the next tick, and nothing but a
        # proposal would wake its poll(): tick again at once while one is in flight.
        if self._inflight or not node._isLeader():
            return 0.0 if self._inflight else self._timings.heartbeat
        return self._timings.idle_tick

    def _on_state_changed(self, old: int, new: int) -> None:
        if new != _LEADER:
            if old == _LEADER:
                log.warning("controller %d lost raft leadership", self.node_id)
            return
        node = self._node
        term = node.raftCurrentTerm if node is not None else 0
        log.info("controller %d became raft leader for term %d", self.node_id, term)
        # Record the new controller in the log, as KRaft does, so every replica's state
        # names the same controller_id.
        self.propose(CONTROLLER_ELECTED, {"node_id": self.node_id, "epoch": term}, _ignore_result)


def _log_transfer(outcome: Any, fail_reason: int) -> None:
    if fail_reason != FAIL_REASON.SUCCESS:
        log.debug("raft leadership not handed over: %s", FAIL_REASON_NAMES[fail_reason])


def _ignore_result(outcome: Any, fail_reason: int) -> None:
    if fail_reason != FAIL_REASON.SUCCESS:
        log.debug("controller election record not committed: %s", FAIL_REASON_NAMES[fail_reason])
