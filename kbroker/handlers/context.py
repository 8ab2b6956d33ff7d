"""What a handler may use: the request's header, its connection, and the broker's parts.

A handler sees the broker through small Protocols, each saying what one concern
offers (the partitions held here, the metadata and topic administration of the
controller, the two coordinators, durability), never the whole `Broker`. The broker
builds one `BrokerParts` at start; the connection wraps it with each request's
header in a `RequestContext`. Tests build the same context around fakes of the parts
they need.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.errors import ErrorCode

from kbroker.protocol import responses
from kbroker.protocol.header import RequestHeader
from kbroker.security.acl import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AclBinding,
    Operation,
    ResourceType,
    StandardAuthorizer,
    operations_field,
)
from kbroker.security.principal import KafkaPrincipal
from kbroker.security.quotas import ClientQuotas

if TYPE_CHECKING:
    from kbroker.config import BrokerConfig
    from kbroker.controller.auto_creation import TopicAutoCreation
    from kbroker.controller.quorum import QuorumDescription
    from kbroker.controller.state import BrokerInfo, DelegationToken, MetadataState, TopicInfo
    from kbroker.coordinator.coordinator import GroupCoordinator
    from kbroker.replica.append import AppendEntry, AppendStats, DelayedProduce
    from kbroker.replica.delayed import DataWaiters
    from kbroker.replica.fetch_sessions import FetchSessionCache
    from kbroker.replica.partition import Partition
    from kbroker.replica.replication_quota import ReplicationQuota
    from kbroker.share.coordinator import ShareCoordinator
    from kbroker.share.partition import FetchAnswer, PartitionAcks
    from kbroker.storage.dir_failures import LogDirFailureChannel
    from kbroker.storage.log import PartitionLog
    from kbroker.storage.log_move import LogMove
    from kbroker.telemetry import ClientTelemetry
    from kbroker.txn.coordinator import TransactionCoordinator
    from kbroker.txn.implicit import ImplicitPartitionAdder
    from kbroker.txn.markers import LocalMarkerWriter
    from kbroker.txn.offsets import TxnOffsetStore


class Client(Protocol):
    """The connection a request came on."""

    @property
    def peer(self) -> str: ...

    @property
    def listener_name(self) -> str: ...

    @property
    def principal(self) -> KafkaPrincipal: ...

    # The client's software name and version, as its ApiVersions (v3+) gave them.
    software: tuple[str, str]

    def close(self, reason: str) -> None: ...

    def throttle(self, ms: int) -> None: ...

    def sasl_handshake(
        self, mechanism: str, version: int
    ) -> responses.SaslHandshakeResponse | Awaitable[responses.SaslHandshakeResponse]: ...

    def sasl_authenticate(
        self, token: bytes, version: int
    ) -> responses.SaslAuthenticateResponse | Awaitable[responses.SaslAuthenticateResponse]: ...


class Partitions(Protocol):
    """The partitions this broker holds a replica of (kbroker.replica.manager); what a
    request does with one goes through its `Partition`."""

    @property
    def hosted(self) -> Mapping[tuple[str, int], Partition]: ...

    @property
    def leader_quota(self) -> ReplicationQuota: ...

    def leader_throttled(self, topic: str, index: int, replica_id: int) -> bool: ...

    def get(self, topic: str, partition: int) -> Partition | None: ...

    def leader(
        self, topic: str, partition: int, current_leader_epoch: int = ...
    ) -> tuple[Partition | None, ErrorCode]: ...

    def append_records(
        self,
        entries: Sequence[AppendEntry],
        acks: int,
        timeout_ms: int | None,
        origin: int = ...,
        now_ms: int | None = ...,
        request_version: int | None = ...,
        transactional_id: str | None = ...,
        stats: AppendStats | None = ...,
    ) -> DelayedProduce: ...


class MetadataView(Protocol):
    """The latest cluster metadata the controller has applied."""

    @property
    def state(self) -> MetadataState: ...


class SecurityAdmin(MetadataView, Protocol):
    """SCRAM credentials and ACLs proposed to the controller (kbroker.controller.Controller)."""

    async def create_acls(self, bindings: Sequence[AclBinding]) -> None: ...

    async def alter_client_quotas(
        self,
        entries: Sequence[tuple[Sequence[tuple[str, str | None]], dict[str, float], list[str]]],
    ) -> None: ...

    async def delete_acls(self, bindings: Sequence[AclBinding]) -> None: ...

    async def alter_scram_credentials(
        self,
        upsertions: list[tuple[str, str, bytes, int, bytes, bytes]],
        deletions: list[tuple[str, str]],
    ) -> None: ...

    async def put_delegation_token(self, token: DelegationToken, existing: bool = ...) -> None: ...

    async def remove_delegation_tokens(self, token_ids: Sequence[str]) -> None: ...


class TopicAdmin(MetadataView, Protocol):
    """Topic changes proposed to the controller (kbroker.controller.Controller)."""

    async def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: Mapping[str, str] | None = ...,
        assignments: Mapping[int, Sequence[int]] | None = ...,
        validate_only: bool = ...,
    ) -> TopicInfo: ...

    async def delete_topic_by_id(self, topic_id: uuid.UUID) -> str: ...

    async def create_partitions(
        self,
        name: str,
        new_total: int,
        assignments: Mapping[int, Sequence[int]] | None = ...,
        validate_only: bool = ...,
    ) -> TopicInfo: ...

    async def set_topic_configs(
        self, name: str, configs: Mapping[str, str | None], validate_only: bool = ...
    ) -> None: ...

    async def replace_topic_configs(
        self, name: str, configs: Mapping[str, str], validate_only: bool = ...
    ) -> None: ...

    async def set_group_configs(self, group_id: str, configs: Mapping[str, str | None]) -> None: ...

    async def set_client_metrics(self, name: str, configs: Mapping[str, str | None]) -> None: ...

    async def set_broker_configs(
        self, resource: str, configs: Mapping[str, str | None]
    ) -> None: ...

    async def update_features(self, levels: Mapping[str, int]) -> None: ...

    async def unregister_broker(self, node_id: int) -> None: ...

    async def describe_quorum(self, timeout: float = ...) -> QuorumDescription: ...

    async def add_voter(self, node_id: int, directory_id: str, address: str) -> None: ...

    async def remove_voter(self, node_id: int, directory_id: str) -> None: ...

    async def elect_leaders(
        self, election_type: int, partitions: Sequence[tuple[str, int]] | None
    ) -> list[tuple[str, int, int, str | None]]: ...

    async def alter_partition_reassignments(
        self,
        partitions: Sequence[tuple[str, int, Sequence[int] | None]],
        allow_replication_factor_change: bool = ...,
    ) -> list[tuple[str, int, int, str | None]]: ...

    async def catch_up(self) -> None: ...


class GroupCoordination(Protocol):
    """The group coordinator of a running broker (kbroker.coordinator.service)."""

    @property
    def coordinator(self) -> GroupCoordinator: ...

    async def find_group_coordinator(
        self, group_id: str
    ) -> tuple[ErrorCode, BrokerInfo | None]: ...


class TxnCoordination(Protocol):
    """The transaction coordinator of a running broker (kbroker.txn.service)."""

    @property
    def coordinator(self) -> TransactionCoordinator: ...

    @property
    def markers(self) -> LocalMarkerWriter: ...

    @property
    def offsets(self) -> TxnOffsetStore: ...

    @property
    def adder(self) -> ImplicitPartitionAdder: ...

    async def find_coordinator(self, key: str) -> tuple[ErrorCode, BrokerInfo | None]: ...

    async def ensure_topic(self) -> ErrorCode: ...


class Durability(Protocol):
    """Group commit: when appended bytes are on disk (kbroker.storage.manager); the
    partitions whose logs could not be made or opened here, with why; and where an I/O
    error from a log goes (the failure channel takes its log directory offline)."""

    @property
    def failed(self) -> Mapping[tuple[str, int], str]: ...

    def when_durable(self, plog: PartitionLog, done: Callable[[OSError | None], None]) -> None: ...

    @property
    def dir_failures(self) -> LogDirFailureChannel: ...


class LogDirs(Protocol):
    """This broker's log directories (kbroker.storage.manager): which are offline, which
    partitions failed, the moves between directories under way, and starting one."""

    @property
    def offline_dirs(self) -> Mapping[str, str]: ...

    @property
    def failed(self) -> Mapping[tuple[str, int], str]: ...

    @property
    def moves(self) -> Mapping[tuple[str, int], LogMove]: ...

    @property
    def preferred_dirs(self) -> MutableMapping[tuple[str, int], Path]: ...

    def log_dir_of(self, plog: PartitionLog) -> Path | None: ...

    def start_move(
        self,
        topic: str,
        partition: int,
        dest_root: Path,
        swapped: Callable[[PartitionLog], None],
    ) -> None: ...


class Lifecycle(Protocol):
    """Whether the broker is shutting down (parked fetches then answer at once), and
    when the partitions of a new topic have their logs here."""

    @property
    def stopping(self) -> bool: ...

    async def partitions_opened(self, topic: str) -> dict[int, str]: ...

    def dynamic_config_for(
        self, cluster_default: dict[str, str], own: dict[str, str]
    ) -> BrokerConfig: ...


class TopicCounts(Protocol):
    """One topic's BrokerTopicMetrics, which Produce and Fetch add to."""

    messages_in: int
    bytes_in: int
    bytes_out: int


class Counters(Protocol):
    """The broker's plain request counters (kbroker.metrics.counters, read when
    scraped) that the handlers add to."""

    produced_bytes: int

    @property
    def topics(self) -> Mapping[str, TopicCounts]: ...

    def topic(self, name: str) -> TopicCounts: ...


class ShareFetching(Protocol):
    """The share-partition leader's ShareFetch and ShareAcknowledge (kbroker.share.fetch_path)."""

    async def share_fetch(
        self,
        group_id: str,
        member_id: str,
        epoch: int,
        added: list[tuple[uuid.UUID, int]],
        acks: PartitionAcks,
        forgotten: list[tuple[uuid.UUID, int]],
        max_wait_ms: int,
        max_records: int,
        max_bytes: int,
        batch_aligned: bool = ...,
        batch_size: int = ...,
    ) -> FetchAnswer: ...

    async def share_acknowledge(
        self, group_id: str, member_id: str, epoch: int, acks: PartitionAcks
    ) -> FetchAnswer: ...


class ShareStateAdmin(Protocol):
    """The group coordinator's admin operations over share groups' stored states
    (kbroker.share.admin)."""

    def state_keys(
        self, group_id: str, topics: Iterable[str] | None = ...
    ) -> list[tuple[str, uuid.UUID, int]]: ...

    async def stored_states(
        self, keys: list[tuple[str, uuid.UUID, int]]
    ) -> dict[tuple[str, uuid.UUID, int], tuple[ErrorCode, bytes | None, int]]: ...

    async def lags(
        self, group_id: str, states: dict[tuple[str, int], dict[str, Any]]
    ) -> dict[tuple[str, int], int]: ...

    async def alter_start_offsets(
        self, items: list[tuple[tuple[str, uuid.UUID, int], str, int]]
    ) -> dict[tuple[str, uuid.UUID, int], ErrorCode]: ...

    async def delete_states(
        self, keys: list[tuple[str, uuid.UUID, int]]
    ) -> dict[tuple[str, uuid.UUID, int], ErrorCode]: ...


class ShareCoordination(Protocol):
    """The share-group coordinator of a running broker (kbroker.share.service): the
    share coordinator's state service, with the fetch path and the admin paths."""

    @property
    def fetch_path(self) -> ShareFetching: ...

    @property
    def admin(self) -> ShareStateAdmin: ...

    @property
    def coordinator(self) -> ShareCoordinator: ...

    def persist(self) -> asyncio.Future[ErrorCode]: ...

    async def ready(self, group_id: str, wait_s: float = ...) -> ErrorCode: ...

    async def find_coordinator(self, key: str) -> tuple[ErrorCode, BrokerInfo | None]: ...

    async def read_here(
        self, key: tuple[str, uuid.UUID, int], leader_epoch: int
    ) -> tuple[ErrorCode, bytes | None, int]: ...

    def summary_here(
        self, key: tuple[str, uuid.UUID, int]
    ) -> tuple[ErrorCode, bytes | None, int]: ...

    async def write_here(
        self, partition: int, writes: list[tuple[tuple[str, uuid.UUID, int], bytes | None, int]]
    ) -> dict[tuple[str, uuid.UUID, int], ErrorCode]: ...

    async def initialize_here(
        self, partition: int, items: list[tuple[tuple[str, uuid.UUID, int], str, int, int]]
    ) -> dict[tuple[str, uuid.UUID, int], ErrorCode]: ...

    async def delete_here(
        self, partition: int, keys: list[tuple[str, uuid.UUID, int]]
    ) -> dict[tuple[str, uuid.UUID, int], ErrorCode]: ...


class SchemaValidation(Protocol):
    """Broker-side schema validation (kbroker.schemas): why a partition's produced
    records are refused, if they are."""

    def refuse(
        self, topic: str, records: bytes | bytearray | memoryview
    ) -> tuple[str, list[tuple[int, str]]] | None: ...


@dataclass(frozen=True, slots=True)
class BrokerParts:
    """The broker as its handlers see it, built once at start; `config` alone is
    replaced (by the broker) when dynamic broker configs change."""

    node_id: int
    config: BrokerConfig
    log_dirs: Sequence[Path]
    partitions: Partitions
    controller: TopicAdmin
    groups: GroupCoordination
    transactions: TxnCoordination
    fetch_sessions: FetchSessionCache
    waiters: DataWaiters
    durability: Durability
    storage: LogDirs
    counters: Counters
    lifecycle: Lifecycle
    security: SecurityAdmin
    authorizer: StandardAuthorizer | None
    quotas: ClientQuotas
    auto_topics: TopicAutoCreation
    shares: ShareCoordination | None = None
    schemas: SchemaValidation | None = None
    telemetry: ClientTelemetry | None = None


@dataclass(slots=True)
class RequestContext:
    """What a handler knows about a request besides its body."""

    header: RequestHeader
    broker: BrokerParts
    connection: Client

    @property
    def version(self) -> int:
        return self.header.api_version

    @property
    def client_id(self) -> str:
        return self.header.client_id or ""

    @property
    def listener_name(self) -> str:
        return self.connection.listener_name

    @property
    def client_host(self) -> str:
        host = self.connection.peer.rpartition(":")[0]
        return host.strip("[]")

    def allowed(self, operation: Operation, rtype: ResourceType, name: str) -> bool:
        """One authorization check; always True when no authorizer is configured."""
        authorizer = self.broker.authorizer
        return authorizer is None or authorizer.authorize(
            self.connection.principal, self.client_host, operation, rtype, name
        )

    def authorized_operations(self, rtype: ResourceType, name: str) -> int:
        """KIP-430: the operations on the resource the authorizer allows this principal,
        as a bit field (every one the resource type supports without an authorizer), as
        Kafka's authorizedOperations works them out."""
        supported = SUPPORTED_OPERATIONS[rtype]
        return operations_field(op for op in supported if self.allowed(op, rtype, name))

    def allowed_on_some(self, operation: Operation, rtype: ResourceType) -> bool:
        """Whether the ACLs allow ``operation`` on at least one resource of ``rtype``, existing
        or not (Kafka's authorizeByResourceType); True without an authorizer."""
        authorizer = self.broker.authorizer
        return authorizer is None or authorizer.authorize_by_resource_type(
            self.connection.principal, self.client_host, operation, rtype
        )

    @property
    def principal(self) -> KafkaPrincipal:
        return self.connection.principal

    def is_broker(self) -> bool:
        """CLUSTER_ACTION on the cluster: what Kafka asks of another broker's replica
        fetches, OffsetForLeaderEpoch and WriteTxnMarkers."""
        return self.allowed(Operation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)


async def caught_up(admin: TopicAdmin) -> MetadataState:
    """The metadata image once this node has applied every change committed so far.

    A refusal that rests on this node's image (a topic unknown, or known when it is gone)
    can be an image lagging a change made through another node a moment ago; Kafka's
    broker forwards such requests to the active controller, which has applied it. Catching
    up (one no-op through the Raft log) before refusing gives the controller's answer. With
    no quorum to catch up with, the image as it is."""
    from kbroker.controller import ControllerError

    with contextlib.suppress(ControllerError):
        await admin.catch_up()
    return admin.state
