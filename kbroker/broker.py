"""The broker process: controller, logs and the Kafka listener, started and stopped together."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from kbroker import (
    __version__,
    handlers,  # noqa: F401  (registers every API handler)
)
from kbroker.config import (
    BROKER_CONFIGS,
    BrokerConfig,
    ConfigError,
    log_config_for,
    topic_config_values,
    validate_topic_configs,
)
from kbroker.config.connection_overrides import parse_ip_overrides
from kbroker.config.logger_levels import parse_levels
from kbroker.config.types import SettingRole
from kbroker.controller import Controller, ControllerError
from kbroker.controller.auto_creation import TopicAutoCreation
from kbroker.controller.errors import (
    NOT_CONTROLLER,
    REQUEST_TIMED_OUT,
    STALE_BROKER_EPOCH,
    ControllerStartError,
    NoQuorumError,
)
from kbroker.controller.events import (
    BrokerConfigsChanged,
    ClientQuotasChanged,
    FeaturesChanged,
    MetadataEvent,
    PartitionChanged,
    PartitionsCreated,
    TopicConfigsChanged,
    TopicCreated,
    TopicDeleted,
)
from kbroker.controller.state import (
    BrokerInfo,
    MetadataState,
    PartitionInfo,
    TopicInfo,
)
from kbroker.controller_node import controller_config
from kbroker.coordinator.service import GroupCoordinatorService
from kbroker.handlers.context import BrokerParts
from kbroker.log_setup import apply_log_levels
from kbroker.long_lived import PARTITIONS_BETWEEN_FREEZES, freeze_survivors
from kbroker.metrics.counters import RequestCounters
from kbroker.metrics.http import HttpEndpoint
from kbroker.metrics.loop_lag import LoopLag
from kbroker.metrics.loop_stalls import StallWatch
from kbroker.replica.delayed import DataWaiters
from kbroker.replica.fetch_sessions import FetchSessionCache
from kbroker.replica.fetcher import FetcherSettings, ReplicaFetchers
from kbroker.replica.manager import ReplicaManager
from kbroker.replica.partition import Partition
from kbroker.schemas.front import RegistryFront
from kbroker.security.acl import StandardAuthorizer, parse_super_users
from kbroker.security.inter_broker import PLAINTEXT as PLAINTEXT_LINK
from kbroker.security.inter_broker import inter_broker_security
from kbroker.security.jwks import JwksSource
from kbroker.security.listener import ListenerSecurity, listener_security
from kbroker.security.oauthbearer import BearerSettings, Validate
from kbroker.security.quotas import ClientQuotas
from kbroker.security.scram import ScramCredential
from kbroker.security.tokens import TokenCredentials, token_hmac
from kbroker.server.connection import KafkaConnection
from kbroker.server.connection_limits import ConnectionLimits, resolve_overrides
from kbroker.server.keep_awake import KeepAwake
from kbroker.server.request_memory import RequestMemory
from kbroker.share.service import ShareService
from kbroker.storage.cleaner import CleanerConfig, CompactionSettings
from kbroker.storage.log import LogConfig, PartitionLog
from kbroker.storage.manager import LOOP_SLICE_S, LogManager
from kbroker.tasks import cancel_and_wait
from kbroker.telemetry import ClientTelemetry
from kbroker.txn.service import TransactionCoordinatorService
from kbroker.txn.verification import verify_transactional_write

# More unopened partitions than this in one metadata change are opened by workers.
_OPEN_ON_LOOP = 32

log = logging.getLogger("kbroker.broker")


# How long a stopping broker waits for its leaderships to move away.
CONTROLLED_SHUTDOWN_TIMEOUT_S = 5.0


def now_ms() -> int:
    return int(time.time() * 1000)


def _raw_or_none(config: BrokerConfig, name: str) -> Any:
    try:
        return config.raw(name)
    except KeyError:
        return None


def _protected_listeners(config: BrokerConfig) -> frozenset[str]:
    """Kafka's protected listener (KIP-402): the inter-broker one, exempt from
    max.connections, when clients have another listener to fill."""
    if len(config.broker_endpoints) < 2:
        return frozenset()
    return frozenset({config.inter_broker_endpoint.name})


def _listener_connection_caps(config: BrokerConfig) -> dict[str, int]:
    """Each broker listener's ``listener.name.<listener>.max.connections``, where set."""
    caps: dict[str, int] = {}
    for endpoint in config.broker_endpoints:
        scoped = f"listener.name.{endpoint.name.lower()}.max.connections"
        if scoped in config.scoped_names():
            caps[endpoint.name] = config.raw(scoped)
    return caps


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        # The settings of the file, environment and flags; `config` adds the dynamic
        # ones of the metadata (apply_dynamic_config) and is replaced when they change.
        self.static_config = config
        self.config = config
        self.node_id: int = config.node_id
        self.max_request_bytes: int = config.socket_request_max_bytes
        self.request_memory = RequestMemory(config.queued_max_request_bytes)
        self.keep_awake = KeepAwake(config.socket_busy_poll_us / 1e6)
        self.log_dirs = [Path(d) for d in config.log_dirs]
        self.waiters = DataWaiters()
        self.logs = LogManager(
            self.log_dirs, move_threads=config.num_replica_alter_log_dirs_threads
        )
        # How the process ends when every log directory, or the metadata log directory,
        # has failed (tests replace it).
        self.halt: Callable[[int], None] = os._exit
        self._halting = False
        self.logs.all_dirs_failed = self._all_log_dirs_failed
        self.logs.metadata_dir = next(
            (str(d) for d in self.log_dirs if d == config.metadata_dir), None
        )
        self.logs.metadata_dir_failed = self._metadata_log_dir_failed
        self.replicas = ReplicaManager(self.node_id, self.logs, self.waiters, self.metadata)
        self._configure_replication_quotas()
        self.fetch_sessions = FetchSessionCache(config.max_incremental_fetch_session_cache_slots)
        self.group_coordinator = GroupCoordinatorService(self)
        self.txn_coordinator = TransactionCoordinatorService(self)
        self.share_coordinator = ShareService(self)
        self.controller = Controller(controller_config(config))
        self.controller.on_metadata_dir_failure = self._metadata_log_dir_failed
        self.controller.on_raft_stuck = self._raft_stuck
        self.connections: set[KafkaConnection] = set()
        self.connection_limits = ConnectionLimits(
            config.max_connections,
            config.max_connections_per_ip,
            resolve_overrides(parse_ip_overrides(config.max_connections_per_ip_overrides)),
            exempt_listeners=_protected_listeners(config),
            per_listener=_listener_connection_caps(config),
        )
        # Topics whose partitions are being opened off the loop (see _open_partitions).
        self._opening: dict[str, list[asyncio.Future[dict[int, str]]]] = {}
        # (topic id, partition) of the replicas assigned here when this start began.
        self._held_at_start: set[tuple[uuid.UUID, int]] = set()
        self.listener = config.listener()
        self.advertised = config.advertised_listener()
        # Built now so that a key store that does not load stops the start.
        self.listener_security: list[tuple[Any, ListenerSecurity]] = [
            (endpoint, listener_security(config, endpoint)) for endpoint in config.broker_endpoints
        ]
        # What a new connection on each listener gets; a dynamic key store or JAAS change
        # replaces an entry, so the next connection is served by it (Kafka's reload path).
        self.security_by_listener: dict[str, ListenerSecurity] = {
            endpoint.name: security for endpoint, security in self.listener_security
        }
        # The identity providers' signing keys OAUTHBEARER listeners (and the schema
        # registry's bearer tokens) are verified with, one source per JWKS URL, fetched
        # from start on.
        self.jwks_sources: dict[str, JwksSource] = {}
        self._jwks_fetching = False  # set once start() runs every source
        for _endpoint, security in self.listener_security:
            if security.bearer is not None:
                self._jwks_source(security.bearer)
        # How this broker reaches the others (replica fetches, transaction markers).
        self.inter_broker = (
            inter_broker_security(config) if config.quorum.is_cluster else PLAINTEXT_LINK
        )
        self._servers: list[asyncio.AbstractServer] = []
        self._tasks: list[asyncio.Task[Any]] = []
        self._heartbeat_task: asyncio.Task[None] | None = None
        self.registration: BrokerInfo | None = None
        self._previous_epoch = -1
        self.started_at = 0.0
        self.ready = False
        self.stopping = False
        # When the controller last acknowledged this broker (registration or heartbeat);
        # /health reports the controller unreachable once it is older than the session.
        self.last_heartbeat_ack: float | None = None
        self.counters = RequestCounters()
        self.extra_metrics: list[Any] = []  # callables returning prometheus-client families
        self.http = HttpEndpoint(self)
        self.authorizer: StandardAuthorizer | None = None
        if config.authorizer_class_name:
            self.authorizer = StandardAuthorizer(
                parse_super_users(config.super_users),
                config.allow_everyone_if_no_acl_found,
                lambda: self.controller.state.acls,
            )
        self.quotas = ClientQuotas(
            lambda: self.controller.state.client_quotas,
            config.quota_window_num,
            config.quota_window_size_seconds,
        )
        # Built now so that a registry key store that does not load stops the start.
        self.schemas = RegistryFront(self)
        # The produce-path policies the replica manager applies to a client's records.
        self.replicas.record_validation = self.schemas.service
        self.replicas.transaction_verifier = self._verify_transactional_write
        self.token_credentials = TokenCredentials()
        self.telemetry = ClientTelemetry(
            lambda: self.controller.state.client_metrics,
            config.telemetry_max_bytes,
            config.telemetry_export_max_series_per_client,
        )
        self.extra_metrics.append(self.telemetry.collect)
        self.loop_lag = LoopLag()
        self.extra_metrics.append(self.loop_lag.collect)
        self.stall_watch = StallWatch()
        self.extra_metrics.append(self.stall_watch.collect)
        self.extra_metrics.append(self.fetch_sessions.collect)
        self.auto_topics = TopicAutoCreation(self.controller)
        self.parts = BrokerParts(
            node_id=self.node_id,
            config=config,
            log_dirs=self.log_dirs,
            partitions=self.replicas,
            controller=self.controller,
            groups=self.group_coordinator,
            transactions=self.txn_coordinator,
            fetch_sessions=self.fetch_sessions,
            waiters=self.waiters,
            durability=self.logs,
            storage=self.logs,
            counters=self.counters,
            lifecycle=self,
            security=self.controller,
            authorizer=self.authorizer,
            quotas=self.quotas,
            auto_topics=self.auto_topics,
            shares=self.share_coordinator,
            schemas=self.schemas.service,
            telemetry=self.telemetry,
        )

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        started = time.monotonic()
        self.loop_lag.start(asyncio.get_running_loop())
        self.stall_watch.start(asyncio.get_running_loop())
        for directory in self.log_dirs:
            with contextlib.suppress(OSError):  # one that fails is offline, see check_directories
                directory.mkdir(parents=True, exist_ok=True)
        self.controller.config_validator = self._validate_topic_configs
        # /health, /ready and /metrics answer from the start on, so that an operator (or
        # a readiness probe) sees what a start waits for, the controller quorum above all.
        # A listener that cannot bind stops the start, as a Kafka listener does.
        await self.http.start(list(self.config.http_endpoints))
        try:
            await self._start_serving(started)
        except BaseException:
            self.stall_watch.stop()
            await self.http.stop()
            await self.controller.stop()  # started, then registration failed or cancelled
            raise

    async def _start_serving(self, started: float) -> None:
        # Kafka's broker gives up its start when it has not registered within
        # initial.broker.registration.timeout.ms; here the controller's first commit
        # (which needs a quorum) is part of that.
        timeout_s = self.config.initial_broker_registration_timeout_ms / 1000
        try:
            await self.controller.start()
        except NoQuorumError as exc:
            if self.config.quorum.is_cluster:
                raise NoQuorumError(
                    f"broker {self.node_id} could not register with the controller quorum "
                    f"within initial.broker.registration.timeout.ms ({timeout_s * 1000:.0f} ms): "
                    f"{exc}"
                ) from None
            raise
        self._held_at_start = {
            (t.topic_id, p.partition)
            for t in self.controller.state.topics.values()
            for p in t.partitions
            if self.node_id in p.replicas
        }
        self.controller.subscribe(self._on_metadata_event)
        self.apply_dynamic_config()
        self.quotas.active = bool(self.controller.state.client_quotas)
        cluster_id = self.controller.state.cluster_id
        if cluster_id is not None:
            self.logs.check_directories(cluster_id, self.node_id)
        self._previous_epoch = self.logs.take_clean_shutdown_marker()
        self.logs.load_all(self._log_config_for_partition, now_ms())
        self.registration = await self._register_at_start(started + timeout_s)
        self.last_heartbeat_ack = time.monotonic()
        if self.config.quorum.is_cluster:
            self._heartbeat_task = asyncio.create_task(self._heartbeat())
            self.replicas.fetchers = ReplicaFetchers(
                self.node_id,
                self.metadata,
                FetcherSettings.from_settings(self.config),
                self.inter_broker,
                storage_error=self.logs.dir_failures.report,
                quota=self.replicas.follower_quota,
            )
            self.replicas.isr_changes = self._alter_isr
            self.logs.dir_failure_listeners.append(self._report_offline_replicas)
            lag_ms = self.config.replica_lag_time_max_ms
            self._tasks.append(asyncio.create_task(self.replicas.run_isr_checks(lag_ms)))
            hw_ms = self.config.replica_high_watermark_checkpoint_interval_ms
            self._tasks.append(
                asyncio.create_task(self.replicas.run_high_watermark_checkpoints(hw_ms))
            )
        for topic in list(self.controller.state.topics.values()):
            self._open_partitions(topic, topic.partitions)
        if self.config.quorum.is_cluster:
            self._delete_stray_logs()
        await self.group_coordinator.start()
        await self.txn_coordinator.start()
        await self.share_coordinator.start()
        await self.schemas.start_service()
        loop = asyncio.get_running_loop()
        for source in self.jwks_sources.values():
            self._tasks.append(asyncio.create_task(source.run()))
        self._jwks_fetching = True
        for endpoint, _security in self.listener_security:
            server = await loop.create_server(
                lambda name=endpoint.name: KafkaConnection(  # type: ignore[misc]
                    self, self.security_by_listener[name]
                ),
                endpoint.bind_host,
                endpoint.port,
                reuse_address=True,
                backlog=self.config.socket_listen_backlog_size,
            )
            self._servers.append(server)
        interval = self.config.log_retention_check_interval_ms / 1000
        self._tasks.append(asyncio.create_task(self.logs.run_retention(interval)))
        self._tasks.append(asyncio.create_task(self.logs.run_flusher()))
        token_check_s = self.config.delegation_token_expiry_check_interval_ms / 1000
        self._tasks.append(asyncio.create_task(self.controller.purge_expired_tokens(token_check_s)))
        cleaner = CleanerConfig.from_settings(self.config)
        if cleaner.enabled and cleaner.threads > 0:

            def compaction_settings(plog: PartitionLog) -> CompactionSettings:
                values = topic_config_values(self.topic_overrides(plog.topic), self.config)
                return CompactionSettings.from_topic_values(values)

            self._tasks.append(
                asyncio.create_task(self.logs.run_cleaner(cleaner, compaction_settings))
            )
        await self.schemas.start_listeners()
        freeze_survivors()
        self.started_at = time.time()
        self.ready = True
        log.info(
            "kbroker %s node %d serving Kafka on %s (advertised %s), %d partitions, "
            "started in %.2fs",
            __version__,
            self.node_id,
            ", ".join(
                f"{endpoint} ({security.protocol})" for endpoint, security in self.listener_security
            ),
            ", ".join(str(e) for e in self.config.advertised_endpoints),
            len(self.replicas.hosted),
            time.monotonic() - started,
        )

    async def stop(self) -> None:
        """Hand leadership over (in a cluster), stop accepting, answer what is in flight,
        then flush and close every file."""
        self.ready = False
        if self.config.quorum.is_cluster:
            await self._controlled_shutdown()
        self.stopping = True
        await self.http.stop()
        for server in self._servers:
            server.close()
        self.waiters.wake_all()  # parked fetches answer now with what they have
        deadline = time.monotonic() + 5
        while any(c.answering for c in self.connections) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for connection in list(self.connections):
            if connection.transport is not None:
                connection.transport.close()
        await cancel_and_wait(self._tasks, what="broker tasks")
        await self.auto_topics.stop()
        self.loop_lag.stop()
        self.stall_watch.stop()
        await self.schemas.stop()
        await self.share_coordinator.stop()
        await self.txn_coordinator.stop()
        await self.group_coordinator.stop()
        await self.replicas.stop()
        self.waiters.wake_all()
        self.logs.close_all()
        if self.registration is not None:
            self.logs.write_clean_shutdown_marker(self.registration.epoch)
        await self.controller.stop()
        log.info("kbroker node %d stopped cleanly", self.node_id)

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        """A SCRAM user's stored keys, from the replicated metadata."""
        return self.controller.state.scram_credentials.get((user, mechanism))

    def token_credential(self, token_id: str, mechanism: str) -> tuple[ScramCredential, str] | None:
        """A live delegation token's SCRAM credential and owner (None: unknown, expired,
        or tokens disabled without delegation.token.secret.key)."""
        secret = self.config.delegation_token_secret_key
        token = self.controller.state.delegation_tokens.get(token_id)
        if not secret or token is None or token.expiry_ms < time.time() * 1000:
            return None
        mac = token_hmac(secret, token_id)
        return self.token_credentials.credential(token_id, mechanism, mac), token.owner

    def bearer_validator(self, security: ListenerSecurity) -> Validate | None:
        """How a new connection on this listener checks an OAUTHBEARER token."""
        bearer = security.bearer
        return None if bearer is None else self.bearer_check(bearer)

    def bearer_check(self, bearer: BearerSettings) -> Validate:
        """A token check of these settings, with the keys of their JWKS URL."""
        return bearer.validator(self._jwks_source(bearer))

    def _jwks_source(self, bearer: BearerSettings) -> JwksSource | None:
        url = bearer.jwks_url
        if not url:
            return None
        source = self.jwks_sources.get(url)
        if source is None:
            source = self.jwks_sources[url] = JwksSource(
                url, bearer.refresh_ms, bearer.backoff_ms, bearer.backoff_max_ms
            )
            if self._jwks_fetching:  # asked for after start: fetch from now on
                self._tasks.append(asyncio.create_task(source.run()))
        return source

    # -- metadata events ----------------------------------------------------------------

    def _on_metadata_event(self, event: MetadataEvent) -> None:
        if isinstance(event, TopicCreated):
            self._open_partitions(event.info, event.info.partitions)
        elif isinstance(event, PartitionsCreated):
            self._open_partitions(event.info, event.new_partitions)
        elif isinstance(event, PartitionChanged):
            # An OSError is recorded by the log manager: the partition is offline here.
            with contextlib.suppress(OSError):
                self._take_role(event.topic, event.info, self.log_config(event.topic))
        elif isinstance(event, TopicDeleted):
            self.replicas.drop_topic(event.name)
        elif isinstance(event, ClientQuotasChanged):
            self.quotas.active = event.active
        elif isinstance(event, FeaturesChanged):
            elr = self.controller.state.elr_enabled
            for partition in self.replicas.hosted.values():
                partition.elr_enabled = elr
        elif isinstance(event, BrokerConfigsChanged):
            if event.resource in ("", str(self.node_id)):
                self.apply_dynamic_config()
        elif isinstance(event, TopicConfigsChanged):
            config = self.log_config(event.name)
            min_insync = self.min_insync_replicas(event.name)
            for partition in self.replicas.hosted.values():
                if partition.topic == event.name:
                    partition.log.update_config(config)
                    partition.min_insync_replicas = min_insync

    def _open_partitions(self, topic: TopicInfo, partitions: Sequence[PartitionInfo]) -> None:
        """Take up this broker's replicas of new partitions. A few are opened at once; many
        (a topic of thousands of partitions) are opened by worker threads while the loop
        goes on serving every other client, and `partitions_opened` tells when. Those
        held before this start get no new log while a log directory is offline: the log
        manager refuses them at once."""
        config = self.log_config(topic.name)
        mine = [p for p in partitions if self.node_id in p.replicas]
        for p in mine:
            if self.logs.of_another_topic(topic.name, p.partition, topic.topic_id):
                log.warning(
                    "deleting stray log %s-%d: it belongs to an earlier topic of that name",
                    topic.name,
                    p.partition,
                )
                self.logs.delete_log(topic.name, p.partition)
        unopened = (p for p in mine if self.logs.get(topic.name, p.partition) is None)
        few = next(itertools.islice(unopened, _OPEN_ON_LOOP, None), None) is None
        # The coordinators' topics (50 partitions each by default) are opened by workers
        # too: their services look again once `partitions_opened` says they are there.
        at_once = bool(self.logs.offline_dirs) and topic.topic_id in {
            topic_id for topic_id, _ in self._held_at_start
        }
        if few or at_once:
            for p in mine:
                # An OSError is recorded by the log manager: the partition is offline here.
                with contextlib.suppress(OSError):
                    self._take_role(topic.name, p, config)
                    self.logs.stamp(topic.name, p.partition, topic.topic_id)
            return
        task = asyncio.ensure_future(self._open_in_background(topic, mine, config))
        self._opening.setdefault(topic.name, []).append(task)
        task.add_done_callback(lambda t: self._opened(topic.name, t))

    async def _open_in_background(
        self, topic: TopicInfo, partitions: list[PartitionInfo], config: LogConfig
    ) -> dict[int, str]:
        """Open the logs off the loop, then take each replica's role on it in slices;
        returns the partitions whose logs could not be made, with why."""
        started = time.monotonic()
        name = topic.name
        leads = {p.partition: p.leader_epoch for p in partitions if p.leader == self.node_id}

        def first_epoch(partition: int, plog: PartitionLog) -> None:
            # The leader epoch checkpoint is a file: written by the worker, not the loop.
            epoch = leads.get(partition)
            if epoch is not None:
                plog.begin_epoch(epoch)

        opened = await self.logs.create_many(
            name, [p.partition for p in partitions], config, prepare=first_epoch
        )
        current = self.controller.state.topics.get(name)
        if current is None or current.topic_id != topic.topic_id:  # deleted meanwhile
            for partition, plog in opened.items():
                if isinstance(plog, PartitionLog) and self.logs.get(name, partition) is plog:
                    self.logs.delete_log(name, partition)
            return {}
        failed: dict[int, str] = {}
        slice_began = time.perf_counter()
        for count, p in enumerate(partitions, 1):
            if time.perf_counter() - slice_began > LOOP_SLICE_S:
                await asyncio.sleep(0)
                slice_began = time.perf_counter()
            result = opened[p.partition]
            if isinstance(result, OSError):
                failed[p.partition] = f"{type(result).__name__}: {result}"
                continue
            latest = current.partitions[p.partition] if p.partition < len(current.partitions) else p
            self._take_role(name, latest, config)
            self.logs.stamp(name, p.partition, topic.topic_id)
            if count % PARTITIONS_BETWEEN_FREEZES == 0:
                freeze_survivors()
        freeze_survivors()
        log.info(
            "opened %d partition logs of %s in %.2fs%s",
            len(partitions) - len(failed),
            name,
            time.monotonic() - started,
            f"; {len(failed)} could not be created" if failed else "",
        )
        return failed

    def _opened(self, topic: str, task: asyncio.Future[dict[int, str]]) -> None:
        tasks = self._opening.get(topic, [])
        if task in tasks:
            tasks.remove(task)
        if not tasks:
            self._opening.pop(topic, None)
        if not task.cancelled() and task.exception() is not None:
            log.error("opening the partitions of %s failed", topic, exc_info=task.exception())

    def opening(self, topic: str) -> bool:
        """Whether workers are still opening partitions of `topic` assigned here."""
        return bool(self._opening.get(topic))

    async def partitions_opened(self, topic: str) -> dict[int, str]:
        """Wait until every partition of `topic` assigned here has a log (or failed to
        get one); returns the failed ones, partition -> why."""
        for task in list(self._opening.get(topic, [])):
            await asyncio.shield(task)
        return {p: why for (t, p), why in self.logs.failed.items() if t == topic}

    def _take_role(self, topic: str, p: PartitionInfo, config: LogConfig) -> None:
        """Become leader or follower of a partition assigned here, as the controller says;
        give up a replica a reassignment has taken away."""
        if self.node_id in p.replicas:
            self.replicas.ensure(
                topic, p, config, self.min_insync_replicas(topic), self._is_new(topic, p)
            )
            held = self.replicas.get(topic, p.partition)
            if held is not None:
                held.elr_enabled = self.controller.state.elr_enabled
        elif self.replicas.get(topic, p.partition) is not None:
            self.replicas.remove(topic, p.partition)
            # Its log is gone: assigned here again later, it starts as a new replica.
            info = self.controller.state.topics.get(topic)
            if info is not None:
                self._held_at_start.discard((info.topic_id, p.partition))

    def _is_new(self, topic: str, p: PartitionInfo) -> bool:
        """Whether the replica was assigned here only since this start (Kafka's isNew):
        one held before may have its log on an offline log directory, and must then
        stay offline rather than start again empty."""
        info = self.controller.state.topics.get(topic)
        return info is None or (info.topic_id, p.partition) not in self._held_at_start

    def _delete_stray_logs(self) -> None:
        """Logs of partitions that exist but are no longer assigned here (reassigned away
        while this broker was down), and logs recorded as belonging to a topic deleted
        while it was down: deleted at start, as Kafka deletes stray replicas. The state
        is caught up: this broker's registration went through the metadata log."""
        state = self.controller.state
        for plog in list(self.logs.logs()):
            p = state.partition(plog.topic, plog.partition)
            if p is not None and self.node_id not in p.replicas:
                log.info("deleting stray log %s-%d: not assigned here", plog.topic, plog.partition)
                self.logs.delete_log(plog.topic, plog.partition)
                continue
            info = state.topics.get(plog.topic)
            topic_id = info.topic_id if info is not None else None
            if self.logs.of_another_topic(plog.topic, plog.partition, topic_id):
                log.info(
                    "deleting stray log %s-%d: its topic was deleted", plog.topic, plog.partition
                )
                self.logs.delete_log(plog.topic, plog.partition)

    def _all_log_dirs_failed(self) -> None:
        """No log directory is left: halt at once with a non-zero status, as Kafka does
        (no clean shutdown, whose checkpoints would vouch for logs that failed; in a
        cluster the controller fences this broker when its heartbeats stop, as for a
        killed one)."""
        self._halt(
            "Shutdown broker because all log dirs in %s have failed",
            ", ".join(str(d) for d in self.log_dirs),
        )

    def _metadata_log_dir_failed(self, reason: OSError | str) -> None:
        """The metadata log directory failed (its journal or snapshot cannot be written,
        or it is also a log directory and went offline): halt at once, as Kafka does.
        The node cannot follow or change the metadata any more, and the controller
        fences it when its heartbeats stop. May be called on the Raft thread."""
        self._halt(
            "Shutdown broker because the metadata log dir %s has failed: %s",
            self.config.metadata_dir,
            reason,
        )

    def _raft_stuck(self, error: Exception) -> None:
        """The metadata Raft node stopped because its tick kept failing: halt, since the
        node can no longer follow the metadata. May be called on the Raft thread."""
        self._halt("Shutdown broker because its metadata Raft node stopped: %s", error)

    def _halt(self, message: str, *args: object) -> None:
        """One CRITICAL line, then the process ends with status 1; only the first of
        several failures halts (each would say the same)."""
        if self._halting:
            return
        self._halting = True
        log.critical(message, *args)
        for handler in logging.getLogger().handlers:
            handler.flush()
        self.halt(1)

    def _report_offline_replicas(self, lost: list[tuple[str, int]]) -> None:
        """A log directory failed under these partitions: tell the controller, which
        elects other leaders for them (Kafka's broker reports its offline log dirs)."""
        state = self.controller.state
        partitions = [(state.topics[t].topic_id, p) for t, p in lost if t in state.topics]
        if partitions:
            task = asyncio.ensure_future(self._send_offline_replicas(partitions))
            self._tasks.append(task)

    async def _send_offline_replicas(self, partitions: list[tuple[uuid.UUID, int]]) -> None:
        """Tell the controller, again every heartbeat interval until it has recorded
        them, however long it is unreachable (Kafka's broker repeats its offline log
        directories in every heartbeat until it restarts). A new registration of this
        broker names them itself, which ends the retries."""
        registered = self.registration
        epoch = registered.epoch if registered else -1
        failed = 0
        while self.registration is registered:
            try:
                await self.controller.replicas_offline(self.node_id, epoch, partitions)
                log.info("reported %d offline replicas to the controller", len(partitions))
                return
            except ControllerError as exc:
                failed += 1
                if failed == 1:
                    log.warning(
                        "reporting %d offline replicas to the controller failed (retried "
                        "every heartbeat interval): %s",
                        len(partitions),
                        exc,
                    )
            await asyncio.sleep(self.config.broker_heartbeat_interval_ms / 1000)

    def _verify_transactional_write(
        self,
        transactional_id: str | None,
        topic: str,
        partition: int,
        records: bytes | bytearray | memoryview,
    ) -> ErrorCode:
        """KIP-890: may a Produce append this transactional batch to the partition."""
        return verify_transactional_write(
            self.txn_coordinator.coordinator,
            self.config.transaction_partition_verification_enable,
            self.controller.state,
            transactional_id,
            topic,
            partition,
            records,
        )

    async def _alter_isr(self, partition: Partition, isr: tuple[int, ...]) -> PartitionInfo:
        """A led partition's ISR change, proposed to the controller (AlterPartition)."""
        topic = self.controller.state.topics.get(partition.topic)
        if topic is None:
            raise ControllerError(100, f"{partition.topic} no longer exists")
        return await self.controller.alter_partition(
            topic.topic_id,
            partition.index,
            leader=self.node_id,
            leader_epoch=partition.leader_epoch,
            partition_epoch=partition.partition_epoch,
            new_isr=isr,
        )

    # -- membership of the cluster --------------------------------------------------------

    async def _register_at_start(self, deadline: float | None = None) -> BrokerInfo:
        """Register this incarnation, retried every heartbeat interval while no controller
        is known or the change does not commit (a restarted voter often rejoins during an
        election it set off), until `deadline`, initial.broker.registration.timeout.ms
        after the start began (by default from now): Kafka's broker keeps trying for that
        long before it gives up and exits."""
        timeout_s = self.config.initial_broker_registration_timeout_ms / 1000
        if deadline is None:
            deadline = time.monotonic() + timeout_s
        interval = self.config.broker_heartbeat_interval_ms / 1000
        failed = 0
        while True:
            try:
                return await self._register()
            except ControllerError as exc:
                if exc.error_code not in (NOT_CONTROLLER, REQUEST_TIMED_OUT):
                    raise
                if time.monotonic() >= deadline:
                    raise ControllerStartError(
                        f"broker {self.node_id} could not register with the controller "
                        f"quorum within initial.broker.registration.timeout.ms "
                        f"({timeout_s * 1000:.0f} ms): {exc}"
                    ) from None
                failed += 1
                if failed == 1:
                    log.info("registration not committed yet, retrying: %s", exc)
            await asyncio.sleep(min(interval, max(0.0, deadline - time.monotonic())))

    async def _register(self) -> BrokerInfo:
        return await self.controller.register_broker(
            self.node_id,
            self.advertised.host,
            self.advertised.port,
            self.config.broker_rack,
            [(e.name, e.host, e.port) for e in self.config.advertised_endpoints],
            self._offline_replicas(),
            # this process's own incarnation when registering again, else what the
            # last clean stop recorded (-1: unclean, see take_clean_shutdown_marker)
            self.registration.epoch if self.registration else self._previous_epoch,
        )

    def _offline_replicas(self) -> list[tuple[uuid.UUID, int]]:
        """The replicas assigned here that a failed log directory keeps offline, named in
        the registration (as a KRaft broker's registration leaves an offline directory
        out), so the controller neither elects this broker for them nor keeps it in
        their ISRs."""
        return [
            (topic.topic_id, p.partition)
            for topic in self.controller.state.topics.values()
            for p in topic.partitions
            if self.node_id in p.replicas
            and self.logs.replica_offline(
                topic.name, p.partition, (topic.topic_id, p.partition) in self._held_at_start
            )
        ]

    async def _heartbeat(self) -> None:
        """Heartbeat to the active controller every broker.heartbeat.interval.ms; register
        again when the controller no longer knows this incarnation."""
        interval = self.config.broker_heartbeat_interval_ms / 1000
        timeout = self.config.broker_session_timeout_ms / 1000
        while True:
            await asyncio.sleep(interval)
            epoch = self.registration.epoch if self.registration else -1
            try:
                await self.controller.broker_heartbeat(self.node_id, epoch, timeout)
                self.last_heartbeat_ack = time.monotonic()
            except ControllerError as exc:
                if exc.error_code == STALE_BROKER_EPOCH:
                    log.warning("controller no longer knows this broker; registering again")
                    with contextlib.suppress(ControllerError):
                        self.registration = await self._register()
                        self.last_heartbeat_ack = time.monotonic()
                else:
                    log.debug("heartbeat not acknowledged: %s", exc)

    async def _controlled_shutdown(self) -> None:
        """Ask the controller to move this broker's leaderships away, then wait (bounded)
        until this broker's metadata shows it leads nothing, so clients are sent to the
        new leaders by a retriable NOT_LEADER_OR_FOLLOWER rather than a dead socket."""
        task, self._heartbeat_task = self._heartbeat_task, None
        if task is not None:
            await cancel_and_wait([task], what="heartbeat")
        if not self.config.controlled_shutdown_enable or self.registration is None:
            return
        began = time.monotonic()
        try:
            await self.controller.controlled_shutdown(
                self.node_id, self.registration.epoch, CONTROLLED_SHUTDOWN_TIMEOUT_S
            )
        except ControllerError as exc:
            log.warning("controlled shutdown not acknowledged, stopping anyway: %s", exc)
            return
        deadline = began + CONTROLLED_SHUTDOWN_TIMEOUT_S
        while self._leads_anything() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        log.info(
            "controlled shutdown: leadership moved away in %.0f ms",
            (time.monotonic() - began) * 1000,
        )
        if await self.controller.resign(max(0.1, deadline - time.monotonic())):
            log.info("controlled shutdown: the active controller role moved to another voter")

    def _leads_anything(self) -> bool:
        return any(
            p.leader == self.node_id
            for t in self.controller.state.topics.values()
            for p in t.partitions
            if len(p.replicas) > 1
        )

    # -- configs ------------------------------------------------------------------------

    def dynamic_config_for(
        self, cluster_default: dict[str, str], own: dict[str, str]
    ) -> BrokerConfig:
        """The settings this broker would run with under these dynamic values; raises
        ConfigError (Kafka's message) when they are refused, a key store that does not
        load included."""
        candidate = self.static_config.with_dynamic(cluster_default, own)
        for endpoint in candidate.broker_endpoints:
            listener_security(candidate, endpoint)
        return candidate

    def apply_dynamic_config(self) -> None:
        """Run with the dynamic configs of the metadata: the cluster default and this
        broker's own, above the static settings. Everything that read a setting once is
        given the new value: partition logs, min.insync.replicas, connection limits,
        listeners' key stores and users, log levels."""
        dynamic = self.controller.state.broker_configs
        cluster_default = dynamic.get("", {})
        own = dynamic.get(str(self.node_id), {})
        old = self.config
        if old.dynamic_layers() == (cluster_default, own):
            return
        try:
            new = self.static_config.with_dynamic(cluster_default, own)
        except ConfigError as exc:
            log.error("dynamic broker configs not applied, keeping the previous ones: %s", exc)
            return
        if new.dynamic_layers() == old.dynamic_layers():
            return
        names = {*BROKER_CONFIGS, *old.scoped_names(), *new.scoped_names()}
        changed = sorted(n for n in names if _raw_or_none(old, n) != _raw_or_none(new, n))
        self.config = new
        object.__setattr__(self.parts, "config", new)
        for partition in self.replicas.hosted.values():
            partition.log.update_config(self.log_config(partition.topic))
            partition.min_insync_replicas = self.min_insync_replicas(partition.topic)
        limits = self.connection_limits
        limits.max_connections = new.max_connections
        limits.max_per_ip = new.max_connections_per_ip
        limits.per_ip_overrides = resolve_overrides(
            parse_ip_overrides(new.max_connections_per_ip_overrides)
        )
        limits.per_listener = _listener_connection_caps(new)
        for endpoint in new.broker_endpoints:
            try:
                self.security_by_listener[endpoint.name] = listener_security(new, endpoint)
            except ConfigError as exc:
                log.error(
                    "listener %s keeps its previous security settings: %s", endpoint.name, exc
                )
        if any(".ssl." in f".{n}" for n in changed):
            try:
                self.inter_broker.reload_tls(new)
            except ConfigError as exc:
                log.error("the inter-broker client keeps its previous TLS settings: %s", exc)
        self._configure_replication_quotas()
        cleaner = self.logs.cleaner
        if cleaner is not None and any(n.startswith("log.cleaner.") for n in changed):
            cleaner.reconfigure(CleanerConfig.from_settings(new))
        if {"logging.level", "logging.levels"} & set(changed):
            apply_log_levels(new.logging_level, parse_levels(new.logging_levels))
        inert = [
            n
            for n in changed
            if n in BROKER_CONFIGS and BROKER_CONFIGS[n].role is SettingRole.INERT
        ]
        log.info(
            "dynamic broker configs applied: %s%s",
            ", ".join(changed) or "none changed",
            f" ({', '.join(inert)} inert in kbroker: stored, changing nothing)" if inert else "",
        )

    def _configure_replication_quotas(self) -> None:
        """leader/follower.replication.throttled.rate and the bound on moves between log
        directories, as this broker's config has them."""
        config = self.config
        self.logs.move_throttle.bound = config.replica_alter_log_dirs_io_max_bytes_per_second
        samples = config.replication_quota_window_num
        window = float(config.replication_quota_window_size_seconds)
        self.replicas.leader_quota.configure(
            config.leader_replication_throttled_rate, samples, window
        )
        self.replicas.follower_quota.configure(
            config.follower_replication_throttled_rate, samples, window
        )

    def metadata(self) -> MetadataState:
        """The cluster metadata as this broker last applied it."""
        return self.controller.state

    def topic_overrides(self, topic: str) -> dict[str, str]:
        info = self.controller.state.topics.get(topic)
        return dict(info.configs) if info is not None else {}

    def log_config(self, topic: str) -> LogConfig:
        return LogConfig(**log_config_for(self.topic_overrides(topic), self.config))

    def min_insync_replicas(self, topic: str) -> int:
        """min.insync.replicas of a topic (its override, else the broker's)."""
        return int(
            topic_config_values(self.topic_overrides(topic), self.config)["min.insync.replicas"]
        )

    def _log_config_for_partition(self, topic: str, partition: int) -> LogConfig:
        return self.log_config(topic)

    @staticmethod
    def _validate_topic_configs(configs: dict[str, str]) -> None:
        try:
            validate_topic_configs(configs)
        except ConfigError as exc:
            raise ControllerError(40, str(exc)) from exc
