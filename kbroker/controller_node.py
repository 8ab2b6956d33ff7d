"""A controller-only node (process.roles=controller): a voter of the metadata quorum
that serves no Kafka API, holds no partitions and registers no broker.

KRaft deployments often run three such controllers beside the brokers. The node keeps
the metadata log, votes, and, while it is the active controller, fences silent brokers
and rebalances leadership; brokers reach it only through the Raft protocol on its
CONTROLLER listener, and clients never (Metadata names a broker as the controller).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable

from kbroker import __version__
from kbroker.config import BrokerConfig
from kbroker.config.listeners import format_address
from kbroker.controller import Controller, ControllerConfig
from kbroker.controller.errors import ControllerStartError
from kbroker.storage.meta_properties import read_meta_properties
from kbroker.tasks import cancel_and_wait

log = logging.getLogger("kbroker.controller")

RESIGN_TIMEOUT_S = 5.0


def controller_config(config: BrokerConfig) -> ControllerConfig:
    """The controller's part of the broker settings (KRaft's quorum names). A controller
    of a dynamic quorum needs its metadata directory formatted (`kbroker format`): its
    cluster id and directory id come from the meta.properties written there."""
    quorum = config.quorum
    election_max = config.controller_quorum_election_timeout_ms / 1000
    cluster_id: str | None = None
    directory_id = ""
    if quorum.dynamic:
        meta = read_meta_properties(config.metadata_dir)
        if meta is None:
            raise ControllerStartError(
                f"{config.metadata_dir} is not formatted: a controller of a dynamic quorum "
                "(controller.quorum.bootstrap.servers) starts from kbroker format "
                "(--standalone, --initial-controllers or --no-initial-controllers)"
            )
        cluster_id, directory_id = meta.cluster_id, meta.directory_id
    return ControllerConfig(
        dynamic=quorum.dynamic,
        directory_id=directory_id,
        cluster_id=cluster_id,
        node_id=quorum.node_id,
        data_dir=config.metadata_dir,
        raft_bind=quorum.bind_address,
        raft_advertised=quorum.self_address,
        peers=list(quorum.peer_addresses),
        observer=not quorum.is_voter,
        secret=quorum.secret,
        election_timeout_s=(election_max / 2, election_max),
        broker_session_timeout_s=(
            config.broker_session_timeout_ms / 1000 if quorum.is_cluster else None
        ),
        broker_heartbeat_interval_s=config.broker_heartbeat_interval_ms / 1000,
        unclean_leader_election=config.unclean_leader_election_enable,
        min_insync_replicas=config.min_insync_replicas,
        voters={v.node_id: format_address(v.host, v.port) for v in quorum.voters},
        # A controller-only node waits for its quorum for as long as it takes, as Kafka's
        # controller does; a broker gives up after initial.broker.registration.timeout.ms
        # (its whole start, the quorum's first commit included), and its process with it.
        start_timeout_s=(
            config.initial_broker_registration_timeout_ms / 1000 if quorum.is_broker else None
        ),
        leader_imbalance_check_interval_s=(
            config.leader_imbalance_check_interval_seconds
            if quorum.is_cluster and config.auto_leader_rebalance_enable
            else None
        ),
        unclean_leader_election_interval_s=(
            config.unclean_leader_election_interval_ms / 1000 if quorum.is_cluster else None
        ),
    )


class ControllerNode:
    """The process of a controller-only node: start, serve the quorum, stop."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.controller = Controller(controller_config(config))
        # How the process ends when its metadata log directory fails (tests replace it).
        self.halt: Callable[[int], None] = os._exit
        self._halting = False
        self.controller.on_metadata_dir_failure = self._metadata_log_dir_failed
        self.controller.on_raft_stuck = self._raft_stuck
        self._token_purge: asyncio.Task[None] | None = None

    def _metadata_log_dir_failed(self, reason: OSError) -> None:
        """The metadata journal or snapshot cannot be written: halt at once with one
        line, as Kafka's controller does; the other voters elect a controller."""
        self._halt(
            "Shutdown controller because the metadata log dir %s has failed: %s",
            self.config.metadata_dir,
            reason,
        )

    def _raft_stuck(self, error: Exception) -> None:
        """The Raft node stopped because its tick kept failing: halt with one line."""
        self._halt("Shutdown controller because its Raft node stopped: %s", error)

    def _halt(self, message: str, *args: object) -> None:
        if self._halting:
            return
        self._halting = True
        log.critical(message, *args)
        for handler in logging.getLogger().handlers:
            handler.flush()
        self.halt(1)

    async def start(self) -> None:
        started = time.monotonic()
        self.config.metadata_dir.mkdir(parents=True, exist_ok=True)
        if self.config.http_endpoints:
            log.warning(
                "http.listeners is not served by a controller-only node (no /metrics, "
                "/health or /ready here)"
            )
        await self.controller.start()
        token_check_s = self.config.delegation_token_expiry_check_interval_ms / 1000
        self._token_purge = asyncio.create_task(self.controller.purge_expired_tokens(token_check_s))
        log.info(
            "kbroker %s node %d serving the metadata quorum as a controller only on %s, "
            "started in %.2fs",
            __version__,
            self.config.quorum.node_id,
            self.controller.raft_address,
            time.monotonic() - started,
        )

    async def stop(self) -> None:
        if self._token_purge is not None:
            await cancel_and_wait([self._token_purge])
        if await self.controller.resign(RESIGN_TIMEOUT_S):
            log.info("the active controller role moved to another voter")
        await self.controller.stop()
        log.info("kbroker controller node %d stopped cleanly", self.config.quorum.node_id)
