"""This node's part in the metadata quorum, from KRaft's settings.

KRaft names the quorum with ``controller.quorum.voters=1@h:p,2@h:p`` (each voter's
CONTROLLER listener), says what a node does with ``process.roles`` and which listeners
are the controller's with ``controller.listener.names``. kbroker runs its Raft group
(pysyncobj) on those addresses:

- a voter (``process.roles`` holds ``controller``) is a Raft member: it binds its
  CONTROLLER listener and is known to the others by its own entry in the voters list;
- a controller-only node (``process.roles=controller``) is a voter that serves no Kafka
  API: it only has controller listeners, holds no partitions and registers no broker;
- a broker-only node (``process.roles=broker``) is a Raft *observer*, as a KRaft broker
  is: a pysyncobj read-only node that receives the committed metadata log from the
  leader without voting, and whose changes (registration, heartbeats) pysyncobj forwards
  to the leader. It needs the voters' addresses only, so
  ``controller.quorum.bootstrap.servers`` (host:port without ids) suffices for it.

A controller given ``controller.quorum.bootstrap.servers`` (and ``cluster.secret``) but no
voters joins a *dynamic* quorum (KIP-853): the voters live in the metadata log, the
first controller is formatted as its only voter (``kbroker format --standalone``), and
the others start as observers until ``AddRaftVoter`` makes them voters.

With no voters configured the node is a single-node cluster, as kbroker has always
been: a lone voter with no socket at all. kbroker's older spellings stay aliases:
``cluster.peers`` for the voters and ``controller.raft.listener`` for the Raft address.

A Raft socket is only ever opened with ``cluster.secret`` set: pysyncobj authenticates
and encrypts every message with it (Fernet), and without it would unpickle whatever a
stranger sends.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kbroker.config.listeners import Endpoint, Peer, format_address, parse_address


@dataclass(frozen=True, slots=True)
class QuorumConfig:
    """What the controller needs to join the quorum. ``voters`` empty: single node."""

    node_id: int
    is_voter: bool
    is_broker: bool
    voters: tuple[Peer, ...]
    # The Raft addresses of the voters this node dials: every voter but itself.
    peer_addresses: tuple[str, ...]
    # How the other voters know this node ("host:port" of its voters entry); None for an
    # observer and for a lone socketless voter.
    self_address: str | None
    # Where the Raft server binds (the CONTROLLER listener, wildcard allowed).
    bind_address: str | None
    secret: str | None = field(repr=False)
    # A dynamic quorum (KIP-853): the voters live in the log; peer_addresses are then the
    # bootstrap servers this node finds the quorum through.
    dynamic: bool = False

    @property
    def is_cluster(self) -> bool:
        # A lone voter of controller.quorum.voters with its Raft socket (a controller-only
        # node, or one given cluster.secret) is the quorum of brokers that observe it.
        lone_voter_serving = bool(self.voters) and self.self_address is not None
        return bool(self.peer_addresses) or not self.is_voter or self.dynamic or lone_voter_serving

    @property
    def controller_listener_unused(self) -> bool:
        """A lone voter opens no Raft socket, whatever CONTROLLER listener is configured."""
        return self.is_voter and self.bind_address is None

    @property
    def voter_ids(self) -> tuple[int, ...]:
        return tuple(sorted(v.node_id for v in self.voters))


def resolve_quorum(
    *,
    node_id: int,
    roles: list[str],
    voters: tuple[Peer, ...],
    bootstrap_servers: list[str],
    controller_endpoints: tuple[Endpoint, ...],
    raft_listener: str | None,
    secret: str | None,
) -> QuorumConfig:
    """Check the quorum settings against each other as KafkaConfig does; ValueError
    names the setting at fault first (``name: reason``)."""
    is_voter = not roles or "controller" in roles
    is_broker = not roles or "broker" in roles
    if not is_broker and not voters and not (bootstrap_servers and is_voter):
        raise ValueError(
            "controller.quorum.voters: a controller-only node (process.roles=controller) "
            "needs the quorum's voters"
        )
    bind: str | None = None
    if controller_endpoints:
        endpoint = controller_endpoints[0]
        host = endpoint.host or "0.0.0.0"
        bind = format_address(host, endpoint.port)
    if raft_listener is not None:
        host, port = parse_address(raft_listener)
        bind = format_address(host or "0.0.0.0", port)

    if not voters:
        if not is_voter:
            if not bootstrap_servers:
                raise ValueError(
                    "controller.quorum.voters: a broker-only node needs the controllers, "
                    "in controller.quorum.voters or controller.quorum.bootstrap.servers"
                )
            addresses = tuple(_address(s) for s in bootstrap_servers)
            return QuorumConfig(
                node_id, False, True, (), addresses, None, None, _need_secret(secret)
            )
        if bootstrap_servers and (secret or len(bootstrap_servers) > 1):
            # A dynamic quorum: this controller's Raft address is its CONTROLLER listener.
            secret = _need_secret(secret)
            if not controller_endpoints or bind is None:
                raise ValueError(
                    "controller.listener.names: a controller of a dynamic quorum needs a "
                    "controller listener"
                )
            endpoint = controller_endpoints[0]
            host = endpoint.host
            if not host or host in ("0.0.0.0", "::"):
                same_port = [a for a in bootstrap_servers if parse_address(a)[1] == endpoint.port]
                if len(same_port) != 1:
                    raise ValueError(
                        "controller.listener.names: a controller of a dynamic quorum needs "
                        "a host on its controller listener (the address the others dial)"
                    )
                host = parse_address(same_port[0])[0]
            self_address = format_address(host, endpoint.port)
            addresses = tuple(
                a for a in (_address(s) for s in bootstrap_servers) if a != self_address
            )
            return QuorumConfig(
                node_id, True, is_broker, (), addresses, self_address, bind, secret, dynamic=True
            )
        if len(bootstrap_servers) == 1:
            # Kafka 4's shipped server.properties: a dynamic quorum formatted
            # --standalone, this node its only voter. kbroker runs it as a lone voter.
            return QuorumConfig(node_id, True, is_broker, (), (), None, None, secret)
        # A single node; a configured Raft address still gets a socket (and a secret).
        if bind is not None and raft_listener is not None:
            return QuorumConfig(node_id, True, True, (), (), bind, bind, _need_secret(secret))
        return QuorumConfig(node_id, True, True, (), (), None, None, secret)

    ids = [v.node_id for v in voters]
    if len(set(ids)) != len(ids):
        raise ValueError("controller.quorum.voters: names a node id twice")
    own = next((v for v in voters if v.node_id == node_id), None)
    if is_voter:
        if own is None:
            raise ValueError(
                f"controller.quorum.voters: node.id {node_id} has the controller role but "
                "is not among the voters"
            )
        if len(voters) == 1 and not secret:
            # Kafka's quick-start file: a quorum of this node alone, no cluster.secret.
            # Nobody could talk to its Raft port, so it runs as kbroker's socketless lone
            # voter. Given cluster.secret it serves its socket, for brokers to observe it.
            return QuorumConfig(node_id, True, is_broker, voters, (), None, None, secret)
        self_address = format_address(own.host, own.port)
        if bind is None:
            bind = self_address
        peers = tuple(format_address(v.host, v.port) for v in voters if v.node_id != node_id)
        return QuorumConfig(
            node_id, True, is_broker, voters, peers, self_address, bind, _need_secret(secret)
        )
    if own is not None:
        raise ValueError(
            f"controller.quorum.voters: node.id {node_id} is a voter but process.roles "
            "lacks controller"
        )
    if controller_endpoints:
        raise ValueError(
            "controller.listener.names: a broker-only node must not listen on a controller listener"
        )
    peers = tuple(format_address(v.host, v.port) for v in voters)
    return QuorumConfig(node_id, False, True, voters, peers, None, None, _need_secret(secret))


def _address(text: str) -> str:
    host, port = parse_address(text)
    return format_address(host, port)


def _need_secret(secret: str | None) -> str:
    if not secret:
        raise ValueError(
            "cluster.secret: a controller quorum over the network needs a shared secret "
            "(set cluster.secret, or KBROKER_CLUSTER_SECRET in the environment, to the same "
            "value on every node)"
        )
    return secret
