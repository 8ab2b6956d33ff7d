"""What /metrics, /health and /ready read of the broker running them.

The broker layer sits above this one, so the endpoint and the collectors name the broker by
this Protocol of the parts they read, never by its class.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from prometheus_client.core import Metric

    from kbroker.config import BrokerConfig
    from kbroker.controller import Controller
    from kbroker.metrics.counters import RequestCounters
    from kbroker.replica.delayed import DataWaiters
    from kbroker.replica.manager import ReplicaManager
    from kbroker.server.keep_awake import KeepAwake
    from kbroker.storage.manager import LogManager


class MeteredBroker(Protocol):
    @property
    def node_id(self) -> int: ...

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def ready(self) -> bool: ...

    @property
    def last_heartbeat_ack(self) -> float | None: ...

    @property
    def log_dirs(self) -> Sequence[Path]: ...

    @property
    def logs(self) -> LogManager: ...

    @property
    def replicas(self) -> ReplicaManager: ...

    @property
    def controller(self) -> Controller: ...

    @property
    def waiters(self) -> DataWaiters: ...

    @property
    def keep_awake(self) -> KeepAwake: ...

    @property
    def connections(self) -> Collection[object]: ...

    @property
    def counters(self) -> RequestCounters: ...

    @property
    def extra_metrics(self) -> Sequence[Callable[[], Iterable[Metric]]]: ...
