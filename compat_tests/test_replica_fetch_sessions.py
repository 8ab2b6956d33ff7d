"""Followers fetch in incremental fetch sessions (KIP-227), as Kafka's do: three real
nodes, each leader keeping one session per follower (its /metrics counts them and the
partitions they hold). An idle follower's Fetch names no partition, yet the leader
counts every partition of the session as fetched, so no ISR shrinks over several
replica.lag.time.max.ms; records replicate to every replica; and after kill -9 of a
leader (its sessions gone) the followers start new ones with it when it leads again."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from compat_tests.broker_process import free_ports
from compat_tests.cluster import KafkaCluster
from compat_tests.confluent_helpers import produce_all, unique_topic, watermarks
from compat_tests.metrics_scrape import Samples, sample_key, scrape

pytestmark = pytest.mark.timeout(240)

LAG_MS = 3000  # replica.lag.time.max.ms: an ISR shrinks within seconds of a silent follower
PARTITIONS = 24
SESSIONS = "kafka_server_fetchsessioncache_numincrementalfetchsessions"
CACHED = "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached"
SHRINKS = "kafka_server_replicamanager_isrshrinks_total"
LOG_END = "kafka_log_log_logendoffset"


def _start(root: Path, **overrides: str) -> tuple[KafkaCluster, dict[int, str]]:
    """Three nodes, each with /metrics on a port none of the cluster's listeners has."""
    cluster = KafkaCluster(root, overrides={"replica.lag.time.max.ms": str(LAG_MS), **overrides})
    taken = [port for n in cluster.nodes for port in (n.port, n.controller_port)]
    ports = free_ports([str(n.node_id) for n in cluster.nodes], *taken)
    http = {n.node_id: f"127.0.0.1:{ports[str(n.node_id)]}" for n in cluster.nodes}
    for node in cluster.nodes:
        node.overrides["http.listeners"] = f"http://{http[node.node_id]}"
    try:
        cluster.start()
    except BaseException:
        cluster.kill_all()
        raise
    return cluster, http


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KafkaCluster, dict]]:
    """Three nodes with their /metrics addresses; nothing is killed in it."""
    cluster, http = _start(tmp_path_factory.mktemp("sessions"))
    try:
        yield cluster, http
    finally:
        cluster.kill_all()


def _leaders(cluster: KafkaCluster, topic: str) -> dict[int, int]:
    """partition -> its leader's node id."""
    partitions = cluster.metadata(topic=topic).topics[topic].partitions
    return {index: p.leader for index, p in partitions.items()}


def _in_sessions(cluster: KafkaCluster, http: dict[int, str], topic: str) -> bool:
    """Every leader holds two follower sessions at least, holding both followers of
    each partition of `topic` it leads."""
    led: dict[int, int] = {n: 0 for n in http}
    for leader in _leaders(cluster, topic).values():
        if leader not in led:
            return False
        led[leader] += 1
    for node, address in http.items():
        samples = scrape(address)
        if samples.get(sample_key(SESSIONS), 0) < 2:
            return False
        if samples.get(sample_key(CACHED), 0) < 2 * led[node]:
            return False
    return True


def _shrinks(http: dict[int, str]) -> dict[int, float]:
    return {node: scrape(address).get(sample_key(SHRINKS), 0.0) for node, address in http.items()}


def _hold_in_sync(cluster: KafkaCluster, http: dict[int, str], topic: str, seconds: float) -> None:
    """For `seconds`, no ISR anywhere shrinks and every partition of `topic` stays full."""
    before = _shrinks(http)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        now = _shrinks(http)
        assert now == before, f"ISR shrinks while followers fetch in sessions: {before} -> {now}"
        for index, p in cluster.metadata(topic=topic).topics[topic].partitions.items():
            assert sorted(p.isrs) == sorted(p.replicas), f"{topic}-{index} ISR {p.isrs}"
        time.sleep(0.5)  # pacing: the hold is polled


def _log_ends(address: str, topic: str) -> dict[int, float]:
    samples: Samples = scrape(address)
    return {
        p: samples.get(sample_key(LOG_END, topic=topic, partition=str(p)), -1.0)
        for p in range(PARTITIONS)
    }


def _replicated(cluster: KafkaCluster, http: dict[int, str], topic: str, counts: dict) -> None:
    """Every replica of every partition holds its `counts[p]` records."""

    def everywhere() -> bool:
        return all(_log_ends(address, topic) == counts for address in http.values())

    cluster.wait_until(
        everywhere,
        30,
        f"every replica of {topic} to hold its records",
        seen=lambda: {n: _log_ends(a, topic) for n, a in http.items()},
    )


def _produce(cluster: KafkaCluster, topic: str, per_partition: dict[int, int]) -> None:
    records = [
        {"value": b"v%d" % i, "partition": p} for p, n in per_partition.items() for i in range(n)
    ]
    produce_all(cluster.bootstrap, topic, records, acks="all")


def test_idle_followers_fetch_in_sessions_and_stay_in_sync(sessions) -> None:  # type: ignore[no-untyped-def]
    cluster, http = sessions
    topic = unique_topic("fsess-idle")
    cluster.create_topic(topic, PARTITIONS, 3)
    cluster.wait_for_full_isr(topic, 30)
    cluster.wait_until(
        lambda: _in_sessions(cluster, http, topic), 30, "every follower to fetch in a session"
    )
    # Idle: incremental Fetches name no partition for several times the lag bound.
    _hold_in_sync(cluster, http, topic, 4 * LAG_MS / 1000)
    # ... in the sessions they began with: one per follower, none started over.
    assert {n: scrape(a)[sample_key(SESSIONS)] for n, a in http.items()} == {1: 2, 2: 2, 3: 2}


def test_records_replicate_through_sessions_to_every_replica(sessions) -> None:  # type: ignore[no-untyped-def]
    cluster, http = sessions
    topic = unique_topic("fsess-data")
    cluster.create_topic(topic, PARTITIONS, 3, {"min.insync.replicas": "3"})
    cluster.wait_for_full_isr(topic, 30)
    cluster.wait_until(
        lambda: _in_sessions(cluster, http, topic), 30, "every follower to fetch in a session"
    )
    # Records to some partitions only: the others stay out of the incremental Fetches.
    counts = {p: 0 for p in range(PARTITIONS)}
    for round_ in range(3):
        written = {p: 5 + round_ for p in range(round_, PARTITIONS, 5)}
        _produce(cluster, topic, written)
        for p, n in written.items():
            counts[p] += n
        _replicated(cluster, http, topic, {p: float(n) for p, n in counts.items()})
    for p in (0, 1, PARTITIONS - 1):
        assert watermarks(cluster.bootstrap, topic, p)[1] == counts[p]
    _hold_in_sync(cluster, http, topic, 2 * LAG_MS / 1000)


def test_followers_start_new_sessions_with_a_leader_killed_and_restarted(tmp_path: Path) -> None:
    # Leadership goes back to the preferred replica within a second of its return.
    cluster, http = _start(tmp_path, **{"leader.imbalance.check.interval.seconds": "1"})
    try:
        topic = unique_topic("fsess-kill")
        cluster.create_topic(topic, PARTITIONS, 3, {"min.insync.replicas": "2"})
        cluster.wait_for_full_isr(topic, 30)
        cluster.wait_until(
            lambda: _in_sessions(cluster, http, topic), 30, "every follower to fetch in a session"
        )
        preferred = _leaders(cluster, topic)
        victim = preferred[0]
        counts = {p: 3 for p in range(PARTITIONS)}
        _produce(cluster, topic, counts)

        cluster.kill(victim)  # kill -9: its sessions are gone with it
        cluster.wait_until(
            lambda: victim not in _leaders(cluster, topic).values(),
            30,
            f"leadership to leave broker {victim}",
        )
        _produce(cluster, topic, {p: 2 for p in range(PARTITIONS)})
        counts = {p: 5 for p in range(PARTITIONS)}

        cluster.node(victim).start()
        cluster.wait_until(
            lambda: _leaders(cluster, topic) == preferred,
            60,
            f"broker {victim} to lead its preferred partitions again",
            seen=lambda: _leaders(cluster, topic),
        )
        cluster.wait_for_full_isr(topic, 60)
        # The followers' old sessions with it are lost: they fetch in new ones.
        cluster.wait_until(
            lambda: _in_sessions(cluster, http, topic), 30, "every follower to fetch in a session"
        )
        led = [p for p, leader in preferred.items() if leader == victim]
        _produce(cluster, topic, {p: 4 for p in led})
        for p in led:
            counts[p] += 4
        _replicated(cluster, http, topic, {p: float(n) for p, n in counts.items()})
        _hold_in_sync(cluster, http, topic, 2 * LAG_MS / 1000)
    finally:
        cluster.kill_all()
