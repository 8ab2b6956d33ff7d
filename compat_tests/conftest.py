"""Fixtures that give compat tests a real kbroker process on loopback.

``broker`` is a fresh node per test (for tests that restart, kill or reconfigure it);
``shared_broker`` is one node per test module for tests that only need somewhere to
produce and consume (each of them uses its own uuid-named topics). ``broker_factory``
starts nodes with extra broker properties. Every process is SIGKILLed at teardown, and
a failing test gets the tail of each of its brokers' stderr in its report.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from compat_tests.broker_process import BrokerProcess, running_broker
from compat_tests.cluster import KafkaCluster, running_cluster
from compat_tests.java_driver import KAFKA4_JAR_DIR, compile_driver
from compat_tests.netns import NetnsCluster, netns_unavailable


def pytest_configure(config: pytest.Config) -> None:
    # kafka-python loads its protocol schemas with a deprecated importlib call per message type.
    config.addinivalue_line(
        "filterwarnings", "ignore::DeprecationWarning:kafka.protocol.schemas.load_json"
    )
    config.addinivalue_line("filterwarnings", "ignore:open_text is deprecated:DeprecationWarning")


class BrokerFactory:
    """Starts brokers under one directory and remembers them for teardown and reports."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.brokers: list[BrokerProcess] = []

    def start(self, **overrides: str) -> BrokerProcess:
        """Start a node; keyword names use ``_`` for ``.`` (log_flush_interval_messages)."""
        return self.start_with({k.replace("_", "."): str(v) for k, v in overrides.items()})

    def start_with(self, overrides: dict[str, str]) -> BrokerProcess:
        node = BrokerProcess(self.root / f"broker{len(self.brokers)}", dict(overrides))
        self.brokers.append(node)
        node.start()
        return node

    def kill_all(self) -> None:
        for node in self.brokers:
            node.kill()


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[BrokerFactory]:
    factory = BrokerFactory(tmp_path)
    try:
        yield factory
    finally:
        factory.kill_all()


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerProcess:
    return broker_factory.start()


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("shared-broker")) as node:
        yield node


class ClusterFactory:
    """Starts clusters under one directory (``start(size=3, **overrides)``), each killed at
    teardown; overrides name settings with ``_`` for ``.``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.clusters: list[KafkaCluster] = []

    def start(
        self,
        size: int = 3,
        controller_only: tuple[int, ...] = (),
        node_overrides: dict[int, dict[str, str]] | None = None,
        **overrides: str,
    ) -> KafkaCluster:
        settings = {k.replace("_", "."): str(v) for k, v in overrides.items()}
        cluster = KafkaCluster(
            self.root / f"cluster{len(self.clusters)}",
            size,
            settings,
            controller_only,
            node_overrides,
        )
        self.clusters.append(cluster)
        cluster.start()
        return cluster

    def kill_all(self) -> None:
        for cluster in self.clusters:
            cluster.kill_all()


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Iterator[ClusterFactory]:
    factory = ClusterFactory(tmp_path)
    try:
        yield factory
    finally:
        factory.kill_all()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """Three nodes, each a voter and a broker, shared by a test module (see cluster.py)."""
    with running_cluster(tmp_path_factory.mktemp("cluster")) as started:
        yield started


@pytest.fixture(scope="module")
def netns_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetnsCluster]:
    """Three nodes in network namespaces of their own, links between them cuttable; the
    test runs in the client namespace (see netns.py). Shared by a test module."""
    missing = netns_unavailable()
    if missing:
        pytest.skip(missing)
    cluster = NetnsCluster(tmp_path_factory.mktemp("netns"))
    try:
        with cluster.entered():
            cluster.start()
            yield cluster
    finally:
        cluster.close()


def _brokers_of(item: pytest.Item) -> list[BrokerProcess]:
    found: list[BrokerProcess] = []
    for value in getattr(item, "funcargs", {}).values():
        if isinstance(value, BrokerProcess):
            found.append(value)
        elif isinstance(value, BrokerFactory):
            found.extend(value.brokers)
        elif isinstance(value, KafkaCluster):
            found.extend(value.nodes)
        elif isinstance(value, ClusterFactory):
            found.extend(n for c in value.clusters for n in c.nodes)
    unique: dict[int, BrokerProcess] = {id(b): b for b in found}
    return list(unique.values())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for node in _brokers_of(item):
            report.sections.append((f"kbroker {node.bootstrap} stderr", node.log_tail()))


@pytest.fixture(scope="session")
def java_classpath(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The Java client driver compiled once per session (skips without a JDK or jars)."""
    return compile_driver(tmp_path_factory.mktemp("java-driver"))


@pytest.fixture(scope="session")
def java4_classpath(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The same driver compiled against kafka-clients 4.x (skips without a JDK or jars)."""
    return compile_driver(tmp_path_factory.mktemp("java4-driver"), KAFKA4_JAR_DIR)
