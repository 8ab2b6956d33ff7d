"""Replication throttling's parts (KIP-73): which replicas a topic's throttled-replicas
list names on a broker, and when a bound counts as exceeded. The cluster test
(compat_tests/test_cluster_reassignment.py) times a throttled move end to end."""

from __future__ import annotations

from pathlib import Path

from kbroker.broker import Broker
from kbroker.config import load_broker_config
from kbroker.replica.replication_quota import (
    EVERY_PARTITION,
    LEADER_REPLICAS,
    UNLIMITED,
    ReplicationQuota,
    throttled_partitions,
)


def test_a_broker_takes_the_pairs_that_name_it_or_every_partition_for_a_star() -> None:
    assert throttled_partitions("0:1,0:2,1:2, 3 : 2", 2) == {0, 1, 3}
    assert throttled_partitions("0:1,0:2", 3) == frozenset()
    assert throttled_partitions(" * ", 7) is EVERY_PARTITION
    assert throttled_partitions("", 1) == frozenset()
    assert throttled_partitions(None, 1) == frozenset()


def test_a_quota_reads_the_topic_list_as_it_changes() -> None:
    configs = {"t": {LEADER_REPLICAS: "0:1"}}
    quota = ReplicationQuota(1, LEADER_REPLICAS, lambda topic: configs.get(topic, {}))
    assert quota.is_throttled("t", 0)
    assert not quota.is_throttled("t", 1)
    assert not quota.is_throttled("other", 0)
    configs["t"] = {LEADER_REPLICAS: "*"}
    assert quota.is_throttled("t", 1)


def test_no_bound_is_inactive_and_a_bound_is_exceeded_until_its_bytes_leave_the_window() -> None:
    quota = ReplicationQuota(1, LEADER_REPLICAS, lambda topic: {})
    assert quota.bound == UNLIMITED and not quota.active
    quota.configure(100_000, samples=2, window_s=1.0)
    assert quota.active
    assert not quota.exceeded(now=0.0)  # nothing moved yet: the first answer goes out
    quota.record(1_000_000, now=0.0)
    assert quota.exceeded(now=0.5)
    assert quota.exceeded(now=1.9)
    assert not quota.exceeded(now=2.1)  # the sample left the two-second window
    quota.record(50_000, now=2.1)
    assert not quota.exceeded(now=2.2)  # 50 KB over the padded 1 s window: under the bound


def test_the_broker_applies_the_throttle_settings_at_start_and_when_they_change(
    tmp_path: Path,
) -> None:
    """The five settings reach what they bound: the leader and follower quotas (their
    rate and window) and the moves between log directories, from server.properties and
    again from the dynamic configs."""
    config = load_broker_config(
        None,
        [
            f"log.dirs={tmp_path / 'data'}",
            "leader.replication.throttled.rate=1000",
            "follower.replication.throttled.rate=2000",
            "replica.alter.log.dirs.io.max.bytes.per.second=3000",
            "replication.quota.window.num=4",
            "replication.quota.window.size.seconds=3",
        ],
        {},
    )
    broker = Broker(config)
    leader, follower = broker.replicas.leader_quota, broker.replicas.follower_quota
    assert (leader.bound, follower.bound, broker.logs.move_throttle.bound) == (1000, 2000, 3000)
    assert (leader.rate.samples, leader.rate.window_s) == (4, 3.0)
    assert (follower.rate.samples, follower.rate.window_s) == (4, 3.0)
    broker.controller.state.broker_configs["1"] = {
        "leader.replication.throttled.rate": "5000",
        "replica.alter.log.dirs.io.max.bytes.per.second": "6000",
    }
    broker.apply_dynamic_config()
    assert (leader.bound, follower.bound, broker.logs.move_throttle.bound) == (5000, 2000, 6000)
