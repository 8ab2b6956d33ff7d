"""CreateTopics, DeleteTopics and CreatePartitions: topic changes the controller makes.

These handlers check what a request can get wrong on its own (duplicate names, an
assignment together with a partition count, bad configs, counts that do not grow) and
hand the rest to the controller, whose refusals carry Kafka's error codes. Topics of
one request are changed concurrently, each bounded by the request's timeout; a change
that outlives the timeout is answered REQUEST_TIMED_OUT but not abandoned, as in Kafka.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import logging
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Any, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from kbroker.controller import ControllerError
from kbroker.controller.state import TopicInfo
from kbroker.controller.validation import check_topic_absent, validate_topic_name
from kbroker.handlers.configs import (
    ConfigChange,
    ResourceError,
    controller_failure,
    created_topic_configs,
    validate_topic_configs,
)
from kbroker.handlers.context import BrokerParts, RequestContext, caught_up
from kbroker.handlers.registry import handles
from kbroker.protocol import requests, responses
from kbroker.security.acl import AUTHORIZATION_FAILED, CLUSTER_NAME, Operation, ResourceType

log = logging.getLogger("kbroker.admin")

CREATE_TOPICS = 19
DELETE_TOPICS = 20
CREATE_PARTITIONS = 37

CLUSTER_METADATA_TOPIC = "__cluster_metadata"
K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


class _Assignment(Protocol):
    """A manual assignment: the brokers of one partition (CreateTopics) or of the next new
    one (CreatePartitions)."""

    @property
    def broker_ids(self) -> Sequence[int]: ...


class _CreatableAssignment(_Assignment, Protocol):
    @property
    def partition_index(self) -> int: ...


class _CreatableTopic(Protocol):
    """A topic of CreateTopics, in every version."""

    @property
    def name(self) -> str: ...
    @property
    def num_partitions(self) -> int: ...
    @property
    def replication_factor(self) -> int: ...
    @property
    def assignments(self) -> Sequence[_CreatableAssignment]: ...
    @property
    def configs(self) -> Sequence[ConfigChange]: ...


class _GrownTopic(Protocol):
    """A topic of CreatePartitions, in every version."""

    @property
    def name(self) -> str: ...
    @property
    def count(self) -> int: ...
    @property
    def assignments(self) -> Sequence[_Assignment] | None: ...


def timeout_seconds(timeout: datetime.timedelta | int | None) -> float | None:
    """The request's timeout in seconds, or None for no limit (a timeout of zero or less)."""
    if isinstance(timeout, datetime.timedelta):
        seconds = timeout.total_seconds()
    else:
        seconds = (timeout or 0) / 1000
    return seconds if seconds > 0 else None


async def run_bounded(work: Awaitable[T], timeout: float | None) -> T:
    """Await `work` for at most `timeout` seconds; on expiry it goes on in the background."""
    task = asyncio.ensure_future(work)
    if timeout is None:
        return await task
    try:
        return await asyncio.wait_for(asyncio.shield(task), timeout)
    except TimeoutError:
        task.add_done_callback(_consume_result)
        raise ResourceError(ErrorCode.request_timed_out, "Request timed out.") from None


def _consume_result(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


async def guarded(work: Callable[[], Awaitable[T]], timeout: float | None) -> T | ResourceError:
    """Run one topic's change; returns its result or the ResourceError it failed with."""
    try:
        return await run_bounded(work(), timeout)
    except ResourceError as err:
        return err
    except ControllerError as exc:
        return controller_failure(exc)
    except Exception as exc:  # one topic's failure must not take the others down
        log.exception("admin request failed for one topic")
        return ResourceError(ErrorCode.unknown_server_error, str(exc))


def duplicates(names: list[K]) -> set[K]:
    """The names (or ids) a request lists more than once."""
    return {name for name, count in Counter(names).items() if count > 1}


# -- CreateTopics --------------------------------------------------------------------------


def _creation_plan(
    broker: BrokerParts, topic: _CreatableTopic
) -> tuple[int, int, dict[int, list[int]] | None]:
    """(partitions, replication factor, manual assignment) with Kafka's rules for -1: the
    broker's num.partitions and default.replication.factor stand in for -1."""
    if topic.assignments:
        if topic.replication_factor != -1:
            raise ResourceError(
                ErrorCode.invalid_request,
                "A manual partition assignment was specified, but replication factor was "
                "not set to -1.",
            )
        if topic.num_partitions != -1:
            raise ResourceError(
                ErrorCode.invalid_request,
                "A manual partition assignment was specified, but numPartitions was not set to -1.",
            )
        assignments: dict[int, list[int]] = {}
        for a in topic.assignments:
            if a.partition_index in assignments:
                raise ResourceError(
                    ErrorCode.invalid_replica_assignment,
                    f"Found multiple manual partition assignments for partition "
                    f"{a.partition_index}",
                )
            assignments[a.partition_index] = list(a.broker_ids)
        return -1, -1, assignments  # the controller takes both from the assignment
    if topic.replication_factor < -1 or topic.replication_factor == 0:
        raise ResourceError(
            ErrorCode.invalid_replication_factor,
            "Replication factor must be larger than 0, or -1 to use the default value.",
        )
    if topic.num_partitions < -1 or topic.num_partitions == 0:
        raise ResourceError(
            ErrorCode.invalid_partitions,
            "Number of partitions was set to an invalid non-positive value.",
        )
    partitions = (
        broker.config.num_partitions if topic.num_partitions == -1 else topic.num_partitions
    )
    replication = (
        broker.config.default_replication_factor
        if topic.replication_factor == -1
        else topic.replication_factor
    )
    return partitions, replication, None


def _creation_configs(topic: _CreatableTopic) -> dict[str, str]:
    nulls = [c.name for c in topic.configs if c.value is None]
    if nulls:
        raise ResourceError(
            ErrorCode.invalid_config,
            "Null value not supported for topic configs: " + ",".join(nulls),
        )
    configs = {c.name: c.value for c in topic.configs if c.value is not None}
    validate_topic_configs(configs)
    return configs


def _created(
    broker: BrokerParts, name: str, info: TopicInfo, configs: dict[str, str]
) -> responses.CreatableTopicResult:
    partitions = list(info.partitions)
    return {
        "name": name,
        "topic_id": info.topic_id,
        "error_code": ErrorCode.none,
        "error_message": None,
        "num_partitions": len(partitions),
        "replication_factor": len(partitions[0].replicas) if partitions else -1,
        "configs": created_topic_configs(broker, configs),
    }


def _create_failed(name: str, err: ResourceError) -> responses.CreatableTopicResult:
    return {
        "name": name,
        "topic_id": None,
        "error_code": err.code,
        "error_message": err.message,
        "num_partitions": -1,
        "replication_factor": -1,
        "configs": [],
    }


@handles(CREATE_TOPICS, 0)  # v0-1 through protocol.legacy_messages
async def create_topics(
    ctx: RequestContext, request: requests.CreateTopicsRequest
) -> responses.CreateTopicsResponse:
    broker = ctx.broker
    timeout = timeout_seconds(request.timeout)
    validate_only = request.validate_only
    repeated = duplicates([t.name for t in request.topics])

    async def create(topic: _CreatableTopic) -> responses.CreatableTopicResult:
        if broker.authorizer is not None and not (
            ctx.allowed(Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME)
            or ctx.allowed(Operation.CREATE, ResourceType.TOPIC, topic.name)
        ):
            raise ResourceError(ErrorCode.topic_authorization_failed, AUTHORIZATION_FAILED)
        if topic.name == CLUSTER_METADATA_TOPIC:
            raise ResourceError(
                ErrorCode.invalid_request,
                f"Creation of internal topic {CLUSTER_METADATA_TOPIC} is prohibited.",
            )
        try:
            validate_topic_name(topic.name)
            if topic.name in broker.controller.state.topics:
                # Perhaps deleted through another node a moment ago: ask the fresh image.
                check_topic_absent(await caught_up(broker.controller), topic.name)
        except ControllerError as exc:
            raise controller_failure(exc) from exc
        configs = _creation_configs(topic)
        partitions, replication, assignments = _creation_plan(broker, topic)
        info = await broker.controller.create_topic(
            topic.name,
            partitions,
            replication,
            configs,
            assignments=assignments,
            validate_only=validate_only,
        )
        if not validate_only:
            # Answered once the logs exist here (or past the timeout, as REQUEST_TIMED_OUT
            # while they are still being made); partitions whose files could not be made
            # fail the topic with KAFKA_STORAGE_ERROR.
            failed = await broker.lifecycle.partitions_opened(topic.name)
            if failed:
                partition, why = next(iter(sorted(failed.items())))
                raise ResourceError(
                    ErrorCode.kafka_storage_error,
                    f"{len(failed)} partition log(s) could not be created, "
                    f"first partition {partition}: {why}",
                )
        return _created(broker, topic.name, info, configs)

    unique = [t for t in request.topics if t.name not in repeated]
    outcomes = await asyncio.gather(
        *(guarded(functools.partial(create, t), timeout) for t in unique)
    )
    results = [
        _create_failed(t.name, out) if isinstance(out, ResourceError) else out
        for t, out in zip(unique, outcomes, strict=True)
    ]
    results += [
        _create_failed(name, ResourceError(ErrorCode.invalid_request, "Duplicate topic name."))
        for name in sorted(repeated)
    ]
    return {"throttle_time": 0, "topics": results}


# -- DeleteTopics --------------------------------------------------------------------------


def _deletion_enabled(broker: BrokerParts) -> bool:
    try:
        value = broker.config.delete_topic_enable
    except (KeyError, AttributeError, ValueError):
        return True
    if isinstance(value, str):
        return value.strip().lower() != "false"
    return value is None or bool(value)


def _deleted(
    name: str | None, topic_id: uuid.UUID | None, err: ResourceError | None = None
) -> responses.DeletableTopicResult:
    return {
        "name": name,
        "topic_id": topic_id,
        "error_code": err.code if err else ErrorCode.none,
        "error_message": err.message if err else None,
    }


def _requested_deletions(
    ctx: RequestContext, request: requests.DeleteTopicsRequest
) -> list[tuple[str | None, uuid.UUID | None]]:
    """(name, id) per topic to delete; the zero id (kio reads it as None) means none.
    From v6 (KIP-516) a topic to delete is named by its name or by its id."""
    if ctx.version < 6:
        return [(name, None) for name in request.topic_names]
    return [
        (t.name, t.topic_id if t.topic_id is not None and t.topic_id.int else None)
        for t in request.topics
    ]


@handles(DELETE_TOPICS, 0)  # v0 through protocol.legacy_messages
async def delete_topics(
    ctx: RequestContext, request: requests.DeleteTopicsRequest
) -> responses.DeleteTopicsResponse:
    broker = ctx.broker
    state = broker.controller.state
    wanted = _requested_deletions(ctx, request)
    if any(
        (topic_id is not None and topic_id not in state.topics_by_id)
        or (name is not None and topic_id is None and name not in state.topics)
        for name, topic_id in wanted
    ):
        # Perhaps created through another node a moment ago: ask the fresh image.
        state = await caught_up(broker.controller)
    if not _deletion_enabled(broker):
        code = ErrorCode.invalid_request if ctx.version < 3 else ErrorCode.topic_deletion_disabled
        err = ResourceError(code, "Topic deletion is disabled.")
        return {
            "throttle_time": 0,
            "responses": [_deleted(name, topic_id, err) for name, topic_id in wanted],
        }
    results: list[responses.DeletableTopicResult] = []
    repeated_names = duplicates([n for n, i in wanted if n is not None and i is None])
    repeated_ids = duplicates([i for n, i in wanted if n is None and i is not None])
    for repeated_name in sorted(repeated_names):
        err = ResourceError(ErrorCode.invalid_request, "Duplicate topic name.")
        results.append(_deleted(repeated_name, None, err))
    for repeated_id in repeated_ids:
        err = ResourceError(ErrorCode.invalid_request, "Duplicate topic id.")
        results.append(_deleted(None, repeated_id, err))
    resolved: list[tuple[str | None, uuid.UUID]] = []  # (name as requested, topic id), known topics
    checking = broker.authorizer is not None

    def may_delete(name: str) -> bool:
        return not checking or ctx.allowed(Operation.DELETE, ResourceType.TOPIC, name)

    denied = ResourceError(ErrorCode.topic_authorization_failed, AUTHORIZATION_FAILED)
    for name, topic_id in wanted:
        if name is None and topic_id is None:
            err = ResourceError(
                ErrorCode.invalid_request, "Neither topic name nor id were specified."
            )
            results.append(_deleted(None, None, err))
        elif name is not None and topic_id is not None:
            err = ResourceError(
                ErrorCode.invalid_request, "You may not specify both topic name and topic id."
            )
            results.append(_deleted(name, topic_id, err))
        elif name in repeated_names or topic_id in repeated_ids:
            continue
        elif topic_id is not None:
            info = state.topics_by_id.get(topic_id)
            if info is None:
                results.append(_deleted(None, topic_id, ResourceError(ErrorCode.unknown_topic_id)))
            elif not may_delete(info.name):
                results.append(_deleted(None, topic_id, denied))
            else:
                resolved.append((None, info.topic_id))
        elif name is not None:
            info = state.topics.get(name)
            if not may_delete(name):
                results.append(_deleted(name, None, denied))
            elif info is None:
                err = ResourceError(ErrorCode.unknown_topic_or_partition)
                results.append(_deleted(name, None, err))
            else:
                resolved.append((name, info.topic_id))
    # A name and an id may denote the same topic: both entries are refused.
    mentions = Counter(topic_id for _, topic_id in resolved)
    targets: list[tuple[str, uuid.UUID]] = []
    for name, topic_id in resolved:
        info = state.topics_by_id[topic_id]
        if mentions[topic_id] > 1:
            err = ResourceError(
                ErrorCode.invalid_request,
                "The provided topic name maps to an ID that was already supplied.",
            )
            results.append(_deleted(name, topic_id, err))
        else:
            targets.append((info.name, topic_id))

    timeout = timeout_seconds(request.timeout)
    outcomes = await asyncio.gather(
        *(
            guarded(functools.partial(broker.controller.delete_topic_by_id, topic_id), timeout)
            for _, topic_id in targets
        )
    )
    for (name, topic_id), out in zip(targets, outcomes, strict=True):
        results.append(_deleted(name, topic_id, out if isinstance(out, ResourceError) else None))
    return {"throttle_time": 0, "responses": results}


# -- CreatePartitions ----------------------------------------------------------------------


@handles(CREATE_PARTITIONS, 0)
async def create_partitions(
    ctx: RequestContext, request: requests.CreatePartitionsRequest
) -> responses.CreatePartitionsResponse:
    broker = ctx.broker
    timeout = timeout_seconds(request.timeout)
    validate_only = request.validate_only
    repeated = duplicates([t.name for t in request.topics])

    async def grow(topic: _GrownTopic) -> None:
        if broker.authorizer is not None and not ctx.allowed(
            Operation.ALTER, ResourceType.TOPIC, topic.name
        ):
            raise ResourceError(ErrorCode.topic_authorization_failed, AUTHORIZATION_FAILED)
        info = broker.controller.state.topics.get(topic.name)
        if info is None or topic.count <= len(info.partitions):
            # Perhaps created or grown through another node a moment ago: the fresh image.
            info = (await caught_up(broker.controller)).topics.get(topic.name)
        if info is None:
            raise ResourceError(
                ErrorCode.unknown_topic_or_partition,
                f"This server does not host this topic ID or partition: {topic.name}",
            )
        current = len(info.partitions)
        if topic.count == current:
            raise ResourceError(
                ErrorCode.invalid_partitions, f"Topic already has {current} partition(s)."
            )
        if topic.count < current:
            raise ResourceError(
                ErrorCode.invalid_partitions,
                f"The topic {topic.name} currently has {current} partition(s); {topic.count} "
                "would not be an increase.",
            )
        assignments = None
        if topic.assignments is not None:
            additional = topic.count - current
            if len(topic.assignments) != additional:
                raise ResourceError(
                    ErrorCode.invalid_replica_assignment,
                    f"Attempted to add {additional} additional partition(s), but only "
                    f"{len(topic.assignments)} assignment(s) were specified.",
                )
            assignments = {current + i: list(a.broker_ids) for i, a in enumerate(topic.assignments)}
        await broker.controller.create_partitions(
            topic.name, topic.count, assignments=assignments, validate_only=validate_only
        )

    unique = [t for t in request.topics if t.name not in repeated]
    outcomes = await asyncio.gather(*(guarded(functools.partial(grow, t), timeout) for t in unique))
    results: list[responses.CreatePartitionsTopicResult] = [
        {
            "name": t.name,
            "error_code": out.code if isinstance(out, ResourceError) else ErrorCode.none,
            "error_message": out.message if isinstance(out, ResourceError) else None,
        }
        for t, out in zip(unique, outcomes, strict=True)
    ]
    results += [
        {
            "name": name,
            "error_code": ErrorCode.invalid_request,
            "error_message": "Duplicate topic name.",
        }
        for name in sorted(repeated)
    ]
    return {"throttle_time": 0, "results": results}
