"""The asyncio face of the metadata controller: what the request handlers call.

Each change is validated here against the current snapshot (quick answers, no log entry
for a request that cannot succeed), turned into a deterministic command, proposed to the
Raft log, and answered when the command has been applied on this node. Results and state
cross from the Raft thread to the loop with `call_soon_threadsafe`, in apply order: the
published state is always updated before the future of the command that produced it
resolves, so a caller sees its own change in `controller.state` on return.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import functools
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from kbroker.controller import commands as cmd
from kbroker.controller import leadership
from kbroker.controller.errors import (
    DUPLICATE_VOTER,
    ELECTION_NOT_NEEDED,
    ELIGIBLE_LEADERS_NOT_AVAILABLE,
    INVALID_CONFIG,
    INVALID_PARTITIONS,
    INVALID_REPLICA_ASSIGNMENT,
    INVALID_REPLICATION_FACTOR,
    INVALID_REQUEST,
    NO_REASSIGNMENT_IN_PROGRESS,
    NOT_CONTROLLER,
    NOT_LEADER_OR_FOLLOWER,
    PREFERRED_LEADER_NOT_AVAILABLE,
    REQUEST_TIMED_OUT,
    TOPIC_ALREADY_EXISTS,
    UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
    UNSUPPORTED_VERSION,
    VOTER_NOT_FOUND,
    ControllerError,
    ControllerStartError,
    NoQuorumError,
)
from kbroker.controller.events import MetadataEvent
from kbroker.controller.liveness import Probes, listener_refuses, probe_after
from kbroker.controller.machine import MetadataMachine
from kbroker.controller.quorum import QuorumDescription
from kbroker.controller.raft import (
    FAIL_REASON,
    FAIL_REASON_NAMES,
    RaftThread,
    RaftTimings,
    VoterNode,
    read_voters_file,
    replica_key,
)
from kbroker.controller.state import (
    KRAFT_VERSION,
    NEW_CLUSTER_FEATURES,
    BrokerInfo,
    DelegationToken,
    MetadataState,
    PartitionInfo,
    TopicInfo,
)
from kbroker.controller.validation import (
    check_manual_assignment,
    check_partition_count,
    check_replication_factor,
    check_topic_absent,
    initial_isr,
    place_replicas,
    validate_topic_name,
)
from kbroker.security.acl import AclBinding
from kbroker.tasks import cancel_and_wait

log = logging.getLogger("kbroker.controller")

ConfigValidator = Callable[[dict[str, str]], None]

# How long DescribeQuorum waits for the active controller's answer.
DESCRIBE_QUORUM_TIMEOUT_S = 5.0
# A dynamic quorum's voters, as this node last learnt them (raft.py keeps it).
VOTERS_FILE = "quorum-voters.json"
# AddRaftVoter takes an observer that held everything the leader held this recently.
VOTER_CAUGHT_UP_MS = 10_000
# Removing the active controller: how often it is asked again, while it hands over.
VOTER_CHANGE_RETRY_S = 0.3
# How often a voter change's proposer looks whether it has applied the change itself.
VOTER_CHANGE_POLL_S = 0.1
FAIL_REASON_REQUEST_DENIED = FAIL_REASON.REQUEST_DENIED
FAIL_REASON_NOT_LEADER = FAIL_REASON.NOT_LEADER
# Between two tries of a client's change while the quorum elects a controller.
ELECTION_RETRY_BACKOFF_S = 0.1
# Refusals a metadata image that lags the active controller's can explain: given only
# after catching up (across_elections).
STALE_IMAGE_ERRORS = frozenset(
    {
        UNKNOWN_TOPIC_OR_PARTITION,
        UNKNOWN_TOPIC_ID,
        TOPIC_ALREADY_EXISTS,
        INVALID_PARTITIONS,
        INVALID_REPLICATION_FACTOR,
        INVALID_REPLICA_ASSIGNMENT,
        NO_REASSIGNMENT_IN_PROGRESS,
        ELECTION_NOT_NEEDED,
        PREFERRED_LEADER_NOT_AVAILABLE,
        ELIGIBLE_LEADERS_NOT_AVAILABLE,
    }
)
# Bounds the Raft thread's construction where start() has no timeout.
CONSTRUCT_TIMEOUT_S = 30.0
# Between two tries of the start's first change while no quorum answers.
QUORUM_RETRY_MIN_S = 0.05
QUORUM_RETRY_MAX_S = 0.5
# When a start still waiting for its quorum says so in the log, and how often again.
QUORUM_WAIT_FIRST_NOTE_S = 5.0
QUORUM_WAIT_NOTE_EVERY_S = 30.0

P = ParamSpec("P")
R = TypeVar("R")


def across_elections(
    method: Callable[Concatenate[Controller, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[Controller, P], Coroutine[Any, Any, R]]:
    """A change a client asked for, carried across a controller election.

    Kafka's brokers forward such a request to the active controller and, while the
    controller answers NOT_CONTROLLER or cannot be reached, send it again to the next one
    until the request times out (KIP-590; the controller turns a NOT_CONTROLLER answer
    into an envelope error so that the forwarding broker retries). A client therefore
    sees the outcome or REQUEST_TIMED_OUT, never NOT_CONTROLLER, which older clients
    (Sarama, kafka-python) do not retry. Each try validates afresh against the metadata
    of its moment, so a change the old controller committed before it died is refused
    as already done (TOPIC_ALREADY_EXISTS), as on Kafka.

    A change is validated against this node's metadata image, which may lag the active
    controller's by the changes committed but not applied here yet (a topic created or
    deleted through another node a moment ago). A refusal that such a lag can explain
    (STALE_IMAGE_ERRORS) is therefore given only after catching up with every committed
    change and validating again, so that the answer is the one the active controller
    would give, as Kafka's forwarding broker gets it from the controller itself."""

    @functools.wraps(method)
    async def retried(self: Controller, *args: P.args, **kwargs: P.kwargs) -> R:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.commit_timeout_s
        caught_up = False
        while True:
            try:
                return await method(self, *args, **kwargs)
            except ControllerError as exc:
                if exc.error_code in STALE_IMAGE_ERRORS and not caught_up and self._raft:
                    caught_up = True
                    if await self.try_catch_up():
                        continue
                    raise
                if exc.error_code != NOT_CONTROLLER or self._raft is None:
                    raise
                if loop.time() + ELECTION_RETRY_BACKOFF_S >= deadline:
                    raise ControllerError(
                        REQUEST_TIMED_OUT, f"no controller committed the change: {exc.message}"
                    ) from None
            await asyncio.sleep(ELECTION_RETRY_BACKOFF_S)

    return retried


@dataclass
class ControllerConfig:
    node_id: int
    data_dir: Path
    # "host:port" this voter's Raft server binds and partners dial. None with no peers:
    # a lone voter needs no socket. A port of 0 picks a free one at start.
    raft_bind: str | None = None
    # The other voters' Raft addresses, "host:port" or Kafka's "id@host:port".
    peers: list[str] = field(default_factory=list)
    # Adopted by a brand-new cluster; a data dir holding another cluster's id is refused.
    cluster_id: str | None = None
    default_num_partitions: int = 1
    default_replication_factor: int = 1
    max_partitions_per_topic: int = 100_000
    commit_timeout_s: float = 10.0
    # How long start() waits for a quorum to commit its first change; None waits for as
    # long as it takes (a controller-only node, as Kafka's controller keeps waiting for
    # its quorum). A node that also serves as a broker gives up after its broker part's
    # initial.broker.registration.timeout.ms.
    start_timeout_s: float | None = 30.0
    # Election timeouts with peers; a lone voter uses millisecond timers.
    election_timeout_s: tuple[float, float] = (0.5, 1.0)
    # fsync the metadata journal before acknowledging a change (survives power loss,
    # not only a killed process).
    fsync: bool = False
    # Snapshot the state and truncate the journal after this many entries.
    snapshot_every_entries: int = 1000
    # How the other voters name this one, when it differs from raft_bind (which may be a
    # wildcard): its entry in controller.quorum.voters.
    raft_advertised: str | None = None
    # A broker-only node: follows the quorum without voting (peers are the voters).
    observer: bool = False
    # pysyncobj's password: authenticates and encrypts every Raft message.
    secret: str | None = None
    # The active controller fences a broker whose heartbeats stop for this long; None
    # (a single node) runs no session checks at all.
    broker_session_timeout_s: float | None = None
    # broker.heartbeat.interval.ms: a broker silent for longer is probed (liveness.py),
    # and fenced at once if its listener refuses connections.
    broker_heartbeat_interval_s: float = 2.0
    # unclean.leader.election.enable for topics that do not override it.
    unclean_leader_election: bool = False
    # min.insync.replicas for topics that do not override it (ELR, KIP-966).
    min_insync_replicas: int = 1
    # auto.leader.rebalance.enable: how often the active controller gives partitions back
    # to their preferred leaders; None never does (a single node has nothing to move).
    leader_imbalance_check_interval_s: float | None = None
    # unclean.leader.election.interval.ms: how often the active controller elects a leader
    # for partitions left without one whose topic allows unclean election; None never
    # does (a single node has no other replica to elect).
    unclean_leader_election_interval_s: float | None = None
    # node id -> Raft address of every voter (itself included), for DescribeQuorum.
    voters: dict[int, str] = field(default_factory=dict)
    # A dynamic quorum (KIP-853, controller.quorum.bootstrap.servers): the voters live in
    # the log, and this node votes only while they name it with `directory_id` (its
    # metadata directory's meta.properties). `peers` are then the bootstrap servers.
    dynamic: bool = False
    directory_id: str = ""


def _settle_reason(fut: asyncio.Future[int], reason: int) -> None:
    if not fut.done():
        fut.set_result(reason)


def _voter_keys(voters: Mapping[int, tuple[str, str]]) -> str:
    return "[" + ", ".join(replica_key(i, d) for i, (d, _) in sorted(voters.items())) + "]"


def _settle(fut: asyncio.Future[QuorumDescription | None], value: QuorumDescription | None) -> None:
    if not fut.done():
        fut.set_result(value)


def new_cluster_id() -> str:
    """Kafka's form: a random UUID, base64url without padding (22 characters)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def _free_loopback_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _racks(state: MetadataState) -> dict[int, str | None]:
    return {b.node_id: b.rack for b in state.brokers.values()}


def _voter_address(peer: str) -> str:
    return peer.split("@", 1)[1] if "@" in peer else peer


def _voters_of(node_id: int, own_address: str | None, cfg: ControllerConfig) -> dict[int, str]:
    """The voters named by Kafka's "id@host:port" peers, this node among them unless it
    is an observer: for a config that leaves `voters` empty."""
    voters = {} if cfg.observer else {node_id: own_address or ""}
    for peer in cfg.peers:
        voter_id, sep, address = peer.partition("@")
        if sep and voter_id.isdigit():
            voters[int(voter_id)] = address
    return voters


class Controller:
    def __init__(self, config: ControllerConfig) -> None:
        self.config = config
        self.config_validator: ConfigValidator | None = None
        self._state = MetadataState()
        self._subscribers: list[Callable[[MetadataEvent], None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._raft: RaftThread | None = None
        self._machine: MetadataMachine | None = None
        self._lock_fd: int | None = None
        self._raft_address: str | None = None
        # A dynamic quorum's voters as this node knew them at start (its formatted voters
        # on a new cluster): node id -> (directory id, Raft address).
        self._bootstrap_voters: dict[int, tuple[str, str]] = {}
        self._pending: set[asyncio.Future[Any]] = set()
        # Raft thread -> loop hand-over of published state and events.
        self._publish_lock = threading.Lock()
        self._pending_state: MetadataState | None = None
        self._pending_events: list[MetadataEvent] = []
        self._drain_scheduled = False
        self._live = False  # events are delivered only for changes after start()
        self._live_token: bytes | None = None
        self._watchers: list[asyncio.Task[None]] = []
        # time.monotonic() start() began to wait for a quorum; None once it has one.
        self._waiting_since: float | None = None
        # Voter node id -> time.monotonic() its Raft connection to this node was lost:
        # a hint to probe that broker now rather than after a missed heartbeat.
        self._connection_lost: dict[int, float] = {}
        # Called (on the Raft thread) with the I/O error when the metadata journal or
        # snapshot cannot be written: the node's process halts, as Kafka's does when its
        # metadata log directory fails. Set before start(); None only logs the error.
        self.on_metadata_dir_failure: Callable[[OSError], None] | None = None
        # Called on the Raft thread when its tick kept failing and the node stopped: the
        # process halts rather than run on without its metadata (None only logs it).
        self.on_raft_stuck: Callable[[Exception], None] | None = None

    # --- read side ---

    @property
    def state(self) -> MetadataState:
        """The newest applied metadata, as one immutable snapshot."""
        return self._state

    @property
    def node_id(self) -> int:
        return self.config.node_id

    @property
    def _unclean_default(self) -> bool:
        """unclean.leader.election.enable for topics that do not set it: this node's
        dynamic value, else the cluster-wide dynamic default, else its static setting."""
        dynamic = self._state.broker_configs
        for resource in (str(self.config.node_id), ""):
            value = dynamic.get(resource, {}).get(cmd.UNCLEAN_CONFIG)
            if value is not None:
                return value.strip().lower() == "true"
        return self.config.unclean_leader_election

    @property
    def _min_isr_default(self) -> int:
        """min.insync.replicas for topics that do not set it, as _unclean_default."""
        dynamic = self._state.broker_configs
        for resource in (str(self.config.node_id), ""):
            value = dynamic.get(resource, {}).get(cmd.MIN_ISR_CONFIG)
            if value is not None:
                try:
                    return int(value)
                except ValueError:
                    break
        return self.config.min_insync_replicas

    @property
    def is_leader(self) -> bool:
        """This node is the Raft leader (commits without forwarding)."""
        return self._raft is not None and self._raft.is_leader

    @property
    def raft_address(self) -> str | None:
        """The address the Raft server is bound to; None for a socketless lone voter."""
        return self._raft_address

    async def describe_quorum(
        self, timeout: float = DESCRIBE_QUORUM_TIMEOUT_S
    ) -> QuorumDescription:
        """The metadata quorum as the active controller (the Raft leader) sees it, which
        alone knows every replica's progress: answered here on the leader, asked of it
        over Raft elsewhere, as a Kafka broker forwards DescribeQuorum to the active
        controller. NOT_LEADER_OR_FOLLOWER when no leader is known or it has just lost
        its leadership; REQUEST_TIMED_OUT when it does not answer in time."""
        raft, loop = self._raft, self._loop
        if raft is None or loop is None:
            raise ControllerError(NOT_LEADER_OR_FOLLOWER, "controller is not running")
        fut: asyncio.Future[QuorumDescription | None] = loop.create_future()

        def answered(described: QuorumDescription | None) -> None:  # on the Raft thread
            self._call_soon(_settle, fut, described)

        raft.describe_quorum(answered)
        try:
            async with asyncio.timeout(timeout):
                described = await fut
        except TimeoutError:
            raise ControllerError(
                REQUEST_TIMED_OUT, "the active controller did not describe the quorum in time"
            ) from None
        if described is None:
            raise ControllerError(
                NOT_LEADER_OR_FOLLOWER, "no active controller to describe the quorum"
            )
        return described

    # -- a dynamic quorum's voters (KIP-853: AddRaftVoter, RemoveRaftVoter) ---------------

    async def add_voter(self, node_id: int, directory_id: str, address: str) -> None:
        """Make the observer `node_id` (with that metadata directory) a voter, once it has
        caught up with the leader, with Kafka's checks and errors (ControllerError):
        UNSUPPORTED_VERSION on a static quorum, DUPLICATE_VOTER, REQUEST_TIMED_OUT while
        the new voter is not replicating or is behind, or another change is pending."""
        key = replica_key(node_id, directory_id)
        state = self._check_reconfigurable("adding")
        if node_id in state.voters:
            raise ControllerError(
                DUPLICATE_VOTER,
                f"The voter id for {key} is already part of the set of voters "
                f"{_voter_keys(state.voters)}.",
            )
        quorum = await self.describe_quorum()
        observer = next(
            (
                o
                for o in quorum.observers
                if o.replica_id == node_id and o.directory_id == directory_id
            ),
            None,
        )
        if observer is None:
            raise ControllerError(
                REQUEST_TIMED_OUT, f"New voter {key} is not ready to receive requests"
            )
        now_ms = int(time.time() * 1000)
        if observer.last_caught_up_timestamp < now_ms - VOTER_CAUGHT_UP_MS:
            raise ControllerError(
                REQUEST_TIMED_OUT,
                f"Aborted add voter operation for {key} since it is lagging behind",
            )
        await self._change_voters("add", VoterNode(address, node_id, directory_id))

    async def remove_voter(self, node_id: int, directory_id: str) -> None:
        """Take voter `node_id` (with that directory id) out of a dynamic quorum: Kafka's
        VOTER_NOT_FOUND when it is not one, or is the last voter."""
        key = replica_key(node_id, directory_id)
        state = self._check_reconfigurable("removing")
        voter = state.voters.get(node_id)
        if voter is None or voter[0] != directory_id or len(state.voters) == 1:
            raise ControllerError(
                VOTER_NOT_FOUND,
                f"Cannot remove voter {key} from the set of voters {_voter_keys(state.voters)}",
            )
        await self._change_voters("rem", VoterNode(voter[1], node_id, directory_id))

    def _check_reconfigurable(self, verb: str) -> MetadataState:
        state = self._state
        level = state.features.get(KRAFT_VERSION, 0)
        if level < 1 or not self.config.dynamic:
            raise ControllerError(
                UNSUPPORTED_VERSION,
                f"Cluster doesn't support {verb} voter because the {KRAFT_VERSION} feature "
                f"is {level if self.config.dynamic else 0}",
            )
        return state

    async def _change_voters(self, op: str, voter: VoterNode) -> None:
        raft, loop = self._raft, self._loop
        if raft is None or loop is None:
            raise ControllerError(NOT_LEADER_OR_FOLLOWER, "controller is not running")
        key = replica_key(voter.node_id, voter.directory_id)
        deadline = time.monotonic() + self.config.commit_timeout_s
        while True:
            fut: asyncio.Future[int] = loop.create_future()

            def done(outcome: Any, fail_reason: int, fut: asyncio.Future[int] = fut) -> None:
                self._call_soon(_settle_reason, fut, fail_reason)  # on the Raft thread

            raft.change_voters(op, voter, done)
            try:
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    reason = await self._voter_change_outcome(fut, op, voter)
            except TimeoutError:
                raise ControllerError(
                    REQUEST_TIMED_OUT,
                    f"Request timed out waiting for the voter change of {key} to commit",
                ) from None
            leader_goes = op == "rem" and self._state.controller_id == voter.node_id
            if reason != FAIL_REASON_REQUEST_DENIED or not leader_goes:
                break
            # pysyncobj's leader cannot remove itself: it hands its leadership over first
            # (Kafka's leader resigns once its removal is committed), then it is removed.
            if time.monotonic() >= deadline:
                raise ControllerError(
                    REQUEST_TIMED_OUT,
                    f"Request timed out waiting for the active controller {key} to hand its "
                    "leadership over before its removal",
                )
            raft.resign_leader(voter.address)
            await asyncio.sleep(VOTER_CHANGE_RETRY_S)
        if reason == 0:
            # Committed: the state learns it as this node applies the entry.
            for _ in range(200):
                if (voter.node_id in self._state.voters) == (op == "add"):
                    break
                await asyncio.sleep(0.01)
            return
        if reason == FAIL_REASON_REQUEST_DENIED:
            raise ControllerError(
                REQUEST_TIMED_OUT,
                "Request timed out waiting for leader to handle previous add or remove voter "
                "request",
            )
        if reason == FAIL_REASON_NOT_LEADER:
            raise ControllerError(NOT_LEADER_OR_FOLLOWER, "no active controller to change voters")
        raise ControllerError(
            REQUEST_TIMED_OUT,
            f"voter change not committed: {FAIL_REASON_NAMES.get(reason)}",
        )

    async def _voter_change_outcome(
        self, fut: asyncio.Future[int], op: str, voter: VoterNode
    ) -> int:
        """pysyncobj's answer to the change, or success once this node has applied it: a
        controller that removed itself stops following the leader as a voter before its
        own proposal's answer can reach it."""
        while True:
            applied = self._state.voters.get(voter.node_id)
            wanted = (voter.directory_id, voter.address) if op == "add" else None
            if op == "add" and applied == wanted or op == "rem" and applied is None:
                return 0
            if fut.done():
                reason = fut.result()
                if reason in (0, FAIL_REASON_REQUEST_DENIED, FAIL_REASON_NOT_LEADER):
                    return reason
                # Lost with its connection (LEADER_CHANGED, DISCARDED...): it may still
                # commit, which this node sees when it applies it.
                await asyncio.sleep(VOTER_CHANGE_POLL_S)
                continue
            try:
                return await asyncio.wait_for(asyncio.shield(fut), VOTER_CHANGE_POLL_S)
            except TimeoutError:
                continue

    def subscribe(self, callback: Callable[[MetadataEvent], None]) -> None:
        self._subscribers.append(callback)

    def unsubscribe(self, callback: Callable[[MetadataEvent], None]) -> None:
        self._subscribers.remove(callback)

    # --- life cycle ---

    async def start(self) -> None:
        """Open the journal, replay it, join the Raft group and wait until this node has
        applied everything committed before it started (on a lone voter: until it has
        elected itself). Also gives a brand-new cluster its cluster id."""
        if self._raft is not None:
            raise RuntimeError("controller already started")
        cfg = self.config
        self._loop = asyncio.get_running_loop()
        started = time.monotonic()
        directory = Path(cfg.data_dir) / "__controller"
        directory.mkdir(parents=True, exist_ok=True)
        self._lock_directory(directory)

        address = cfg.raft_bind
        if address is None and cfg.peers and not cfg.observer:
            raise ControllerStartError("raft_bind is required when peers are configured")
        if address is not None:
            host, port = address.rsplit(":", 1)
            if int(port) == 0:
                address = f"{host}:{_free_loopback_port(host.strip('[]'))}"
        self._raft_address = address
        peers = [_voter_address(p) for p in cfg.peers]
        voters_path = str(directory / VOTERS_FILE)
        voter_set = read_voters_file(voters_path) if cfg.dynamic else {}
        if cfg.dynamic:
            own = voter_set.get(cfg.node_id)
            if own is not None and own[0] == cfg.directory_id:
                # A voter dials the voters it knows; the bootstrap servers are for finding
                # the quorum as an observer.
                peers = [a for i, (_, a) in sorted(voter_set.items()) if i != cfg.node_id]
            else:
                peers += [a for _, a in voter_set.values() if a not in peers]
        # A lone voter of the voters list that serves its Raft socket has brokers
        # observing it: they get a cluster's heartbeats, not a lone node's.
        if peers or cfg.observer or cfg.dynamic or (address is not None and cfg.voters):
            timings = RaftTimings.cluster(*cfg.election_timeout_s)
        else:
            timings = RaftTimings.single_voter()

        machine = MetadataMachine(
            listener=self._on_applied,
            fsync=cfg.fsync,
            on_load_error=self._on_load_error,
            on_write_error=self.on_metadata_dir_failure,
        )
        self._machine = machine
        raft = RaftThread(
            node_id=cfg.node_id,
            machine=machine,
            journal_path=str(directory / "raft.journal"),
            snapshot_path=str(directory / "raft.snapshot"),
            self_address=cfg.raft_advertised or address,
            peers=peers,
            timings=timings,
            snapshot_every=cfg.snapshot_every_entries,
            fsync=cfg.fsync,
            bind_address=address,
            observer=cfg.observer,
            password=cfg.secret,
            peer_lost=self._on_peer_lost,
            on_fault=self.on_metadata_dir_failure,
            on_stuck=self.on_raft_stuck,
            voters=cfg.voters or _voters_of(cfg.node_id, cfg.raft_advertised or address, cfg),
            dynamic=cfg.dynamic,
            directory_id=cfg.directory_id,
            voter_set=voter_set,
            voters_path=voters_path if cfg.dynamic else None,
        )
        self._bootstrap_voters = voter_set
        self._state = MetadataState()
        self._live = False
        self._live_token = uuid.uuid4().bytes
        deadline = None if cfg.start_timeout_s is None else started + cfg.start_timeout_s
        raft.start()
        try:
            await asyncio.wait_for(
                asyncio.to_thread(raft.constructed.wait), cfg.start_timeout_s or CONSTRUCT_TIMEOUT_S
            )
            if raft.construct_error is not None:
                raise ControllerStartError(
                    f"controller raft node could not start on {address or 'no socket'}: "
                    f"{raft.construct_error!r}"
                ) from raft.construct_error
            self._raft = raft
            self._waiting_since = time.monotonic()
            await self._await_barrier(deadline)
            if raft.is_leader and machine.state.controller_epoch != raft.term:
                # Our election record was queued behind the first barrier: wait for it
                # too, so state.controller_id is right when start() returns.
                await self._await_barrier(deadline)
            self._waiting_since = None
            self._state = max(self._state, machine.state, key=lambda s: s.version)
            await self._ensure_cluster_id()
        except BaseException:
            self._raft = None
            self._waiting_since = None
            await asyncio.to_thread(raft.stop)
            self._unlock_directory()
            raise
        if self._state.elr_enabled and cmd.MIN_ISR_CONFIG not in self._state.broker_configs.get(
            "", {}
        ):
            self._watchers.append(asyncio.create_task(self._keep_elr_safe()))
        if cfg.broker_session_timeout_s is not None:
            self._watchers.append(
                asyncio.create_task(self._watch_broker_sessions(cfg.broker_session_timeout_s))
            )
        if cfg.leader_imbalance_check_interval_s is not None:
            self._watchers.append(
                asyncio.create_task(self._rebalance_leaders(cfg.leader_imbalance_check_interval_s))
            )
        if cfg.unclean_leader_election_interval_s is not None:
            self._watchers.append(
                asyncio.create_task(
                    self._elect_unclean_leaders(cfg.unclean_leader_election_interval_s)
                )
            )
        s = self._state
        log.info(
            "controller %d started in %.0f ms: cluster %s, metadata version %d, %d topics, "
            "%d partitions, raft %s",
            cfg.node_id,
            (time.monotonic() - started) * 1000,
            s.cluster_id,
            s.version,
            len(s.topics),
            sum(len(t.partitions) for t in s.topics.values()),
            address or "local (no socket)",
        )

    async def _await_barrier(self, deadline: float | None) -> None:
        """Propose a no-op and wait for it to apply: then every entry committed before
        this start has been replayed here, and this node can get a command committed.
        Without a deadline it waits for a quorum for as long as it takes, saying in the
        log now and then what it waits for (quorum_wait())."""
        token = self._live_token
        pause = QUORUM_RETRY_MIN_S
        next_note = time.monotonic() + QUORUM_WAIT_FIRST_NOTE_S
        while True:
            self._raise_load_error()
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                raise NoQuorumError(
                    f"controller {self.config.node_id} could not reach a Raft quorum: "
                    f"{self.quorum_wait() or 'no quorum'}"
                )
            if now >= next_note:
                log.warning("controller %d is %s", self.config.node_id, self.quorum_wait())
                next_note = now + QUORUM_WAIT_NOTE_EVERY_S
            try_for = self.config.commit_timeout_s
            if deadline is not None:
                try_for = min(try_for, deadline - now)
            try:
                await self._propose(cmd.BARRIER, {"token": token}, timeout=try_for)
                return
            except ControllerError:
                self._raise_load_error()
            # No leader yet (pysyncobj refuses at once) or none committed it in time.
            await asyncio.sleep(pause)
            pause = min(pause * 2, QUORUM_RETRY_MAX_S)

    def quorum_wait(self) -> str | None:
        """While start() waits for a quorum: what it waits for, for /health and the log
        (how long, and how many of the other voters this node is connected to)."""
        since, raft = self._waiting_since, self._raft
        if since is None:
            return None
        waited = time.monotonic() - since
        reach = raft.connected_peers() if raft is not None else None
        what = "the controller quorum" if self.config.observer else "a Raft quorum of the voters"
        text = f"waiting {waited:.0f}s for {what}"
        if reach is not None:
            connected, peers = reach
            voters = peers if self.config.observer else peers + 1
            text += (
                f" ({connected} of {peers} other {'voters' if peers != 1 else 'voter'} "
                f"connected, {voters // 2 + 1} of {voters} voters needed)"
            )
        return text

    def _lock_directory(self, directory: Path) -> None:
        """Two processes appending to one mmapped journal would corrupt it; the lock dies
        with its process, so a killed broker never leaves it behind."""
        fd = os.open(directory / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            raise ControllerStartError(f"{directory} is in use by another process") from e
        self._lock_fd = fd

    def _unlock_directory(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _raise_load_error(self) -> None:
        load_error = self._machine.load_error if self._machine else None
        if load_error is not None:
            raise ControllerStartError(
                f"metadata snapshot in {self.config.data_dir} is unreadable: {load_error!r}"
            ) from load_error

    async def _ensure_cluster_id(self) -> None:
        wanted = self.config.cluster_id
        current = self._state.cluster_id
        if current is None and self.config.dynamic:
            own = self._bootstrap_voters.get(self.config.node_id)
            if own is None or own[0] != self.config.directory_id:
                # Not one of the formatted voters: the cluster is theirs to create.
                while self._state.cluster_id is None:
                    await asyncio.sleep(0.05)
                current = self._state.cluster_id
            else:
                current = await self._propose(
                    cmd.INIT_CLUSTER,
                    {
                        "cluster_id": wanted or new_cluster_id(),
                        "features": {**NEW_CLUSTER_FEATURES, KRAFT_VERSION: 1},
                        "voters": [[i, d, a] for i, (d, a) in self._bootstrap_voters.items()],
                        "min_isr": self.config.min_insync_replicas,
                    },
                )
        if current is None:
            current = await self._propose(
                cmd.INIT_CLUSTER,
                {
                    "cluster_id": wanted or new_cluster_id(),
                    "features": dict(NEW_CLUSTER_FEATURES),
                    "min_isr": self.config.min_insync_replicas,
                },
            )
        if wanted is not None and current != wanted:
            raise ControllerStartError(
                f"metadata in {self.config.data_dir} belongs to cluster {current}, "
                f"not the configured {wanted}"
            )

    async def stop(self) -> None:
        watchers, self._watchers = self._watchers, []
        await cancel_and_wait(watchers, self.config.commit_timeout_s, "controller tasks")
        raft, self._raft = self._raft, None
        if raft is None:
            return
        await asyncio.to_thread(raft.stop)
        self._unlock_directory()
        self._fail_pending("controller stopped")
        self._pending.clear()

    # --- changes ---

    async def register_broker(
        self,
        node_id: int,
        host: str,
        port: int,
        rack: str | None = None,
        endpoints: Sequence[tuple[str, str, int]] = (),
        offline: Sequence[tuple[uuid.UUID, int]] = (),
        previous_epoch: int = -1,
    ) -> BrokerInfo:
        """Register this incarnation of a broker; its `epoch` names it in heartbeats.
        `endpoints` are its advertised listeners as (name, host, port); `offline` the
        replicas it holds that it cannot serve (their log directory is offline);
        `previous_epoch` the epoch its clean-shutdown marker names, -1 after an unclean
        shutdown (Kafka's BrokerRegistrationRequest.PreviousBrokerEpoch)."""
        info: BrokerInfo = await self._propose(
            cmd.REGISTER_BROKER,
            {
                "node_id": node_id,
                "host": host,
                "port": port,
                "rack": rack,
                "timestamp_ms": int(time.time() * 1000),
                "unclean": self._unclean_default,
                "min_isr": self._min_isr_default,
                "endpoints": [list(e) for e in endpoints],
                "offline": [(topic_id.bytes, index) for topic_id, index in offline],
                "previous_epoch": previous_epoch,
            },
        )
        return info

    async def broker_heartbeat(self, node_id: int, epoch: int, timeout: float) -> BrokerInfo:
        """Tell the active controller the broker lives; unfences it if it was fenced.
        STALE_BROKER_EPOCH means the broker must register again."""
        info: BrokerInfo = await self._propose(
            cmd.BROKER_HEARTBEAT,
            {
                "node_id": node_id,
                "epoch": epoch,
                "unclean": self._unclean_default,
                "min_isr": self._min_isr_default,
            },
            timeout=timeout,
        )
        return info

    async def controlled_shutdown(self, node_id: int, epoch: int, timeout: float) -> None:
        """Move the broker's leaderships away and take it out of every ISR it can leave,
        before it stops (Kafka's controlled shutdown)."""
        await self._propose(
            cmd.CONTROLLED_SHUTDOWN,
            {
                "node_id": node_id,
                "epoch": epoch,
                "shutting_down": True,
                "unclean": self._unclean_default,
                "min_isr": self._min_isr_default,
            },
            timeout=timeout,
        )

    async def replicas_offline(
        self, node_id: int, epoch: int, partitions: Sequence[tuple[uuid.UUID, int]]
    ) -> None:
        """The broker's replicas of `partitions` are offline (their log directory
        failed): elect other leaders and take it out of their ISRs."""
        await self._propose(
            cmd.REPLICAS_OFFLINE,
            {
                "node_id": node_id,
                "epoch": epoch,
                "partitions": [(topic_id.bytes, index) for topic_id, index in partitions],
                "unclean": self._unclean_default,
                "min_isr": self._min_isr_default,
            },
        )

    async def alter_partition(
        self,
        topic_id: uuid.UUID,
        partition: int,
        *,
        leader: int,
        leader_epoch: int,
        partition_epoch: int,
        new_isr: Sequence[int],
    ) -> PartitionInfo:
        """A partition leader's ISR change (Kafka's AlterPartition). Answers the partition
        as committed, or raises ControllerError: FENCED_LEADER_EPOCH (the caller is no
        longer leader at that epoch), INVALID_UPDATE_VERSION (its partition epoch is
        stale: refresh from `state` and retry), INELIGIBLE_REPLICA (an added replica is
        fenced or shutting down), INVALID_REQUEST, UNKNOWN_TOPIC_ID, NOT_CONTROLLER."""
        self._check_can_commit()
        info: PartitionInfo = await self._propose(
            cmd.ALTER_PARTITION,
            {
                "topic_id": topic_id.bytes,
                "partition": partition,
                "leader": leader,
                "leader_epoch": leader_epoch,
                "partition_epoch": partition_epoch,
                "isr": list(new_isr),
                "min_isr": self._min_isr_default,
            },
        )
        return info

    @across_elections
    async def elect_leaders(
        self, election_type: int, partitions: Sequence[tuple[str, int]] | None
    ) -> list[tuple[str, int, int, str | None]]:
        """ElectLeaders: PREFERRED (0) or UNCLEAN (1) for the named partitions, or every
        partition when None; answers (topic, partition, error code, message) for each
        named one, and with None only where an election was attempted (Kafka omits
        ELECTION_NOT_NEEDED there)."""
        self._check_can_commit()
        every = partitions is None
        if partitions is None:
            partitions = [
                (t.name, p.partition) for t in self._state.topics.values() for p in t.partitions
            ]
        outcome = await self._propose(
            cmd.ELECT_LEADERS,
            {
                "election_type": election_type,
                "partitions": [list(tp) for tp in partitions],
                "unclean": self._unclean_default,
                "min_isr": self._min_isr_default,
            },
        )
        results = [(str(t), int(i), int(code), msg) for t, i, code, msg in outcome]
        if every:
            results = [r for r in results if r[2] != ELECTION_NOT_NEEDED]
        return results

    @across_elections
    async def alter_partition_reassignments(
        self,
        partitions: Sequence[tuple[str, int, Sequence[int] | None]],
        allow_replication_factor_change: bool = True,
    ) -> list[tuple[str, int, int, str | None]]:
        """AlterPartitionReassignments (KIP-455): move each (topic, partition) to the
        given replicas, or cancel its ongoing reassignment with None. Answers (topic,
        partition, error code, message) for each once the change is committed; the
        replicas then move on their own (kbroker.controller.reassignment)."""
        self._check_can_commit()
        outcome = await self._propose(
            cmd.ALTER_PARTITION_REASSIGNMENTS,
            {
                "partitions": [[t, i, None if r is None else list(r)] for t, i, r in partitions],
                "unclean": self._unclean_default,
                "min_isr": self._min_isr_default,
                "allow_replication_factor_change": allow_replication_factor_change,
            },
        )
        return [(str(t), int(i), int(code), msg) for t, i, code, msg in outcome]

    async def _rebalance_leaders(self, interval: float) -> None:
        """auto.leader.rebalance.enable, as KRaft's controller does it: every interval the
        active controller hands each partition whose preferred replica is in the ISR and
        live, but does not lead, back to that replica."""
        while True:
            await asyncio.sleep(interval)
            if not self.is_leader:
                continue
            state = self._state
            imbalanced = [
                (t.name, p.partition)
                for t in state.topics.values()
                for p in t.partitions
                if leadership.is_imbalanced(p, leadership.usable_in(state, t.topic_id, p.partition))
            ]
            if not imbalanced:
                continue
            try:
                results = await self.elect_leaders(leadership.PREFERRED, imbalanced)
                moved = sum(1 for r in results if r[2] == 0)
                log.info("leader rebalance: %d partitions back on their preferred leader", moved)
            except ControllerError as exc:
                log.info("leader rebalance not committed: %s", exc)

    async def _elect_unclean_leaders(self, interval: float) -> None:
        """KRaft's periodic unclean election (unclean.leader.election.interval.ms, the
        controller's maybeElectUncleanLeaders): every interval the active controller gives
        each partition without a leader whose topic allows unclean election (its
        unclean.leader.election.enable, else the cluster's) a leader from its live
        replicas. Elections otherwise run only when a broker comes or goes, so a topic
        that allows it only once its partition is offline gets a leader this way, as on
        Kafka."""
        while True:
            await asyncio.sleep(interval)
            if not self.is_leader:
                continue
            state = self._state
            default = self._unclean_default
            leaderless = []
            for topic in state.topics.values():
                if not cmd.unclean_allowed(topic, default):
                    continue
                for p in topic.partitions:
                    usable = leadership.usable_in(state, topic.topic_id, p.partition)
                    if not p.has_leader and any(usable(r) for r in p.replicas):
                        leaderless.append((topic.name, p.partition))
            if not leaderless:
                continue
            try:
                results = await self.elect_leaders(leadership.UNCLEAN, leaderless)
            except ControllerError as exc:
                log.info("unclean leader election not committed: %s", exc)
                continue
            for name, index, code, _ in results:
                if code == 0:
                    log.error("unclean leader election for offline partition %s-%d", name, index)
                else:
                    log.warning(
                        "cannot elect a leader for offline partition %s-%d: error %d",
                        name,
                        index,
                        code,
                    )

    async def catch_up(self) -> None:
        """Return once this node has applied every change committed before the call: a
        read that follows (ListPartitionReassignments after an Alter sent to another
        broker) sees what the active controller would answer, as Kafka forwards such
        reads to it. One no-op through the Raft log."""
        self._check_can_commit()
        await self._propose(cmd.BARRIER, {"token": b""})

    async def try_catch_up(self) -> bool:
        """catch_up(), or False at once when no quorum lets it (the image stays as is)."""
        try:
            await self.catch_up()
        except ControllerError:
            return False
        return True

    async def resign(self, timeout: float) -> bool:
        """If this node is the active controller, hand Raft leadership to a caught-up
        voter and wait (bounded) until another node leads; True if it was handed over.
        A stopping controller does this so metadata changes wait for no election."""
        raft = self._raft
        if raft is None or not raft.is_leader:
            return False
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            # pysyncobj refuses unless a voter has every entry; with other brokers'
            # heartbeats arriving, that may take a few attempts.
            raft.transfer_leadership()
            attempt_ends = min(deadline, time.monotonic() + 0.2)
            while time.monotonic() < attempt_ends:
                await asyncio.sleep(0.01)
                if not raft.is_leader and raft.leader_known:
                    return True
        return False

    async def _watch_broker_sessions(self, session_timeout: float) -> None:
        """On the active controller: fence every unfenced broker whose last heartbeat is
        older than the session timeout. A controller that has just become active counts
        every session from its election, as KRaft does, so nobody is fenced for the
        silence of the election itself. A broker that has missed a heartbeat, or whose
        Raft connection (a voter's) was lost since its last one, is probed meanwhile, and
        fenced at once if its listener refuses connections (liveness.py): that is how a
        killed broker loses its leaderships in about a second."""
        interval = min(0.25, session_timeout / 8)
        silent_after = probe_after(self.config.broker_heartbeat_interval_s)
        active_since: float | None = None
        fencing: set[int] = set()
        probes = Probes()
        tasks: set[asyncio.Task[None]] = set()

        def spawn(coro: Any) -> None:
            task = asyncio.create_task(coro)
            tasks.add(task)
            task.add_done_callback(tasks.discard)

        while True:
            await asyncio.sleep(interval)
            machine = self._machine
            if machine is None or not self.is_leader:
                active_since = None
                continue
            now = time.monotonic()
            if active_since is None:
                active_since = now
            seen = dict(machine.last_seen)
            for broker in list(self._state.brokers.values()):
                if broker.fenced or broker.node_id in fencing:
                    continue
                heard = seen.get(broker.node_id, 0.0)
                suspect = now - heard > silent_after or (
                    self._connection_lost.get(broker.node_id, 0.0) > heard
                )
                if now - max(heard, active_since) > session_timeout:
                    fencing.add(broker.node_id)
                    reason = "no heartbeat within the session timeout"
                    spawn(self._fence(broker.node_id, broker.epoch, fencing, reason))
                elif suspect and probes.due(broker.node_id, now):
                    probes.begin(broker.node_id, now)
                    spawn(self._probe(broker, probes, fencing))

    def _on_peer_lost(self, address: str) -> None:
        """On the Raft thread: the connection to the voter at `address` was lost."""
        self._call_soon(self._note_connection_lost, address, time.monotonic())

    def _note_connection_lost(self, address: str, when: float) -> None:
        for node_id, voter in self.config.voters.items():
            if voter == address:
                self._connection_lost[node_id] = when

    async def _probe(self, broker: BrokerInfo, probes: Probes, fencing: set[int]) -> None:
        """Fence `broker` if nothing listens on its inter-broker address any more."""
        try:
            if not await listener_refuses(broker.host, broker.port):
                return
            current = self._state.brokers.get(broker.node_id)
            if (
                current is None
                or current.epoch != broker.epoch
                or current.fenced
                or broker.node_id in fencing
                or not self.is_leader
            ):
                return
            fencing.add(broker.node_id)
            reason = (
                f"silent since its last heartbeat and its listener {broker.host}:{broker.port} "
                "refuses connections (the process is gone)"
            )
            await self._fence(broker.node_id, broker.epoch, fencing, reason)
        finally:
            probes.end(broker.node_id)

    async def _fence(self, node_id: int, epoch: int, fencing: set[int], reason: str) -> None:
        try:
            await self._propose(
                cmd.FENCE_BROKER,
                {
                    "node_id": node_id,
                    "epoch": epoch,
                    "unclean": self._unclean_default,
                    "min_isr": self._min_isr_default,
                },
            )
            log.warning("fenced broker %d: %s", node_id, reason)
        except ControllerError as exc:
            log.info("fencing broker %d not committed: %s", node_id, exc)
        finally:
            fencing.discard(node_id)

    @across_elections
    async def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: Mapping[str, str] | None = None,
        assignments: Mapping[int, Sequence[int]] | None = None,
        validate_only: bool = False,
    ) -> TopicInfo:
        """num_partitions / replication_factor -1 take the defaults; with `assignments`
        (partition -> replica broker ids) both must be -1, as in CreateTopics."""
        self._check_can_commit()
        state = self._state
        validate_topic_name(name)
        check_topic_absent(state, name)
        if assignments:
            if num_partitions != -1 or replication_factor != -1:
                raise ControllerError(
                    INVALID_REQUEST,
                    "Both numPartitions or replicationFactor and replicasAssignments were set. "
                    "Both cannot be used at the same time.",
                )
            check_partition_count(len(assignments), self.config.max_partitions_per_topic)
            replicas = check_manual_assignment(assignments, 0, state.brokers)
        else:
            if num_partitions == -1:
                num_partitions = self.config.default_num_partitions
            if replication_factor == -1:
                replication_factor = self.config.default_replication_factor
            check_partition_count(num_partitions, self.config.max_partitions_per_topic)
            live = state.live_brokers
            check_replication_factor(replication_factor, len(live))
            replicas = place_replicas(
                live, _racks(state), 0, num_partitions, replication_factor, len(state.topics)
            )
        topic_configs = dict(configs or {})
        self._validate_configs(topic_configs)
        topic_id = uuid.uuid4()
        isrs = [initial_isr(r, state.brokers, i) for i, r in enumerate(replicas)]
        if validate_only:
            partitions = tuple(
                PartitionInfo(i, isr[0], r, isr, 0, 0)
                for i, (r, isr) in enumerate(zip(replicas, isrs, strict=True))
            )
            return TopicInfo(name, topic_id, partitions, topic_configs)
        return await self._propose(
            cmd.CREATE_TOPIC,
            {
                "name": name,
                "topic_id": topic_id.bytes,
                "assignment": [list(r) for r in replicas],
                "configs": topic_configs,
                "active_isr": True,
            },
        )

    @across_elections
    async def delete_topic(self, name: str) -> None:
        self._check_can_commit()
        info = self._topic(name)
        await self._propose(cmd.DELETE_TOPIC, {"name": name, "topic_id": info.topic_id.bytes})

    @across_elections
    async def delete_topic_by_id(self, topic_id: uuid.UUID) -> str:
        """Delete by id (DeleteTopics v6+); returns the deleted topic's name."""
        self._check_can_commit()
        info = self._state.topics_by_id.get(topic_id)
        if info is None:
            raise ControllerError(UNKNOWN_TOPIC_ID, f"Unknown topic id {topic_id}")
        await self._propose(cmd.DELETE_TOPIC, {"name": info.name, "topic_id": topic_id.bytes})
        return info.name

    @across_elections
    async def create_partitions(
        self,
        name: str,
        new_total: int,
        assignments: Mapping[int, Sequence[int]] | None = None,
        validate_only: bool = False,
    ) -> TopicInfo:
        """Grow `name` to `new_total` partitions. `assignments` maps each new partition
        (numbered from the current count) to its replicas."""
        self._check_can_commit()
        state = self._state
        info = self._topic(name)
        current = len(info.partitions)
        if new_total < current:
            raise ControllerError(
                INVALID_PARTITIONS,
                f"Topic currently has {current} partitions, which is higher than the "
                f"requested {new_total}.",
            )
        if new_total == current:
            raise ControllerError(INVALID_PARTITIONS, f"Topic already has {current} partitions.")
        check_partition_count(new_total, self.config.max_partitions_per_topic)
        replication_factor = len(info.partitions[0].replicas)
        count = new_total - current
        if assignments:
            if len(assignments) != count:
                raise ControllerError(
                    INVALID_REQUEST if len(assignments) > count else INVALID_PARTITIONS,
                    f"Increasing the number of partitions by {count} but {len(assignments)} "
                    "assignments provided.",
                )
            replicas = check_manual_assignment(
                assignments, current, state.brokers, replication_factor
            )
        else:
            live = state.live_brokers
            check_replication_factor(replication_factor, len(live))
            leader0 = info.partitions[0].leader
            start = live.index(leader0) if leader0 in live else 0
            replicas = place_replicas(
                live, _racks(state), current, count, replication_factor, start
            )
        isrs = [initial_isr(r, state.brokers, current + i) for i, r in enumerate(replicas)]
        if validate_only:
            added = tuple(
                PartitionInfo(current + i, isr[0], r, isr)
                for i, (r, isr) in enumerate(zip(replicas, isrs, strict=True))
            )
            return TopicInfo(info.name, info.topic_id, info.partitions + added, info.configs)
        return await self._propose(
            cmd.CREATE_PARTITIONS,
            {
                "name": name,
                "topic_id": info.topic_id.bytes,
                "first": current,
                "assignment": [list(r) for r in replicas],
                "active_isr": True,
            },
        )

    @across_elections
    async def set_topic_configs(
        self, name: str, configs: Mapping[str, str | None], validate_only: bool = False
    ) -> None:
        """Incremental: a value sets an override, None removes it."""
        self._check_can_commit()
        info = self._topic(name)
        to_set = {k: v for k, v in configs.items() if v is not None}
        to_delete = [k for k, v in configs.items() if v is None]
        result = {k: v for k, v in info.configs.items() if k not in to_delete}
        result.update(to_set)
        self._validate_configs(result)
        if validate_only:
            return
        await self._propose(
            cmd.ALTER_TOPIC_CONFIGS,
            {"name": name, "topic_id": info.topic_id.bytes, "set": to_set, "delete": to_delete},
        )

    @across_elections
    async def replace_topic_configs(
        self, name: str, configs: Mapping[str, str], validate_only: bool = False
    ) -> None:
        """Whole replacement (AlterConfigs): overrides not named are removed."""
        self._check_can_commit()
        info = self._topic(name)
        result = dict(configs)
        self._validate_configs(result)
        if validate_only:
            return
        await self._propose(
            cmd.ALTER_TOPIC_CONFIGS,
            {"name": name, "topic_id": info.topic_id.bytes, "set": result, "replace": True},
        )

    @across_elections
    async def set_group_configs(self, group_id: str, configs: Mapping[str, str | None]) -> None:
        """A share group's configs, incrementally: a value sets one, None removes it."""
        self._check_can_commit()
        await self._propose(
            cmd.ALTER_GROUP_CONFIGS,
            {
                "group": group_id,
                "set": {k: v for k, v in configs.items() if v is not None},
                "delete": [k for k, v in configs.items() if v is None],
            },
        )

    @across_elections
    async def set_client_metrics(self, name: str, configs: Mapping[str, str | None]) -> None:
        """A client-metrics subscription's configs, incrementally: a value sets one,
        None removes it. Validated by the caller."""
        self._check_can_commit()
        await self._propose(
            cmd.ALTER_CLIENT_METRICS,
            {
                "name": name,
                "set": {k: v for k, v in configs.items() if v is not None},
                "delete": [k for k, v in configs.items() if v is None],
            },
        )

    @across_elections
    async def set_broker_configs(self, resource: str, configs: Mapping[str, str | None]) -> None:
        """A BROKER resource's dynamic configs ("" the cluster default, else a node id),
        incrementally: a value sets one, None removes it. Validated by the caller."""
        self._check_can_commit()
        await self._propose(
            cmd.ALTER_BROKER_CONFIGS,
            {
                "resource": resource,
                "set": {k: v for k, v in configs.items() if v is not None},
                "delete": [k for k, v in configs.items() if v is None],
            },
        )

    @across_elections
    async def update_features(self, levels: Mapping[str, int]) -> None:
        """Finalize feature levels (checked by the caller against kbroker.features)."""
        self._check_can_commit()
        await self._propose(
            cmd.UPDATE_FEATURES,
            {"levels": dict(levels), "min_isr": self.config.min_insync_replicas},
        )

    async def _keep_elr_safe(self) -> None:
        """Write the ELR's cluster-level min.insync.replicas for a cluster that keeps ELRs
        without one (formatted before it was written with the cluster's first record).
        In the background: a node restarted alone starts without a quorum to commit to,
        and the next start tries again."""
        try:
            await self._propose(cmd.KEEP_ELR_SAFE, {"min_isr": self.config.min_insync_replicas})
        except ControllerError as exc:
            log.info("cluster-level min.insync.replicas for the ELR not written yet: %s", exc)

    @across_elections
    async def unregister_broker(self, node_id: int) -> None:
        """UnregisterBroker: forget a decommissioned broker (BROKER_ID_NOT_REGISTERED
        when no broker of that id is registered)."""
        self._check_can_commit()
        await self._propose(
            cmd.UNREGISTER_BROKER,
            {
                "node_id": node_id,
                "unclean": self._unclean_default,
                "min_isr": self._min_isr_default,
            },
        )

    @across_elections
    async def allocate_producer_ids(self, count: int) -> int:
        """Reserve `count` consecutive producer ids; returns the first."""
        self._check_can_commit()
        if count <= 0:
            raise ControllerError(INVALID_REQUEST, f"cannot allocate {count} producer ids")
        return await self._propose(cmd.ALLOCATE_PRODUCER_IDS, {"count": count})

    allocate_producer_id_block = allocate_producer_ids

    @across_elections
    async def alter_client_quotas(
        self,
        entries: Sequence[tuple[Sequence[tuple[str, str | None]], dict[str, float], list[str]]],
    ) -> None:
        """Replicate quota changes: (entity, values set, keys removed) per entity."""
        payload = [
            [[list(p) for p in entity], values, removed] for entity, values, removed in entries
        ]
        await self._propose(cmd.ALTER_CLIENT_QUOTAS, {"entries": payload})

    @across_elections
    async def create_acls(self, bindings: Sequence[AclBinding]) -> None:
        await self._propose(cmd.CREATE_ACLS, {"acls": [b.to_plain() for b in bindings]})

    @across_elections
    async def delete_acls(self, bindings: Sequence[AclBinding]) -> None:
        await self._propose(cmd.DELETE_ACLS, {"acls": [b.to_plain() for b in bindings]})

    @across_elections
    async def alter_scram_credentials(
        self,
        upsertions: list[tuple[str, str, bytes, int, bytes, bytes]],
        deletions: list[tuple[str, str]],
    ) -> None:
        """Replicate SCRAM credential changes: (user, mechanism, salt, iterations,
        stored key, server key) upserted, (user, mechanism) deleted."""
        await self._propose(
            cmd.ALTER_SCRAM_CREDENTIALS,
            {
                "upsertions": [list(u) for u in upsertions],
                "deletions": [list(d) for d in deletions],
            },
        )

    @across_elections
    async def put_delegation_token(self, token: DelegationToken, existing: bool = False) -> None:
        """Record a new delegation token, or (existing) a token's new expiry."""
        self._check_can_commit()
        await self._propose(
            cmd.PUT_DELEGATION_TOKEN, {"token": token.to_plain(), "existing": existing}
        )

    @across_elections
    async def remove_delegation_tokens(self, token_ids: Sequence[str]) -> None:
        """Forget delegation tokens (expired, or expired on request)."""
        self._check_can_commit()
        await self._propose(cmd.REMOVE_DELEGATION_TOKENS, {"ids": list(token_ids)})

    async def purge_expired_tokens(self, interval_s: float) -> None:
        """Run until cancelled: while this node is the active controller, remove the
        delegation tokens past their expiry every `interval_s` (Kafka's
        delegation.token.expiry.check.interval.ms)."""
        while True:
            await asyncio.sleep(interval_s)
            if not self.is_leader:
                continue
            now = time.time() * 1000
            expired = [
                t.token_id for t in self.state.delegation_tokens.values() if t.expiry_ms < now
            ]
            if expired:
                try:
                    await self.remove_delegation_tokens(expired)
                except ControllerError as exc:
                    log.info("expired delegation tokens not removed yet: %s", exc)

    # --- internals ---

    def _check_can_commit(self) -> None:
        """NOT_CONTROLLER before anything else, as Kafka answers a non-controller."""
        raft = self._raft
        if raft is None:
            raise ControllerError(NOT_CONTROLLER, "controller is not running")
        if not raft.leader_known:
            raise ControllerError(NOT_CONTROLLER, "no controller leader is known")

    def _topic(self, name: str) -> TopicInfo:
        info = self._state.topics.get(name)
        if info is None:
            raise ControllerError(
                UNKNOWN_TOPIC_OR_PARTITION, f"This server does not host this topic: {name}"
            )
        return info

    def _validate_configs(self, configs: dict[str, str]) -> None:
        validator = self.config_validator
        if validator is None:
            return
        try:
            validator(configs)
        except ControllerError:
            raise
        except Exception as e:
            raise ControllerError(INVALID_CONFIG, str(e)) from e

    async def _propose(
        self, kind: str, payload: dict[str, Any], timeout: float | None = None
    ) -> Any:
        if kind != cmd.BARRIER:
            self._check_can_commit()
        raft, loop = self._raft, self._loop
        if raft is None or loop is None:
            raise ControllerError(NOT_CONTROLLER, "controller is not running")
        fut: asyncio.Future[Any] = loop.create_future()
        self._pending.add(fut)
        live_token = self._live_token if kind == cmd.BARRIER else None

        def on_result(outcome: Any, fail_reason: int) -> None:  # on the Raft thread
            if live_token is not None and fail_reason == 0 and outcome == live_token:
                self._live = True  # before the next command applies: no event is lost
            self._call_soon(self._resolve, fut, outcome, fail_reason)

        raft.propose(kind, payload, on_result)
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for returns the result of a
        # future answered in the same loop turn as its task is cancelled, so the caller
        # never sees the cancellation (a watcher loop cancelled by stop() at the moment
        # its change committed ran on, and stop() waited for it forever).
        try:
            async with asyncio.timeout(
                self.config.commit_timeout_s if timeout is None else timeout
            ):
                return await fut
        except TimeoutError:
            raise ControllerError(
                REQUEST_TIMED_OUT, f"metadata change {kind} not committed in time"
            ) from None
        finally:
            self._pending.discard(fut)

    def _resolve(self, fut: asyncio.Future[Any], outcome: Any, fail_reason: int) -> None:
        if fut.done():
            return
        if fail_reason != 0:
            fut.set_exception(
                ControllerError(
                    NOT_CONTROLLER,
                    f"metadata change not committed: {FAIL_REASON_NAMES.get(fail_reason)}",
                )
            )
        elif isinstance(outcome, ControllerError):
            fut.set_exception(outcome)
        else:
            fut.set_result(outcome)

    def _call_soon(self, callback: Callable[..., None], *args: Any) -> None:
        loop = self._loop
        if loop is None:
            return
        with contextlib.suppress(RuntimeError):  # loop closed while the Raft thread finished
            loop.call_soon_threadsafe(callback, *args)

    def _on_load_error(self, error: BaseException) -> None:
        """On the Raft thread: this node cannot apply anything any more; fail every
        waiting change rather than let it hang until its timeout."""
        self._call_soon(self._fail_pending, f"metadata snapshot unreadable: {error!r}")

    def _fail_pending(self, reason: str) -> None:
        for fut in list(self._pending):
            if not fut.done():
                fut.set_exception(ControllerError(NOT_CONTROLLER, reason))

    def _on_applied(self, state: MetadataState, events: Sequence[MetadataEvent]) -> None:
        """Listener on the Raft thread: coalesce into one loop callback per burst, so a
        replay of thousands of entries wakes the loop once, not thousands of times."""
        with self._publish_lock:
            self._pending_state = state
            if self._live:
                self._pending_events.extend(events)
            if self._drain_scheduled:
                return
            self._drain_scheduled = True
        self._call_soon(self._drain)

    def _drain(self) -> None:
        with self._publish_lock:
            state, self._pending_state = self._pending_state, None
            events, self._pending_events = self._pending_events, []
            self._drain_scheduled = False
        if state is not None and state.version > self._state.version:
            self._state = state
        for event in events:
            for callback in list(self._subscribers):
                try:
                    callback(event)
                except Exception:
                    log.exception("metadata subscriber %r failed on %r", callback, event)
