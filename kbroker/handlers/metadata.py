"""Metadata: brokers, topics, partition leaders; creates topics on first mention if allowed."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from kbroker.controller import ControllerError
from kbroker.controller.state import INTERNAL_TOPICS, BrokerInfo, TopicInfo
from kbroker.controller.validation import validate_topic_name
from kbroker.handlers.context import RequestContext
from kbroker.handlers.endpoints import node_address
from kbroker.handlers.registry import handles
from kbroker.handlers.topic_answers import (
    BrokersView,
    TopicAnswers,
    WrittenTopic,
    brokers_view,
    write_answer,
)
from kbroker.protocol import requests, responses
from kbroker.security.acl import CLUSTER_NAME, OPERATIONS_OMITTED, Operation, ResourceType

METADATA = 3


def describe_brokers(ctx: RequestContext) -> list[responses.MetadataResponseBroker]:
    """Live brokers, each at its address on the client's listener; as on Kafka, a
    broker without that listener is left out rather than named at a port the client
    cannot speak to."""
    brokers = sorted(ctx.broker.controller.state.brokers.values(), key=lambda b: b.node_id)
    described: list[responses.MetadataResponseBroker] = []
    listener = ctx.listener_name
    for b in brokers:
        if b.node_id != ctx.broker.node_id and b.endpoint(listener) is None:
            continue
        if not b.fenced:
            host, port = node_address(ctx, b)
            described.append({"node_id": b.node_id, "host": host, "port": port, "rack": b.rack})
    return described


def describe_topic(
    topic: TopicInfo,
    brokers: Mapping[int, BrokerInfo],
    error: ErrorCode = ErrorCode.none,
    storage_failed: tuple[int, Mapping[tuple[str, int], str]] | None = None,
) -> responses.MetadataResponseTopic:
    """A topic as Kafka's Metadata shows it: a partition without a leader carries
    LEADER_NOT_AVAILABLE, and replicas on brokers that are fenced or unknown, or whose log
    directory failed (as the controller recorded it), are offline.
    `storage_failed` is (this node, the partitions whose logs could not be made here):
    where this node should lead one of those, the partition is not offered (no leader,
    KAFKA_STORAGE_ERROR, this replica offline), as Kafka shows a partition whose log
    directory failed."""

    def offline(replica: int, partition: int) -> bool:
        b = brokers.get(replica)
        return b is None or b.replica_offline(topic.topic_id, partition)

    node, failed = storage_failed if storage_failed else (-1, {})
    name = topic.name
    # Brokers none of whose replicas is offline: a partition placed only on those (most,
    # on a healthy cluster) has no offline replica to look for, one by one.
    healthy = {n for n, b in brokers.items() if not b.fenced and not b.offline_replicas}
    partitions: list[responses.MetadataResponsePartition] = []
    for p in topic.partitions:
        error_code = ErrorCode.none if p.has_leader else ErrorCode.leader_not_available
        leader, isr = p.leader, list(p.isr)
        offline_replicas = (
            []
            if healthy.issuperset(p.replicas)
            else [r for r in p.replicas if offline(r, p.partition)]
        )
        if failed and node in p.replicas and (name, p.partition) in failed:
            offline_replicas = sorted({*offline_replicas, node})
            if leader == node:
                error_code, leader = ErrorCode.kafka_storage_error, -1
                isr = [r for r in isr if r != node]
        partitions.append(
            {
                "error_code": error_code,
                "partition_index": p.partition,
                "leader_id": leader,
                "leader_epoch": p.leader_epoch,
                "replica_nodes": list(p.replicas),
                "isr_nodes": isr,
                "offline_replicas": offline_replicas,
            }
        )
    return {
        "error_code": error,
        "name": name,
        "topic_id": topic.topic_id,
        "is_internal": name in INTERNAL_TOPICS,
        "partitions": partitions,
        "topic_authorized_operations": OPERATIONS_OMITTED,
    }


def missing_topic(
    name: str | None, topic_id: uuid.UUID | None, error: ErrorCode
) -> responses.MetadataResponseTopic:
    return {"error_code": error, "name": name, "topic_id": topic_id, "partitions": []}


def visible_controller_id(ctx: RequestContext) -> int:
    """The controller a client is told of. A client can only reach brokers, so when the
    active controller is a controller-only node this broker names itself, as a KRaft
    broker names a live broker: it forwards what a client sends the controller (here
    through the Raft log)."""
    state = ctx.broker.controller.state
    active = state.brokers.get(state.controller_id)
    if active is not None and not active.fenced:
        return state.controller_id
    return ctx.broker.node_id if state.controller_id >= 0 else -1


def _response(
    ctx: RequestContext,
    request: requests.MetadataRequest,
    topics: list[responses.MetadataResponseTopic],
) -> responses.MetadataResponse:
    state = ctx.broker.controller.state
    response: responses.MetadataResponse = {
        "throttle_time": 0,
        "brokers": describe_brokers(ctx),
        "cluster_id": state.cluster_id,
        "controller_id": visible_controller_id(ctx),
        "topics": topics,
    }
    if ctx.version < FIRST_AUTHORIZED_OPERATIONS:
        return response
    if request.include_topic_authorized_operations:
        for topic in topics:
            name = topic.get("name")
            if name and topic["error_code"] not in _NO_OPERATIONS:
                topic["topic_authorized_operations"] = ctx.authorized_operations(
                    ResourceType.TOPIC, name
                )
    # Named only when asked for (v8-v10): otherwise left at kio's default, -2**31, since
    # naming it would make every v11+ answer a description with a field of other
    # versions, which loads all Metadata schemas on first use.
    if ctx.version <= LAST_CLUSTER_OPERATIONS and request.include_cluster_authorized_operations:
        response["cluster_authorized_operations"] = cluster_operations(ctx)
    return response


def cluster_operations(ctx: RequestContext) -> int:
    """KIP-430: what the principal may do on the cluster (Metadata v8-v10 and
    DescribeCluster); none (0) for one that may not describe it, as Kafka answers."""
    if not ctx.allowed(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return 0
    return ctx.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)


# KIP-430: from v8 a Metadata request may ask for the operations the principal may do on
# each topic and (v8-v10; DescribeCluster later) on the cluster. A topic it may not
# describe, or an unknown topic id, carries none, as on Kafka.
FIRST_AUTHORIZED_OPERATIONS = 8
FIRST_TOPIC_ID_LOOKUP = 12  # v10 and v11 carry topic ids in requests, but Kafka refuses them
LAST_CLUSTER_OPERATIONS = 10
_NO_OPERATIONS = (ErrorCode.topic_authorization_failed, ErrorCode.unknown_topic_id)


# Topic entries written once per TopicInfo and brokers' view (handlers/topic_answers.py).
_WRITTEN = TopicAnswers()

if TYPE_CHECKING:  # responses' types are made only when asked for (protocol/responses.py)
    Described = WrittenTopic | responses.MetadataResponseTopic


@handles(METADATA, 0)
def metadata(
    ctx: RequestContext, request: requests.MetadataRequest
) -> responses.MetadataResponse | bytes:
    broker = ctx.broker
    state = broker.controller.state
    checking = broker.authorizer is not None
    failed = (broker.node_id, broker.durability.failed) if broker.durability.failed else None
    # Written entries serve where the answer's topics are exactly their descriptions: not
    # where a log failed here (this node's view), nor where the answer is changed after the
    # handler (the topics' authorized operations, a request quota's throttle time).
    prewriting = (
        failed is None
        and not broker.quotas.active
        and not (
            ctx.version >= FIRST_AUTHORIZED_OPERATIONS
            and request.include_topic_authorized_operations
        )
    )
    view: BrokersView = ()
    if prewriting:
        view = brokers_view(state.brokers)
        _WRITTEN.hold(len(state.topics))

    def described(topic: TopicInfo) -> Described:
        if prewriting:
            return _WRITTEN.entry(
                topic, ctx.version, view, lambda: describe_topic(topic, state.brokers)
            )
        return describe_topic(topic, state.brokers, storage_failed=failed)

    def may(operation: Operation, name: str) -> bool:
        return not checking or ctx.allowed(operation, ResourceType.TOPIC, name)

    # v0 has no null: an empty list asks for every topic (Kafka's isAllTopics).
    if request.topics is None or (ctx.version == 0 and not request.topics):
        # Topics the principal may not describe are left out, as Kafka leaves them out.
        return _answer(
            ctx,
            request,
            [described(t) for t in state.topics.values() if may(Operation.DESCRIBE, t.name)],
        )
    if ctx.version < FIRST_TOPIC_ID_LOOKUP and any(
        t.name is None or t.topic_id is not None for t in request.topics
    ):
        # Kafka refuses the request (InvalidRequestException): v10 and v11 carry topic
        # ids but look topics up by name only. Every topic answers INVALID_REQUEST, its
        # name shown as "" where null (those versions' answers cannot say null).
        return _response(
            ctx,
            request,
            [
                missing_topic(t.name or "", t.topic_id, ErrorCode.invalid_request)
                for t in request.topics
            ],
        )
    # Before v4 the request cannot say, and auto-creation is the broker's to decide.
    may_create = request.allow_auto_topic_creation and broker.config.auto_create_topics_enable
    results: list[Described | None] = []
    to_create: list[tuple[int, str]] = []
    for wanted in request.topics:
        name, topic_id = wanted.name, wanted.topic_id
        if topic_id is not None:
            # An id wins over the name: the Java admin sends its default name "" beside it.
            topic = state.topics_by_id.get(topic_id)
            if topic is not None and not may(Operation.DESCRIBE, topic.name):
                denied = ErrorCode.topic_authorization_failed
                results.append(missing_topic(None, topic_id, denied))
                continue
            results.append(
                described(topic)
                if topic
                else missing_topic(None, topic_id, ErrorCode.unknown_topic_id)
            )
            continue
        if name is None:
            results.append(missing_topic(None, None, ErrorCode.invalid_request))
            continue
        topic = state.topics.get(name)
        if checking and not may(Operation.DESCRIBE, name):
            results.append(missing_topic(name, None, ErrorCode.topic_authorization_failed))
        elif topic is not None:
            results.append(described(topic))
        elif not _valid_name(name):
            results.append(missing_topic(name, None, ErrorCode.invalid_topic_exception))
        elif may_create and checking and not _may_create(ctx, name):
            results.append(missing_topic(name, None, ErrorCode.topic_authorization_failed))
        elif may_create:
            to_create.append((len(results), name))
            results.append(None)
        else:
            results.append(missing_topic(name, None, ErrorCode.unknown_topic_or_partition))
    if not to_create:
        return _answer(ctx, request, [r for r in results if r is not None])
    return _create_then_respond(ctx, request, results, to_create)


def _answer(
    ctx: RequestContext, request: requests.MetadataRequest, topics: list[Described]
) -> responses.MetadataResponse | bytes:
    """The answer, its body written here when some topics' entries were written before."""
    descriptions = [t.description if isinstance(t, WrittenTopic) else t for t in topics]
    answer = _response(ctx, request, descriptions)
    if any(type(t) is WrittenTopic for t in topics):
        written = write_answer(ctx.version, answer, topics)
        if written is not None:
            return written
    return answer


def _may_create(ctx: RequestContext, name: str) -> bool:
    """Kafka's rule for creating a topic: CREATE on the cluster, or on the topic itself."""
    return ctx.allowed(Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME) or ctx.allowed(
        Operation.CREATE, ResourceType.TOPIC, name
    )


def _valid_name(name: str) -> bool:
    try:
        validate_topic_name(name)
    except ControllerError:
        return False
    return True


def _create_then_respond(
    ctx: RequestContext,
    request: requests.MetadataRequest,
    results: list[Described | None],
    to_create: list[tuple[int, str]],
) -> responses.MetadataResponse | bytes:
    """Auto-create topics (Kafka's auto.create.topics.enable) as Kafka 4's
    AutoTopicCreationManager does: the creation is handed to the controller and goes on
    in the background, and this answer says UNKNOWN_TOPIC_OR_PARTITION (retriable); the
    client's next Metadata finds the topic. Answering with a topic created on the spot
    would show a topic a moment after it was deleted, created again by the very
    request that asked whether it exists."""
    broker = ctx.broker
    for index, name in to_create:
        broker.auto_topics.start(
            name, broker.config.num_partitions, broker.config.default_replication_factor
        )
        results[index] = missing_topic(name, None, ErrorCode.unknown_topic_or_partition)
    return _answer(ctx, request, [r for r in results if r is not None])
