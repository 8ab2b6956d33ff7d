"""Replication throttling's parts (KIP-73): which replicas a topic's throttled-replicas
list names on a broker, and when a bound counts as exceeded. The cluster test
(compat_tests/test_cluster_reassignment.py) times a throttled move end to end."""

from __future__ import annotations

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
