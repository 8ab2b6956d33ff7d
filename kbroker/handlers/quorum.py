"""DescribeQuorum (KIP-595, KIP-836): the metadata quorum as its leader sees it.

kbroker's metadata log is its pysyncobj Raft log, shown as KRaft's `__cluster_metadata`
partition 0: the leader epoch is the Raft term, offsets are Raft log indexes. As a Kafka
broker forwards this request to the active controller, every node answers with the Raft
leader's view (controller.describe_quorum): each voter's log end offset and when it last
fetched and was last caught up, and the observers (broker-only nodes) replicating the
log. No leader known, or one that has just stepped down: NOT_LEADER_OR_FOLLOWER on the
partition, which clients retry, as from a KRaft controller that is not the leader.
"""

from __future__ import annotations

import base64
import uuid

from kio.schema.errors import ErrorCode

from kbroker.config.listeners import format_address
from kbroker.controller.errors import NOT_LEADER_OR_FOLLOWER, ControllerError
from kbroker.controller.quorum import ReplicaState
from kbroker.handlers.context import RequestContext
from kbroker.handlers.registry import handles
from kbroker.protocol import requests, responses
from kbroker.security.acl import CLUSTER_NAME, Operation, ResourceType

DESCRIBE_QUORUM = 55
METADATA_TOPIC = "__cluster_metadata"


def _replica(state: ReplicaState) -> responses.ReplicaState:
    # A static quorum's replicas (kraft.version 0) have no directory id, which Kafka
    # sends as Uuid.ZERO (its NO_DIRECTORY_ID); a dynamic quorum's have theirs.
    return {
        "replica_id": state.replica_id,
        "replica_directory_id": _uuid(state.directory_id),
        "log_end_offset": state.log_end_offset,
        "last_fetch_timestamp": state.last_fetch_timestamp,
        "last_caught_up_timestamp": state.last_caught_up_timestamp,
    }


def _uuid(directory_id: str) -> uuid.UUID | None:
    if not directory_id:
        return None
    padded = directory_id + "=" * (-len(directory_id) % 4)
    return uuid.UUID(bytes=base64.urlsafe_b64decode(padded))


def _directory_id(value: uuid.UUID) -> str:
    """A Kafka Uuid in its string form (URL-safe base64 without padding)."""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def _partition_error(
    partition: int, code: ErrorCode, message: str | None
) -> responses.DescribeQuorumPartitionData:
    return {
        "partition_index": partition,
        "error_code": code,
        "error_message": message,
        "leader_id": -1,
        "leader_epoch": -1,
        "high_watermark": -1,
        "current_voters": [],
        "observers": [],
    }


@handles(DESCRIBE_QUORUM, 0)
async def describe_quorum(
    ctx: RequestContext, request: requests.DescribeQuorumRequest
) -> responses.DescribeQuorumResponse:
    response: responses.DescribeQuorumResponse = {
        "error_code": ErrorCode.none,
        "error_message": None,
        "topics": [],
        "nodes": [],
    }
    if not ctx.allowed(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        response["error_code"] = ErrorCode.cluster_authorization_failed
        return response
    wanted = [(t.topic_name, p.partition_index) for t in request.topics for p in t.partitions]
    if wanted != [(METADATA_TOPIC, 0)]:
        # Kafka answers every partition asked for with the error, the request as a whole
        # without one.
        response["topics"] = [
            {
                "topic_name": t.topic_name,
                "partitions": [
                    _partition_error(p.partition_index, ErrorCode.unknown_topic_or_partition, None)
                    for p in t.partitions
                ],
            }
            for t in request.topics
        ]
        return response
    try:
        quorum = await ctx.broker.controller.describe_quorum()
    except ControllerError as exc:
        if exc.error_code != NOT_LEADER_OR_FOLLOWER:
            response["error_code"] = ErrorCode(exc.error_code)
            response["error_message"] = exc.message
            return response
        refused = _partition_error(0, ErrorCode.not_leader_or_follower, exc.message)
        response["topics"] = [{"topic_name": METADATA_TOPIC, "partitions": [refused]}]
        return response
    partition: responses.DescribeQuorumPartitionData = {
        "partition_index": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "leader_id": quorum.leader_id,
        "leader_epoch": quorum.leader_epoch,
        "high_watermark": quorum.high_watermark,
        "current_voters": [_replica(v) for v in quorum.voters],
        "observers": [_replica(o) for o in quorum.observers],
    }
    response["topics"] = [{"topic_name": METADATA_TOPIC, "partitions": [partition]}]
    listener = sorted(ctx.broker.config.controller_listeners or {"CONTROLLER"})[0]
    response["nodes"] = [
        {"node_id": e.node_id, "listeners": [{"name": listener, "host": e.host, "port": e.port}]}
        for e in quorum.endpoints
    ]
    return response


# -- AddRaftVoter and RemoveRaftVoter (KIP-853) ------------------------------------------

ADD_RAFT_VOTER = 80
REMOVE_RAFT_VOTER = 81
NO_DIRECTORY = uuid.UUID(int=0)


def _voter_change_refusal(
    ctx: RequestContext, cluster_id: str | None, valid_voter: bool, noun: str
) -> tuple[ErrorCode, str | None] | None:
    """Kafka's first checks of a voter change, in its order: ALTER on the cluster, the
    cluster id, a voter key with a directory id (and, to add one, a listener). The
    controller checks the rest (the kraft.version feature, the voter set, the new
    voter's progress) and makes the change."""
    if not ctx.allowed(Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return ErrorCode.cluster_authorization_failed, None
    state = ctx.broker.controller.state
    if cluster_id is not None and cluster_id != state.cluster_id:
        return ErrorCode.inconsistent_cluster_id, None
    if not valid_voter:
        return ErrorCode.invalid_request, f"{noun} voter request didn't include a valid voter"
    return None


def _added(code: ErrorCode, message: str | None) -> responses.AddRaftVoterResponse:
    return {"throttle_time": 0, "error_code": code, "error_message": message}


def _removed(code: ErrorCode, message: str | None) -> responses.RemoveRaftVoterResponse:
    return {"throttle_time": 0, "error_code": code, "error_message": message}


@handles(ADD_RAFT_VOTER, 0)
async def add_raft_voter(
    ctx: RequestContext, request: requests.AddRaftVoterRequest
) -> responses.AddRaftVoterResponse:
    directory = request.voter_directory_id
    valid = (
        request.voter_id >= 0
        and directory is not None
        and directory != NO_DIRECTORY
        and bool(request.listeners)
    )
    refusal = _voter_change_refusal(ctx, request.cluster_id, valid, "Add")
    if refusal is not None:
        return _added(*refusal)
    assert directory is not None
    names = ctx.broker.config.controller_listeners
    listener = next((li for li in request.listeners if li.name in names), request.listeners[0])
    address = format_address(listener.host, listener.port)
    try:
        await ctx.broker.controller.add_voter(request.voter_id, _directory_id(directory), address)
    except ControllerError as exc:
        return _added(ErrorCode(exc.error_code), exc.message)
    return _added(ErrorCode.none, None)


@handles(REMOVE_RAFT_VOTER, 0)
async def remove_raft_voter(
    ctx: RequestContext, request: requests.RemoveRaftVoterRequest
) -> responses.RemoveRaftVoterResponse:
    directory = request.voter_directory_id
    valid = request.voter_id >= 0 and directory is not None and directory != NO_DIRECTORY
    refusal = _voter_change_refusal(ctx, request.cluster_id, valid, "Remove")
    if refusal is not None:
        return _removed(*refusal)
    assert directory is not None
    try:
        await ctx.broker.controller.remove_voter(request.voter_id, _directory_id(directory))
    except ControllerError as exc:
        return _removed(ErrorCode(exc.error_code), exc.message)
    return _removed(ErrorCode.none, None)
