"""A network partition, made with links cut between network namespaces (compat_tests/netns.py):
the leader of a partition, cut off from the other two nodes, stops completing acks=all
writes; the majority elects a new leader; once the links are back the old leader truncates
the tail it wrote alone and rejoins the ISR. Nothing acknowledged is lost and nothing
unacknowledged appears."""

from __future__ import annotations

import time
import uuid

from compat_tests.broker_process import stored_batches
from compat_tests.history import read_partition
from compat_tests.netns import NetnsCluster


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> list[str]:
    """acks=all through an idempotent producer; the delivery errors (none when all acked)."""
    from confluent_kafka import Producer

    errors: list[str] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "message.timeout.ms": 30000,
        }
    )

    def delivered(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    for value in values:
        producer.produce(topic, value=value, partition=0, on_delivery=delivered)
    remaining = producer.flush(40)
    return errors + [f"{remaining} undelivered"] * bool(remaining)


def _produce_on_the_wire(cluster: NetnsCluster, node_id: int, topic: str, value: bytes) -> int:
    """The error code of one acks=all Produce sent straight to `node_id` (timeout 3 s)."""
    from kbroker.admin.client import BrokerConnection, produce_fields
    from kbroker.protocol.batch import encode_batch

    node = cluster.node(node_id)
    records = bytes(encode_batch([(None, value)], int(time.time() * 1000)))
    with BrokerConnection(node.host, node.port, 15.0, "partition-test") as conn:
        response = conn.request(0, 9, **produce_fields(topic, records, timeout_ms=3000))
    return int(response.responses[0].partition_responses[0].error_code)


def _log_end(batches: list) -> int:
    return max((b.base_offset + b.last_offset_delta + 1 for b in batches), default=0)


def test_a_leader_cut_off_from_the_majority_is_replaced_and_truncates_its_divergent_tail(
    netns_cluster: NetnsCluster,
) -> None:
    cluster = netns_cluster
    topic = f"netsplit-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, 1, 3, config={"min.insync.replicas": "2"})
    before = [b"a%d" % i for i in range(100)]
    assert _produce(cluster.bootstrap, topic, before) == []
    old = cluster.partition(topic).leader
    majority = [n for n in cluster.nodes if n.node_id != old]
    majority_bootstrap = ",".join(n.bootstrap for n in majority)
    after = [b"b%d" % i for i in range(100)]
    cluster.isolate(old)
    try:
        # Alone, the old leader appends but cannot complete an acks=all write.
        unacknowledged = [_produce_on_the_wire(cluster, old, topic, b"u%d" % i) for i in range(3)]
        assert 0 not in unacknowledged, unacknowledged
        assert _log_end(stored_batches(cluster.node(old), topic)) > 100  # its divergent tail

        def elected() -> int | None:
            leader = cluster.partition(topic, 0, majority[0]).leader
            return leader if leader not in (old, -1) else None

        new = cluster.wait_until(elected, 20.0, f"the majority to elect a leader other than {old}")
        assert _produce(majority_bootstrap, topic, after) == []
    finally:
        cluster.heal()
    cluster.wait_until(
        lambda: old in cluster.partition(topic, 0, cluster.node(new)).isrs,
        30.0,
        f"broker {old} back in the ISR",
    )
    print(f"leader {old} cut off, answered {unacknowledged} alone; {new} elected")
    assert read_partition(majority_bootstrap, topic, 200) == before + after
    # The old leader's log is now the new leader's: the lone tail was truncated.
    leader_log = stored_batches(cluster.node(new), topic)
    old_log = stored_batches(cluster.node(old), topic)
    assert _log_end(old_log) == _log_end(leader_log) == 200
    assert [(b.base_offset, b.partition_leader_epoch) for b in old_log] == [
        (b.base_offset, b.partition_leader_epoch) for b in leader_log
    ]
