"""Consumer-group APIs: FindCoordinator, Join/Sync/Heartbeat/Leave, offsets, group admin.

Each handler turns the request of whatever version into a call on the broker's
GroupCoordinator and the answer back into the version's fields. JoinGroup and
SyncGroup (and every write) are delayed operations: the coordinator answers through
a callback (`_Reply`), rendered at once when it came before the handler returned, else
awaited by the connection, so a parked join never blocks the loop or other connections.
"""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from kio.schema.errors import ErrorCode

from kbroker.coordinator import (
    GroupState,
    JoinRequest,
    JoinResult,
    LeaveResult,
    LeavingMember,
    OffsetAndMetadata,
    SyncRequest,
    SyncResult,
)
from kbroker.coordinator.coordinator import GroupCoordinator
from kbroker.coordinator.group import ClassicGroup, describe_members
from kbroker.handlers.context import RequestContext
from kbroker.handlers.endpoints import node_address
from kbroker.handlers.registry import handles
from kbroker.protocol import requests, responses
from kbroker.protocol.group_answers import encode_offset_commit_answer
from kbroker.protocol.messages import duration_ms, known_versions
from kbroker.security.acl import CLUSTER_NAME, OPERATIONS_OMITTED, Operation, ResourceType
from kbroker.share.coordinator import ShareCoordinator

OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
DELETE_GROUPS = 42
OFFSET_DELETE = 47

E = ErrorCode
KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
KEY_TYPE_SHARE = 2  # KIP-932: "group:topicId:partition", answered by the share coordinator


def _lowest(key: int) -> int:
    return known_versions(key).start


def _coordinator(ctx: RequestContext) -> GroupCoordinator:
    return ctx.broker.groups.coordinator


def _client_host(ctx: RequestContext) -> str:
    peer = ctx.connection.peer
    return "/" + peer.rsplit(":", 1)[0] if peer and peer != "?" else ""


T = TypeVar("T")
R = TypeVar("R")


class _Reply(Generic[T]):
    """A coordinator's answer to one request, through the callback it is given (the
    reply itself); only the first answer counts. Most come before the handler returns
    (nothing to write, or a write acknowledged at once) and are rendered then, with no
    future; for the others `respond` gives a coroutine that waits."""

    __slots__ = ("_value", "_future")

    def __init__(self) -> None:
        self._value: T | _Pending = _PENDING
        self._future: asyncio.Future[T] | None = None

    def __call__(self, value: T) -> None:
        if self._value is not _PENDING:
            return
        self._value = value
        future = self._future
        if future is not None and not future.done():
            future.set_result(value)

    async def wait(self) -> T:
        value = self._value
        if isinstance(value, _Pending):
            if self._future is None:
                self._future = asyncio.get_running_loop().create_future()
            return await self._future
        return value

    def respond(self, render: Callable[[T], R]) -> R | Awaitable[R]:
        """The rendered answer now if it came already, else an awaitable of it."""
        value = self._value
        if not isinstance(value, _Pending):
            return render(value)
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._future = future

        async def later() -> R:
            return render(await future)

        return later()


class _Pending:
    """No answer yet."""


_PENDING = _Pending()


# -- FindCoordinator ---------------------------------------------------------------------


@handles(FIND_COORDINATOR, _lowest(FIND_COORDINATOR))
def find_coordinator(
    ctx: RequestContext, request: requests.FindCoordinatorRequest
) -> Awaitable[responses.FindCoordinatorResponse]:
    key_type = request.key_type
    # From v4 (KIP-699) one request asks for several keys, in coordinator_keys.
    if ctx.version >= 4:
        return _find_coordinators(ctx, list(request.coordinator_keys), key_type, True)
    return _find_coordinators(ctx, [request.key], key_type, False)


async def _find_coordinators(
    ctx: RequestContext, keys: list[str], key_type: int, batched: bool
) -> responses.FindCoordinatorResponse:
    found = [await _locate(ctx, key, key_type) for key in keys]
    if batched:
        return {"throttle_time": 0, "coordinators": found}
    only = found[0]
    return {
        "throttle_time": 0,
        "error_code": only["error_code"],
        "error_message": only["error_message"],
        "node_id": only["node_id"],
        "host": only["host"],
        "port": only["port"],
    }


def _group_denied(ctx: RequestContext, operation: Operation, group_id: str) -> bool:
    """Kafka's group check; no work at all without an authorizer."""
    return ctx.broker.authorizer is not None and not ctx.allowed(
        operation, ResourceType.GROUP, group_id
    )


async def _locate(ctx: RequestContext, key: str, key_type: int) -> responses.Coordinator:
    broker = ctx.broker
    if broker.authorizer is not None:
        if key_type == KEY_TYPE_TRANSACTION and not ctx.allowed(
            Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key
        ):
            return _coordinator_entry(key, E.transactional_id_authorization_failed)
        if key_type == KEY_TYPE_GROUP and _group_denied(ctx, Operation.DESCRIBE, key):
            return _coordinator_entry(key, E.group_authorization_failed)
    if key_type == KEY_TYPE_TRANSACTION:
        error, node = await broker.transactions.find_coordinator(key)
        if error != E.none or node is None:
            return _coordinator_entry(key, error)
        return _coordinator_entry(key, E.none, node.node_id, *node_address(ctx, node))
    if key_type == KEY_TYPE_SHARE and ctx.broker.shares is not None:
        if not _share_key(key):
            return _coordinator_entry(key, E.invalid_request, message=f"invalid share key {key}")
        error, node = await ctx.broker.shares.find_coordinator(key)
        if error != E.none or node is None:
            return _coordinator_entry(key, error)
        return _coordinator_entry(key, E.none, node.node_id, *node_address(ctx, node))
    if key_type != KEY_TYPE_GROUP:
        return _coordinator_entry(key, E.invalid_request, message=f"unknown key type {key_type}")
    service = ctx.broker.groups
    error, node = await service.find_group_coordinator(key)
    if error != E.none or node is None:
        return _coordinator_entry(key, error)
    return _coordinator_entry(key, E.none, node.node_id, *node_address(ctx, node))


def _share_key(key: str) -> bool:
    """Whether a key is "group:topicId:partition" (the group id may hold colons)."""
    group_id, _, rest = key.rpartition(":")
    group_id, _, topic_id = group_id.rpartition(":")
    if not group_id or not rest.isdigit():
        return False
    try:
        return len(base64.urlsafe_b64decode(topic_id + "==")) == 16
    except ValueError:
        return False


def _coordinator_entry(
    key: str,
    error: ErrorCode,
    node_id: int = -1,
    host: str = "",
    port: int = -1,
    message: str | None = None,
) -> responses.Coordinator:
    return {
        "key": key,
        "error_code": error,
        "error_message": message
        if message is not None
        else (None if error == E.none else error.name),
        "node_id": node_id,
        "host": host,
        "port": port,
    }


# -- JoinGroup / SyncGroup ---------------------------------------------------------------


@handles(JOIN_GROUP, _lowest(JOIN_GROUP))
def join_group(
    ctx: RequestContext, request: requests.JoinGroupRequest
) -> responses.JoinGroupResponse | Awaitable[responses.JoinGroupResponse]:
    version = ctx.version
    if _group_denied(ctx, Operation.READ, request.group_id):
        return _join_response(version, JoinResult(E.group_authorization_failed, ""))
    coordinator = _coordinator(ctx)
    session = duration_ms(request.session_timeout)
    rebalance = duration_ms(request.rebalance_timeout)  # v1+; Kafka's default -1 before
    reply: _Reply[JoinResult] = _Reply()
    coordinator.join_group(
        JoinRequest(
            group_id=request.group_id,
            member_id=request.member_id,
            protocol_type=request.protocol_type,
            protocols=[(p.name, p.metadata) for p in request.protocols],
            session_timeout_ms=session,
            rebalance_timeout_ms=rebalance if rebalance >= 0 else session,
            group_instance_id=request.group_instance_id,
            client_id=ctx.client_id,
            client_host=_client_host(ctx),
            require_known_member_id=version >= 4,
            supports_skip_assignment=version >= 9,
            reason=request.reason,
        ),
        reply,
    )
    return reply.respond(lambda r: _join_response(version, r))


def _join_response(version: int, r: JoinResult) -> responses.JoinGroupResponse:
    protocol_name = r.protocol_name
    if version < 7 and protocol_name is None:
        protocol_name = ""  # not nullable before v7
    elif version >= 7 and protocol_name == "":
        protocol_name = None
    return {
        "throttle_time": 0,
        "error_code": r.error,
        "generation_id": r.generation_id,
        "protocol_type": r.protocol_type,
        "protocol_name": protocol_name,
        "leader": r.leader_id,
        "skip_assignment": r.skip_assignment,
        "member_id": r.member_id,
        "members": [
            {"member_id": m, "group_instance_id": instance, "metadata": metadata}
            for m, instance, metadata in r.members
        ],
    }


@handles(SYNC_GROUP, _lowest(SYNC_GROUP))
def sync_group(
    ctx: RequestContext, request: requests.SyncGroupRequest
) -> responses.SyncGroupResponse | Awaitable[responses.SyncGroupResponse]:
    if ctx.version >= 5 and (request.protocol_type is None or request.protocol_name is None):
        # From v5 both are mandatory; Kafka refuses their absence before anything else.
        return _sync_response(SyncResult(E.inconsistent_group_protocol))
    if _group_denied(ctx, Operation.READ, request.group_id):
        return _sync_response(SyncResult(E.group_authorization_failed))
    coordinator = _coordinator(ctx)
    reply: _Reply[SyncResult] = _Reply()
    coordinator.sync_group(
        SyncRequest(
            group_id=request.group_id,
            generation_id=request.generation_id,
            member_id=request.member_id,
            assignments={a.member_id: a.assignment for a in request.assignments},
            group_instance_id=request.group_instance_id,
            protocol_type=request.protocol_type,
            protocol_name=request.protocol_name,
        ),
        reply,
    )
    return reply.respond(_sync_response)


def _sync_response(r: SyncResult) -> responses.SyncGroupResponse:
    return {
        "throttle_time": 0,
        "error_code": r.error,
        "protocol_type": r.protocol_type,
        "protocol_name": r.protocol_name,
        "assignment": r.assignment,
    }


# -- Heartbeat / LeaveGroup --------------------------------------------------------------


@handles(HEARTBEAT, _lowest(HEARTBEAT))
def heartbeat(
    ctx: RequestContext, request: requests.HeartbeatRequest
) -> responses.HeartbeatResponse | Awaitable[responses.HeartbeatResponse]:
    if _group_denied(ctx, Operation.READ, request.group_id):
        return {"throttle_time": 0, "error_code": E.group_authorization_failed}
    reply: _Reply[ErrorCode] = _Reply()
    _coordinator(ctx).heartbeat(
        request.group_id,
        request.member_id,
        request.generation_id,
        request.group_instance_id,
        reply,
    )
    return reply.respond(_heartbeat_response)


def _heartbeat_response(error: ErrorCode) -> responses.HeartbeatResponse:
    return {"throttle_time": 0, "error_code": error}


@handles(LEAVE_GROUP, _lowest(LEAVE_GROUP))
def leave_group(
    ctx: RequestContext, request: requests.LeaveGroupRequest
) -> responses.LeaveGroupResponse | Awaitable[responses.LeaveGroupResponse]:
    # From v3 (KIP-345) one request removes a list of members, static ones by instance id.
    if batched := ctx.version >= 3:
        leaving = [
            LeavingMember(m.member_id, m.group_instance_id, m.reason) for m in request.members
        ]
    else:
        leaving = [LeavingMember(request.member_id)]
    if _group_denied(ctx, Operation.READ, request.group_id):
        return {"throttle_time": 0, "error_code": E.group_authorization_failed, "members": []}
    reply: _Reply[LeaveResult] = _Reply()
    _coordinator(ctx).leave_group(request.group_id, leaving, reply)
    return reply.respond(lambda result: _leave_response(batched, result))


def _leave_response(batched: bool, result: LeaveResult) -> responses.LeaveGroupResponse:
    if not batched:
        # One member, one error: before v3 the member's error is the response's error.
        error = result.error
        if error == E.none and result.members:
            error = result.members[0][2]
        return {"throttle_time": 0, "error_code": error}
    return {
        "throttle_time": 0,
        "error_code": result.error,
        "members": [
            {"member_id": m, "group_instance_id": instance, "error_code": code}
            for m, instance, code in result.members
        ],
    }


# -- OffsetCommit ------------------------------------------------------------------------


@handles(OFFSET_COMMIT, 0)  # v0-1 through protocol.legacy_messages
def offset_commit(
    ctx: RequestContext, request: requests.OffsetCommitRequest
) -> responses.OffsetCommitResponse | bytes | Awaitable[responses.OffsetCommitResponse | bytes]:
    version = ctx.version
    state = ctx.broker.controller.state
    # (topic name or None, topic id or None, [(partition, committed)]) in request order
    layout: list[
        tuple[str | None, uuid.UUID | None, list[tuple[int, OffsetAndMetadata | None, ErrorCode]]]
    ] = []
    offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
    commit_timestamps: dict[tuple[str, int], int] = {}  # v1's, when not -1
    group_denied = _group_denied(ctx, Operation.READ, request.group_id)
    checking = ctx.broker.authorizer is not None
    for topic in request.topics:
        topic_id = None
        if version >= 10:  # KIP-848: a committed topic is named by its id alone
            topic_id = topic.topic_id
            info = None if topic_id is None else state.topics_by_id.get(topic_id)
            name = info.name if info is not None else None
            missing = E.unknown_topic_id
        else:
            name = topic.name
            info = state.topics.get(name)
            missing = E.unknown_topic_or_partition
        entries: list[tuple[int, OffsetAndMetadata | None, ErrorCode]] = []
        denied = None
        if group_denied:
            denied = E.group_authorization_failed
        elif checking and not ctx.allowed(Operation.READ, ResourceType.TOPIC, name or ""):
            denied = E.topic_authorization_failed
        for p in topic.partitions:
            if denied is not None:
                entries.append((p.partition_index, None, denied))
                continue
            if info is None:
                entries.append((p.partition_index, None, missing))
                continue
            if not 0 <= p.partition_index < len(info.partitions):
                entries.append((p.partition_index, None, E.unknown_topic_or_partition))
                continue
            value = OffsetAndMetadata(
                offset=p.committed_offset,
                leader_epoch=p.committed_leader_epoch,
                metadata=p.committed_metadata or "",
            )
            offsets[(info.name, p.partition_index)] = value
            if version == 1 and p.commit_timestamp != -1:
                commit_timestamps[(info.name, p.partition_index)] = p.commit_timestamp
            entries.append((p.partition_index, value, E.none))
        layout.append((name, topic_id, entries))

    direct = not ctx.broker.quotas.active  # request quotas write into a dict answer

    def render(
        results: dict[tuple[str, int], ErrorCode],
    ) -> responses.OffsetCommitResponse | bytes:
        # Each partition's outcome, worked out here once: the direct encoder and the
        # dict answer read the same lists.
        answered = [
            (
                name or "",
                topic_id,
                [
                    (
                        index,
                        results.get((name, index), E.unknown_server_error)
                        if value is not None and name is not None
                        else error,
                    )
                    for index, value, error in entries
                ],
            )
            for name, topic_id, entries in layout
        ]
        if direct:
            encoded = encode_offset_commit_answer(version, answered)
            if encoded is not None:
                return encoded
        topics: list[responses.OffsetCommitResponseTopic] = [
            {
                "name": name,
                "topic_id": topic_id,
                "partitions": [
                    {"partition_index": index, "error_code": error} for index, error in outcomes
                ],
            }
            for name, topic_id, outcomes in answered
        ]
        return {"throttle_time": 0, "topics": topics}

    coordinator = _coordinator(ctx)
    if not offsets:
        return render({})
    retention = duration_ms(request.retention_time)  # v2-4; Kafka's default -1 elsewhere
    retention_ms = None if retention < 0 else retention
    reply: _Reply[dict[tuple[str, int], ErrorCode]] = _Reply()
    coordinator.commit_offsets(
        request.group_id,
        request.member_id,
        request.generation_id_or_member_epoch,
        offsets,
        reply,
        instance_id=request.group_instance_id,
        unknown_group_error=E.group_id_not_found if version >= 9 else E.illegal_generation,
        retention_ms=retention_ms,
        commit_timestamps=commit_timestamps,
    )
    return reply.respond(render)


# -- OffsetFetch -------------------------------------------------------------------------


@handles(OFFSET_FETCH, 0)  # v0 through protocol.legacy_messages
def offset_fetch(
    ctx: RequestContext, request: requests.OffsetFetchRequest
) -> responses.OffsetFetchResponse:
    version = ctx.version
    stable = request.require_stable
    if version >= 8:  # KIP-709: one request fetches the offsets of several groups
        groups = [
            _fetch_group(
                ctx,
                g.group_id,
                _asked_in_group(ctx, g.topics),
                stable,
                g.member_id,
                g.member_epoch,
                by_id=version >= 10,
            )
            for g in request.groups
        ]
        return {"throttle_time": 0, "groups": groups}
    fetched = _fetch_group(ctx, request.group_id, _asked_by_name(request.topics), stable)
    error = fetched["error_code"]
    topics = fetched["topics"]
    if version < 2 and error != E.none:
        # v0-1 have no top-level error: every requested partition carries it.
        topics = [
            {
                "name": t.name,
                "partitions": [_fetched_partition(i, None, error) for i in t.partition_indexes],
            }
            for t in request.topics or ()
        ]
    return {"throttle_time": 0, "topics": topics, "error_code": error}


Asked = list[tuple[str | None, uuid.UUID | None, list[int]]]
"""The topics whose offsets a group is asked for: (name, or None for an unknown id; topic
id, when asked by id; partitions)."""


def _asked_by_name(topics: Sequence[requests.OffsetFetchRequestTopic] | None) -> Asked | None:
    return None if topics is None else [(t.name, None, list(t.partition_indexes)) for t in topics]


def _asked_in_group(
    ctx: RequestContext, topics: Sequence[requests.OffsetFetchRequestTopics] | None
) -> Asked | None:
    """A group's topics in a batched request, named by id alone from v10 (KIP-848)."""
    if topics is None:
        return None
    if ctx.version < 10:
        return [(t.name, None, list(t.partition_indexes)) for t in topics]
    by_id = ctx.broker.controller.state.topics_by_id
    asked: Asked = []
    for t in topics:
        info = None if t.topic_id is None else by_id.get(t.topic_id)
        asked.append((None if info is None else info.name, t.topic_id, list(t.partition_indexes)))
    return asked


def _fetch_group(
    ctx: RequestContext,
    group_id: str,
    asked: Asked | None,
    require_stable: bool = False,
    member_id: str | None = None,
    member_epoch: int = -1,
    by_id: bool = False,
) -> responses.OffsetFetchResponseGroup:
    """One group's committed offsets; `by_id`: the answer names topics by id too (v10+)."""
    if _group_denied(ctx, Operation.DESCRIBE, group_id):
        return {"group_id": group_id, "topics": [], "error_code": E.group_authorization_failed}
    coordinator = _coordinator(ctx)
    state = ctx.broker.controller.state
    if asked is None:
        error, offsets = coordinator.fetch_offsets(group_id, None, member_id, member_epoch)
        by_topic: dict[str, list[responses.OffsetFetchResponsePartitions]] = {}
        for (topic, partition), value in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append(
                _stable_partition(coordinator, group_id, topic, partition, value, require_stable)
            )
        rendered: list[responses.OffsetFetchResponseTopics] = []
        for topic_name, partitions in by_topic.items():
            entry: responses.OffsetFetchResponseTopics = {
                "name": topic_name,
                "partitions": partitions,
            }
            if by_id:
                info = state.topics.get(topic_name)
                if info is None:
                    continue  # no id to name it by
                entry["topic_id"] = info.topic_id
            rendered.append(entry)
        return {"group_id": group_id, "topics": rendered, "error_code": error}
    wanted = [(name, i) for name, _, indexes in asked if name is not None for i in indexes]
    error, offsets = coordinator.fetch_offsets(group_id, wanted, member_id, member_epoch)
    if error != E.none:
        return {"group_id": group_id, "topics": [], "error_code": error}
    rendered = []
    for name, topic_id, indexes in asked:
        if name is None:
            partitions = [_fetched_partition(i, None, E.unknown_topic_id) for i in indexes]
        else:
            partitions = [
                _stable_partition(
                    coordinator, group_id, name, i, offsets.get((name, i)), require_stable
                )
                for i in indexes
            ]
        entry = {"name": name or "", "partitions": partitions}
        if by_id:  # the topics of a group in a batched (v8+) answer have ids from v10
            entry["topic_id"] = topic_id
        rendered.append(entry)
    return {"group_id": group_id, "topics": rendered, "error_code": E.none}


def _stable_partition(
    coordinator: GroupCoordinator,
    group_id: str,
    topic: str,
    index: int,
    value: OffsetAndMetadata | None,
    require_stable: bool,
) -> responses.OffsetFetchResponsePartitions:
    """A fetched offset, or UNSTABLE_OFFSET_COMMIT while an open transaction holds one and
    the client asked for stable offsets only (KIP-447)."""
    if require_stable and coordinator.has_pending_offset(group_id, (topic, index)):
        return _fetched_partition(index, None, E.unstable_offset_commit)
    return _fetched_partition(index, value, E.none)


def _fetched_partition(
    index: int, value: OffsetAndMetadata | None, error: int
) -> responses.OffsetFetchResponsePartitions:
    if value is None:
        return {
            "partition_index": index,
            "committed_offset": -1,
            "committed_leader_epoch": -1,
            "metadata": "",
            "error_code": error,
        }
    return {
        "partition_index": index,
        "committed_offset": value.offset,
        "committed_leader_epoch": value.leader_epoch,
        "metadata": value.metadata,
        "error_code": error,
    }


# -- OffsetDelete ------------------------------------------------------------------------


@handles(OFFSET_DELETE, _lowest(OFFSET_DELETE))
def offset_delete(
    ctx: RequestContext, request: requests.OffsetDeleteRequest
) -> responses.OffsetDeleteResponse | Awaitable[responses.OffsetDeleteResponse]:
    if _group_denied(ctx, Operation.DELETE, request.group_id):
        return {"error_code": E.group_authorization_failed, "throttle_time": 0, "topics": []}
    state = ctx.broker.controller.state
    unknown: dict[tuple[str, int], ErrorCode] = {}
    partitions: list[tuple[str, int]] = []
    checking = ctx.broker.authorizer is not None
    for t in request.topics:
        denied = checking and not ctx.allowed(Operation.READ, ResourceType.TOPIC, t.name)
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            if denied:
                unknown[tp] = E.topic_authorization_failed
            elif t.name not in state.topics:
                unknown[tp] = E.unknown_topic_or_partition
            else:
                partitions.append(tp)

    def render(
        outcome: tuple[ErrorCode, dict[tuple[str, int], ErrorCode]],
    ) -> responses.OffsetDeleteResponse:
        error, results = outcome
        if error != E.none:
            return {"error_code": error, "throttle_time": 0, "topics": []}
        return {
            "error_code": E.none,
            "throttle_time": 0,
            "topics": [
                {
                    "name": t.name,
                    "partitions": [
                        {
                            "partition_index": p.partition_index,
                            "error_code": unknown.get(
                                (t.name, p.partition_index),
                                results.get((t.name, p.partition_index), E.none),
                            ),
                        }
                        for p in t.partitions
                    ],
                }
                for t in request.topics
            ],
        }

    coordinator = _coordinator(ctx)
    reply: _Reply[tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]] = _Reply()
    coordinator.delete_offsets(request.group_id, partitions, reply)
    return reply.respond(render)


# -- ListGroups / DescribeGroups / DeleteGroups ------------------------------------------


@handles(LIST_GROUPS, _lowest(LIST_GROUPS))
def list_groups(
    ctx: RequestContext, request: requests.ListGroupsRequest
) -> responses.ListGroupsResponse:
    coordinator = _coordinator(ctx)
    states, types = request.states_filter, request.types_filter
    error, groups = coordinator.list_groups(states, types)
    listed: list[responses.ListedGroup] = [
        {
            "group_id": g.group_id,
            "protocol_type": g.protocol_type,
            "group_state": g.state,
            "group_type": g.group_type,
        }
        for g in groups
    ]
    shares = _share_coordinator(ctx)
    wanted_states = {s.strip().lower() for s in states}
    if shares is not None and (not types or "share" in {t.strip().lower() for t in types}):
        for group_id in sorted(shares.share_group_ids()):
            group = shares.membership.groups.get(group_id)
            state = group.state if group is not None else "Empty"
            if not wanted_states or state.lower() in wanted_states:
                listed.append(
                    {
                        "group_id": group_id,
                        "protocol_type": "share",
                        "group_state": state,
                        "group_type": "share",
                    }
                )
    if ctx.broker.authorizer is not None and not ctx.allowed(
        Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME
    ):
        # Without DESCRIBE on the cluster, Kafka lists the groups one may describe.
        listed = [g for g in listed if not _group_denied(ctx, Operation.DESCRIBE, g["group_id"])]
    return {"throttle_time": 0, "error_code": error, "groups": listed}


def group_operations(ctx: RequestContext, asked: bool, group_id: str) -> int:
    """KIP-430: what the principal may do on a group described without error, when the
    request asked (DescribeGroups v3+ and the consumer, share and streams groups'
    Describe); a group described with an error carries none, as on Kafka."""
    if not asked:
        return OPERATIONS_OMITTED
    return ctx.authorized_operations(ResourceType.GROUP, group_id)


def _share_coordinator(ctx: RequestContext) -> ShareCoordinator | None:
    """The share-group coordinator while share groups are served, else None."""
    service = ctx.broker.shares
    if service is None or not ctx.broker.config.group_share_enable:
        return None
    return service.coordinator


@handles(DESCRIBE_GROUPS, _lowest(DESCRIBE_GROUPS))
def describe_groups(
    ctx: RequestContext, request: requests.DescribeGroupsRequest
) -> responses.DescribeGroupsResponse:
    coordinator = _coordinator(ctx)
    asked = request.include_authorized_operations
    described: list[responses.DescribeGroupsDescribedGroup] = []
    for group_id in request.groups:
        message = None
        if _group_denied(ctx, Operation.DESCRIBE, group_id):
            denied = _describe(
                group_id, E.group_authorization_failed, None, ctx.version, OPERATIONS_OMITTED
            )
            described.append(
                {**denied, "group_state": "", "error_code": E.group_authorization_failed}
            )
            continue
        error, group = coordinator.describe_group(group_id)
        shares = _share_coordinator(ctx)
        if group is None and (
            coordinator.is_consumer_group(group_id)
            or (shares is not None and group_id in shares.share_group_ids())
        ):
            message = f"Group {group_id} is not a classic group."  # as Kafka answers
        operations = group_operations(ctx, asked, group_id)
        described.append(_describe(group_id, error, group, ctx.version, operations, message))
    return {"throttle_time": 0, "groups": described}


def _describe(
    group_id: str,
    error: ErrorCode,
    group: ClassicGroup | None,
    version: int,
    operations: int,
    message: str | None = None,
) -> responses.DescribeGroupsDescribedGroup:
    if group is None:
        dead: responses.DescribeGroupsDescribedGroup = {
            "group_id": group_id,
            "group_state": GroupState.DEAD.value,
            "protocol_type": "",
            "protocol_data": "",
            "members": [],
            "authorized_operations": operations,
        }
        if error == E.group_id_not_found and version < 6:
            error = E.none  # before v6 a missing group is described as Dead, no error
        dead["error_code"] = error
        if error != E.none:  # a group described with an error carries no operations
            dead["authorized_operations"] = OPERATIONS_OMITTED
        if error == E.group_id_not_found:
            dead["error_message"] = message or f"Group {group_id} not found."
        return dead
    stable = group.state == GroupState.STABLE
    return {
        "error_code": E.none,
        "group_id": group_id,
        "group_state": group.state.value,
        "protocol_type": group.protocol_type or "",
        "protocol_data": (group.protocol_name or "") if stable else "",
        "members": describe_members(group),
        "authorized_operations": operations,
    }


@handles(DELETE_GROUPS, _lowest(DELETE_GROUPS))
def delete_groups(
    ctx: RequestContext, request: requests.DeleteGroupsRequest
) -> responses.DeleteGroupsResponse | Awaitable[responses.DeleteGroupsResponse]:
    requested: list[str] = list(request.groups_names)
    refused: dict[str, ErrorCode] = {
        g: E.group_authorization_failed
        for g in requested
        if _group_denied(ctx, Operation.DELETE, g)
    }
    names = [g for g in requested if g not in refused]

    def render(results: dict[str, ErrorCode]) -> responses.DeleteGroupsResponse:
        results = {**results, **refused}
        return {
            "throttle_time": 0,
            "results": [{"group_id": g, "error_code": results.get(g, E.none)} for g in requested],
        }

    shares = _share_coordinator(ctx)
    share_ids = shares.share_group_ids() if shares is not None else set()
    share_results = {
        g: ErrorCode(shares.delete_group(g)) for g in names if shares is not None and g in share_ids
    }
    coordinator = _coordinator(ctx)
    reply: _Reply[dict[str, ErrorCode]] = _Reply()
    coordinator.delete_groups([g for g in names if g not in share_ids], reply)
    if not share_results:
        return reply.respond(render)

    async def with_share_groups() -> responses.DeleteGroupsResponse:
        assert ctx.broker.shares is not None  # share groups were found through it
        shares = ctx.broker.shares
        stored = await shares.persist()
        results = dict(await reply.wait())
        for group_id, error in share_results.items():
            if error == E.none and stored == E.none:
                # States stored by share coordinators on other brokers go too.
                deleted = await shares.admin.delete_states(shares.admin.state_keys(group_id))
                error = next((c for c in deleted.values() if c != E.none), E.none)
            results[group_id] = stored if error == E.none and stored != E.none else error
        return render(results)

    return with_share_groups()
