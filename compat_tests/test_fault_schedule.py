"""A seeded random schedule of faults (kill -9 and restart, SIGSTOP and SIGCONT, a node
cut off from the others by its links going down and back up) against a 3-node cluster under an idempotent acks=all producer: every acknowledged record is read
back, none twice, in the order sent (Jepsen-style history check, compat_tests/history.py).

``KBROKER_FAULT_SEED`` replays a failing schedule; the seed is printed and in the message."""

from __future__ import annotations

import os
import random
import signal
import time
import uuid
from dataclasses import dataclass

from compat_tests.history import NumberedProducer, check, read_partition
from compat_tests.netns import NetnsCluster

SCHEDULE_SECONDS = 35.0


@dataclass
class Fault:
    """One node down (killed), frozen (SIGSTOP) or cut off at a time, so a majority always
    runs and reaches itself."""

    node_id: int
    kind: str  # "kill", "stop" or "cut"


def _inflict(cluster: NetnsCluster, rng: random.Random, topic: str) -> Fault:
    try:
        leader = cluster.partition(topic).leader
    except Exception:
        leader = -1
    # Half the faults hit the partition's leader, where they hurt.
    candidates = [n.node_id for n in cluster.nodes]
    node_id = leader if leader in candidates and rng.random() < 0.5 else rng.choice(candidates)
    kind = rng.choice(["kill", "stop", "cut"])
    if kind == "kill":
        cluster.kill(node_id)
    elif kind == "stop":
        os.kill(cluster.node(node_id).pid, signal.SIGSTOP)
    else:
        cluster.isolate(node_id)
    return Fault(node_id, kind)


def _repair(cluster: NetnsCluster, fault: Fault) -> None:
    if fault.kind == "kill":
        cluster.node(fault.node_id).start()
    elif fault.kind == "stop":
        os.kill(cluster.node(fault.node_id).pid, signal.SIGCONT)
    else:
        cluster.reconnect(fault.node_id)


def test_a_random_fault_schedule_loses_duplicates_and_reorders_no_acknowledged_record(
    netns_cluster: NetnsCluster,
) -> None:
    cluster = netns_cluster
    seed = int(os.environ.get("KBROKER_FAULT_SEED") or random.randrange(1 << 32))
    print(f"fault schedule seed {seed}")
    rng = random.Random(seed)
    topic = f"faults-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, 1, 3, config={"min.insync.replicas": "2"})
    producer = NumberedProducer(cluster.bootstrap, topic).start()
    schedule: list[str] = []
    fault: Fault | None = None
    began = time.monotonic()
    try:
        time.sleep(1.0)  # the schedule's input: a first healthy second
        while time.monotonic() - began < SCHEDULE_SECONDS:
            if fault is None:
                fault = _inflict(cluster, rng, topic)
                schedule.append(f"{time.monotonic() - began:.1f}s {fault.kind} {fault.node_id}")
            else:
                _repair(cluster, fault)
                schedule.append(f"{time.monotonic() - began:.1f}s heal {fault.node_id}")
                fault = None
            # A fault lasts long enough, often, for the session timeout (3 s) to fence the
            # node and move its leaderships; a healthy spell lets the ISR grow back.
            time.sleep(rng.uniform(2.0, 6.0) if fault else rng.uniform(1.0, 3.0))
    finally:
        if fault is not None and fault.kind == "stop":
            os.kill(cluster.node(fault.node_id).pid, signal.SIGCONT)
        cluster.heal()
        producer.stop()
    history = producer.history
    context = f"seed {seed}, schedule {schedule}"
    assert producer.fatal is None, f"producer fatal error {producer.fatal}; {context}"
    assert len(history.acked) > 500, f"only {len(history.acked)} acknowledged; {context}"
    values = read_partition(
        ",".join(n.bootstrap for n in cluster.live_nodes), topic, len(history.acked), timeout=60
    )
    verdict = check(history.acked, [int(v) for v in values])
    epoch = cluster.raw_metadata(topic).topics[0].partitions[0].leader_epoch
    print(f"{verdict}; failed deliveries {len(history.failed)}; leader epoch {epoch}; {context}")
    assert verdict.lost == [], f"{verdict}; {context}"
    assert verdict.duplicated == [], f"{verdict}; {context}"
    assert verdict.reordered == [], f"{verdict}; {context}"
