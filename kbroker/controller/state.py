"""The cluster metadata the controller replicates: brokers, topics, partitions, configs.

Every object here is frozen and never changed after it is published. A change builds new
objects and a new `MetadataState`, so a handler that holds one snapshot sees a consistent
cluster while the Raft thread applies the next command. Copying the top-level dicts costs
O(topics) per change, which is microseconds at the scale a metadata log sees.

Snapshots are written as plain data (dicts, lists, str, int, bytes) rather than pickled
classes, so a later version of these classes can still read an old snapshot.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from kbroker.security.acl import AclBinding
from kbroker.security.scram import ScramCredential


@dataclass(frozen=True, slots=True)
class DelegationToken:
    """A delegation token as Kafka's DelegationTokenRecord holds it: never its HMAC,
    which each broker derives from delegation.token.secret.key and the token id."""

    token_id: str
    owner: str  # "User:name"
    requester: str
    renewers: tuple[str, ...]
    issue_ms: int
    expiry_ms: int
    max_ms: int

    def to_plain(self) -> list[Any]:
        return [
            self.token_id,
            self.owner,
            self.requester,
            list(self.renewers),
            self.issue_ms,
            self.expiry_ms,
            self.max_ms,
        ]

    @classmethod
    def from_plain(cls, data: list[Any]) -> DelegationToken:
        return cls(data[0], data[1], data[2], tuple(data[3]), data[4], data[5], data[6])


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A registered broker. `epoch` is the metadata version its registration was applied
    at (KRaft's broker epoch): heartbeats and fencing name it, so nothing meant for an
    earlier incarnation of the broker applies to a restarted one."""

    node_id: int
    host: str
    port: int
    rack: str | None = None
    fenced: bool = False
    last_heartbeat_ms: int = 0
    epoch: int = 0
    # Set by a controlled shutdown: fenced, and heartbeats do not unfence it until it
    # registers again.
    shutting_down: bool = False
    # Every advertised listener as (name, host, port); host/port above are the
    # inter-broker one's.
    endpoints: tuple[tuple[str, str, int], ...] = ()
    # (topic id, partition) of this incarnation's replicas whose log directory failed
    # (Kafka records the broker's offline log directories): offline in Metadata on
    # every broker until the broker registers again.
    offline_replicas: frozenset[tuple[uuid.UUID, int]] = frozenset()

    def replica_offline(self, topic_id: uuid.UUID, partition: int) -> bool:
        """Whether this broker cannot serve its replica of the partition."""
        return self.fenced or (topic_id, partition) in self.offline_replicas

    def endpoint(self, listener: str) -> tuple[str, int] | None:
        """(host, port) this broker advertises on `listener`; a registration that named
        no listeners (an older snapshot) has only its inter-broker address."""
        if not self.endpoints:
            return self.host, self.port
        for name, host, port in self.endpoints:
            if name == listener:
                return host, port
        return None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition as the controller records it. While a reassignment (KIP-455) is in
    flight, `replicas` is the full set (the target replicas, then those being removed),
    `adding` the target replicas that were not replicas before and `removing` the old
    replicas the target leaves out; both are empty otherwise."""

    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader_epoch: int = 0
    partition_epoch: int = 0
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()
    # KIP-966, while eligible.leader.replicas.version >= 1: replicas out of the ISR that
    # hold every record below the high watermark (they left it while it was below
    # min.insync.replicas, when the high watermark does not move), and the ones last
    # known to, for an operator to recover from when neither ISR nor ELR has a member.
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()

    @property
    def has_leader(self) -> bool:
        return self.leader >= 0

    @property
    def is_reassigning(self) -> bool:
        return bool(self.adding or self.removing)


NO_LEADER = -1
ELR_FEATURE = "eligible.leader.replicas.version"
KRAFT_VERSION = "kraft.version"  # 1: the voters live in the log (KIP-853)
NEW_CLUSTER_FEATURES = {ELR_FEATURE: 1, "transaction.version": 2}
"""Levels a new cluster is formatted with, as Kafka 4.1+ formats one (ELR on,
transactions version 2)."""


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: tuple[PartitionInfo, ...]
    # Only the overrides set explicitly on this topic; treat as read-only.
    configs: dict[str, str] = field(default_factory=dict)


INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
"""Topics the broker writes itself; clients may read but not produce to them."""


def collision_key(name: str) -> str:
    """Kafka treats '.' and '_' as the same in metric names, so such names may not coexist."""
    return name.replace(".", "_")


@dataclass(frozen=True, slots=True)
class MetadataState:
    """One consistent version of the cluster metadata. Treat every container as read-only."""

    version: int = 0
    cluster_id: str | None = None
    controller_id: int = -1
    controller_epoch: int = 0
    next_producer_id: int = 0
    brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    topics: dict[str, TopicInfo] = field(default_factory=dict)
    topics_by_id: dict[uuid.UUID, TopicInfo] = field(default_factory=dict)
    # collision_key(name) -> name of the topic holding it
    topic_collisions: dict[str, str] = field(default_factory=dict)
    # (user, mechanism) -> salted keys; never a password (AlterUserScramCredentials)
    scram_credentials: dict[tuple[str, str], ScramCredential] = field(default_factory=dict)
    acls: tuple[AclBinding, ...] = ()  # CreateAcls / DeleteAcls, in creation order
    # AlterClientQuotas: ((entity type, name or None for the default), ...) -> {key: value}
    client_quotas: dict[tuple[tuple[str, str | None], ...], dict[str, float]] = field(
        default_factory=dict
    )
    # IncrementalAlterConfigs on GROUP resources (KIP-932 share-group configs): kept in the
    # metadata, as Kafka's ConfigRecords, so every broker leading a share-partition has them
    group_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    # IncrementalAlterConfigs on CLIENT_METRICS resources (KIP-714): subscription name ->
    # its configs (metrics, interval.ms, match), as Kafka keeps them in ConfigRecords
    client_metrics: dict[str, dict[str, str]] = field(default_factory=dict)
    # CreateDelegationToken and the renewals and expiries that followed, by token id
    delegation_tokens: dict[str, DelegationToken] = field(default_factory=dict)
    # Finalized feature levels UpdateFeatures (or a new cluster) recorded, by name; a
    # feature not here is at level 0 (metadata.version is fixed: kbroker.features)
    features: dict[str, int] = field(default_factory=dict)
    # IncrementalAlterConfigs on BROKER resources (KIP-226), as Kafka's ConfigRecords:
    # "" -> the cluster-wide defaults, "<node id>" -> one broker's own dynamic settings
    broker_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    # A dynamic quorum's voters (KIP-853's VotersRecord): node id -> (directory id,
    # "host:port" of its Raft listener). Empty for a static quorum (kraft.version 0).
    voters: dict[int, tuple[str, str]] = field(default_factory=dict)

    def partition(self, topic: str, index: int) -> PartitionInfo | None:
        info = self.topics.get(topic)
        if info is None or not 0 <= index < len(info.partitions):
            return None
        return info.partitions[index]

    def missing_replica_error(self, topic: str, index: int) -> int:
        """The error for a partition this broker holds no replica of: Kafka's
        NOT_LEADER_OR_FOLLOWER (6) when the partition exists elsewhere in the cluster,
        UNKNOWN_TOPIC_OR_PARTITION (3) when it does not exist at all."""
        return 6 if self.partition(topic, index) is not None else 3

    @property
    def elr_enabled(self) -> bool:
        """Eligible Leader Replicas (KIP-966) are kept: the feature is finalized at 1."""
        return self.features.get(ELR_FEATURE, 0) >= 1

    @property
    def live_brokers(self) -> list[int]:
        """Ids of unfenced brokers, ascending: the candidates for new replicas."""
        return sorted(b.node_id for b in self.brokers.values() if not b.fenced)


SNAPSHOT_FORMAT = 1


def state_to_plain(state: MetadataState) -> dict[str, Any]:
    return {
        "format": SNAPSHOT_FORMAT,
        "version": state.version,
        "cluster_id": state.cluster_id,
        "controller_id": state.controller_id,
        "controller_epoch": state.controller_epoch,
        "next_producer_id": state.next_producer_id,
        "brokers": [
            {
                "node_id": b.node_id,
                "host": b.host,
                "port": b.port,
                "rack": b.rack,
                "fenced": b.fenced,
                "last_heartbeat_ms": b.last_heartbeat_ms,
                "epoch": b.epoch,
                "shutting_down": b.shutting_down,
                "endpoints": [list(e) for e in b.endpoints],
                "offline_replicas": sorted([t.bytes, i] for t, i in b.offline_replicas),
            }
            for b in state.brokers.values()
        ],
        "topics": [
            {
                "name": t.name,
                "topic_id": t.topic_id.bytes,
                "configs": dict(t.configs),
                "partitions": [
                    [
                        p.partition,
                        p.leader,
                        list(p.replicas),
                        list(p.isr),
                        p.leader_epoch,
                        p.partition_epoch,
                        list(p.adding),
                        list(p.removing),
                        list(p.elr),
                        list(p.last_known_elr),
                    ]
                    for p in t.partitions
                ],
            }
            for t in state.topics.values()
        ],
        "acls": [acl.to_plain() for acl in state.acls],
        "client_quotas": [
            [[list(part) for part in entity], dict(values)]
            for entity, values in state.client_quotas.items()
        ],
        "scram_credentials": [
            [user, c.mechanism, c.salt, c.iterations, c.stored_key, c.server_key]
            for (user, _), c in state.scram_credentials.items()
        ],
        "group_configs": {g: dict(c) for g, c in state.group_configs.items()},
        "client_metrics": {n: dict(c) for n, c in state.client_metrics.items()},
        "delegation_tokens": [t.to_plain() for t in state.delegation_tokens.values()],
        "broker_configs": {b: dict(c) for b, c in state.broker_configs.items()},
        "features": dict(state.features),
        "voters": [[i, d, a] for i, (d, a) in sorted(state.voters.items())],
    }


def state_from_plain(data: dict[str, Any]) -> MetadataState:
    brokers = {
        b["node_id"]: BrokerInfo(
            node_id=b["node_id"],
            host=b["host"],
            port=b["port"],
            rack=b.get("rack"),
            fenced=b.get("fenced", False),
            last_heartbeat_ms=b.get("last_heartbeat_ms", 0),
            epoch=b.get("epoch", 0),
            shutting_down=b.get("shutting_down", False),
            endpoints=tuple((e[0], e[1], e[2]) for e in b.get("endpoints", ())),
            offline_replicas=frozenset(
                (uuid.UUID(bytes=t), i) for t, i in b.get("offline_replicas", ())
            ),
        )
        for b in data.get("brokers", [])
    }
    topics: dict[str, TopicInfo] = {}
    for t in data.get("topics", []):
        # Snapshots written before reassignments existed have six fields per partition.
        partitions = tuple(
            PartitionInfo(
                p[0],
                p[1],
                tuple(p[2]),
                tuple(p[3]),
                p[4],
                p[5],
                tuple(p[6]) if len(p) > 6 else (),
                tuple(p[7]) if len(p) > 7 else (),
                tuple(p[8]) if len(p) > 8 else (),
                tuple(p[9]) if len(p) > 9 else (),
            )
            for p in t["partitions"]
        )
        topics[t["name"]] = TopicInfo(
            name=t["name"],
            topic_id=uuid.UUID(bytes=t["topic_id"]),
            partitions=partitions,
            configs=dict(t.get("configs", {})),
        )
    return MetadataState(
        version=data.get("version", 0),
        cluster_id=data.get("cluster_id"),
        controller_id=data.get("controller_id", -1),
        controller_epoch=data.get("controller_epoch", 0),
        next_producer_id=data.get("next_producer_id", 0),
        brokers=brokers,
        topics=topics,
        topics_by_id={t.topic_id: t for t in topics.values()},
        topic_collisions={collision_key(name): name for name in topics},
        acls=tuple(AclBinding.from_plain(a) for a in data.get("acls", [])),
        client_quotas={
            tuple((str(t), n) for t, n in entity): dict(values)
            for entity, values in data.get("client_quotas", [])
        },
        scram_credentials={
            (c[0], c[1]): ScramCredential(c[1], c[2], c[3], c[4], c[5])
            for c in data.get("scram_credentials", [])
        },
        group_configs={g: dict(c) for g, c in data.get("group_configs", {}).items()},
        client_metrics={n: dict(c) for n, c in data.get("client_metrics", {}).items()},
        delegation_tokens={
            t[0]: DelegationToken.from_plain(t) for t in data.get("delegation_tokens", [])
        },
        broker_configs={b: dict(c) for b, c in data.get("broker_configs", {}).items()},
        features=dict(data.get("features", {})),
        voters={int(i): (str(d), str(a)) for i, d, a in data.get("voters", [])},
    )
