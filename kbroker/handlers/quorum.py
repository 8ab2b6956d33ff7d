"""DescribeQuorum (KIP-595): the metadata quorum's leader, epoch and replicas.

kbroker's metadata log is its pysyncobj Raft log, shown as KRaft's `__cluster_metadata`
partition 0: the leader epoch is the Raft term, offsets are Raft log indexes. A Kafka
broker forwards this request to the active controller; a kbroker node answers from its
own view, which on the active controller is complete and elsewhere names the leader,
the epoch and the high watermark, with -1 (Kafka's "unknown") for the log end offsets
of replicas it does not track.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kbroker.handlers.context import RequestContext
from kbroker.handlers.registry import handles
from kbroker.protocol import requests

DESCRIBE_QUORUM = 55
METADATA_TOPIC = "__cluster_metadata"


def _replica(node_id: int, log_end_offset: int) -> dict[str, Any]:
    return {
        "replica_id": node_id,
        "replica_directory_id": None,
        "log_end_offset": log_end_offset,
        "last_fetch_timestamp": -1,
        "last_caught_up_timestamp": -1,
    }


@handles(DESCRIBE_QUORUM, 0)
def describe_quorum(ctx: RequestContext, request: requests.DescribeQuorumRequest) -> dict[str, Any]:
    response: dict[str, Any] = {"error_code": ErrorCode.none, "error_message": None}
    response["topics"], response["nodes"] = [], []
    wanted = [(t.topic_name, p.partition_index) for t in request.topics for p in t.partitions]
    if wanted != [(METADATA_TOPIC, 0)]:
        response["error_code"] = ErrorCode.unknown_topic_or_partition
        return response
    status = ctx.broker.controller.quorum_status()
    if status is None:
        response["error_code"] = ErrorCode.broker_not_available
        return response
    partition = {
        "partition_index": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "leader_id": status.leader_id,
        "leader_epoch": status.leader_epoch,
        "high_watermark": status.high_watermark,
        "current_voters": [_replica(v.node_id, v.log_end_offset) for v in status.voters],
        "observers": [_replica(o.node_id, o.log_end_offset) for o in status.observers],
    }
    response["topics"] = [{"topic_name": METADATA_TOPIC, "partitions": [partition]}]
    quorum = ctx.broker.config.quorum
    listener = sorted(ctx.broker.config.controller_listeners or {"CONTROLLER"})[0]
    response["nodes"] = [
        {"node_id": v.node_id, "listeners": [{"name": listener, "host": v.host, "port": v.port}]}
        for v in quorum.voters
    ]
    return response
