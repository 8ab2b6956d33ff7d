"""Consumer groups as an operator sees them: list, describe (members and lag), lag.

Each function asks the cluster over the wire and returns plain dataclasses; `render_*`
turns them into the tables `kbroker groups ...` prints. Consumer-protocol groups are
described with ConsumerGroupDescribe, classic ones with DescribeGroups (their member
assignments decoded from the consumer protocol's bytes); committed offsets come from
the group coordinator, log end offsets from each partition's leader. Share groups are
described with ShareGroupDescribe and DescribeShareGroupOffsets, whose start offsets and
lag the group's coordinator gathers from the share coordinators and the partitions'
leaders, as kafka-share-groups shows them; the records in flight come from each
partition's leader (`kbroker.admin.share_in_flight`). Streams groups (KIP-1071) are
described with StreamsGroupDescribe; a member's tasks are shown as the source partitions
they read.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from kbroker.admin.client import BrokerConnection, ClientError, Cluster
from kbroker.admin.output import table
from kbroker.admin.share_in_flight import in_flight_records
from kbroker.admin.topics import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, list_offsets, metadata

METADATA = 3
OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
DESCRIBE_GROUPS = 15
DELETE_GROUPS = 42
LIST_GROUPS = 16
CONSUMER_GROUP_DESCRIBE = 69
SHARE_GROUP_DESCRIBE = 77
STREAMS_GROUP_DESCRIBE = 89
DESCRIBE_SHARE_GROUP_OFFSETS = 90

TopicPartition = tuple[str, int]


def _error(code: Any) -> ErrorCode:
    return code if isinstance(code, ErrorCode) else ErrorCode(int(code))


def _check(code: Any, what: str) -> None:
    error = _error(code)
    if error != ErrorCode.none:
        raise ClientError(f"{what}: {error.name.upper()}")


# -- listing ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    group_type: str
    state: str
    protocol_type: str


def brokers(cluster: Cluster) -> list[tuple[int, str, int]]:
    """(node id, host, port) of every broker, from a Metadata answer."""
    md = cluster.any().call(
        METADATA, {"topics": [], "allow_auto_topic_creation": False}, versions=(1, 12)
    )
    return sorted((int(b.node_id), b.host, int(b.port)) for b in md.brokers)


def list_groups(cluster: Cluster) -> list[GroupListing]:
    """Every group of every broker (each answers for the groups it coordinates)."""
    found: dict[str, GroupListing] = {}
    for _, host, port in brokers(cluster):
        response = cluster.connection(host, port).call(
            LIST_GROUPS, {"states_filter": [], "types_filter": []}, versions=(0, 5)
        )
        _check(response.error_code, f"ListGroups on {host}:{port}")
        for g in response.groups:
            group_type = getattr(g, "group_type", "") or "classic"
            found[g.group_id] = GroupListing(
                g.group_id, group_type, getattr(g, "group_state", "") or "", g.protocol_type
            )
    return sorted(found.values(), key=lambda g: g.group_id)


# -- describing ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemberInfo:
    member_id: str
    client_id: str
    host: str
    instance_id: str | None = None
    epoch: int | None = None
    assignment: tuple[TopicPartition, ...] = ()
    target: tuple[TopicPartition, ...] | None = None


@dataclass(frozen=True, slots=True)
class PartitionLag:
    topic: str
    partition: int
    committed: int | None
    log_end: int | None
    member: MemberInfo | None = None
    # A share-partition's figures: `committed` is its start offset, its lag the share
    # group's own count (KIP-1226, from the group's coordinator; None when unknown), not
    # end - start, and the records its leader has in flight.
    share: bool = False
    share_lag: int | None = None
    in_flight: int | None = None

    @property
    def lag(self) -> int | None:
        if self.share:
            return self.share_lag
        if self.committed is None or self.log_end is None:
            return None
        return max(self.log_end - self.committed, 0)


@dataclass
class GroupDescription:
    group_id: str
    group_type: str
    state: str
    coordinator: tuple[int, str, int]
    epoch: int | None = None
    assignment_epoch: int | None = None
    assignor: str = ""
    members: list[MemberInfo] = field(default_factory=list)
    partitions: list[PartitionLag] = field(default_factory=list)

    @property
    def total_lag(self) -> int:
        return sum(p.lag or 0 for p in self.partitions)


def find_coordinator(cluster: Cluster, group_id: str) -> tuple[int, str, int]:
    response = cluster.any().call(
        FIND_COORDINATOR,
        {"key": group_id, "key_type": 0, "coordinator_keys": [group_id]},
        versions=(0, 4),
    )
    entry = response.coordinators[0] if hasattr(response, "coordinators") else response
    _check(entry.error_code, f"FindCoordinator for group {group_id}")
    return int(entry.node_id), entry.host, int(entry.port)


def describe_group(cluster: Cluster, group_id: str) -> GroupDescription:
    """Members, assignments, committed offsets and lag of one group."""
    node = find_coordinator(cluster, group_id)
    coordinator = cluster.connection(node[1], node[2])
    share = _describe_share_group(cluster, coordinator, group_id, node)
    if share is not None:
        return share
    description = _describe_streams_group(coordinator, group_id, node)
    if description is None:
        description = _describe_consumer_group(coordinator, group_id, node)
    if description is None:
        description = _describe_classic_group(coordinator, group_id, node)
    committed = fetch_committed(coordinator, group_id)
    if description.state == "Dead" and not description.members and not committed:
        raise ClientError(f"group {group_id} does not exist")
    owner: dict[TopicPartition, MemberInfo] = {}
    for member in description.members:
        for tp in member.assignment:
            owner[tp] = member
    wanted = sorted(set(committed) | set(owner))
    ends = log_end_offsets(cluster, wanted)
    description.partitions = [
        PartitionLag(t, p, committed.get((t, p)), ends.get((t, p)), owner.get((t, p)))
        for t, p in wanted
    ]
    return description


def _describe_consumer_group(
    conn: BrokerConnection, group_id: str, node: tuple[int, str, int]
) -> GroupDescription | None:
    """ConsumerGroupDescribe; None when the group is not a consumer-protocol group."""
    if CONSUMER_GROUP_DESCRIBE not in conn.versions:
        return None
    response = conn.call(
        CONSUMER_GROUP_DESCRIBE,
        {"group_ids": [group_id], "include_authorized_operations": False},
        versions=(0, 1),
    )
    g = response.groups[0]
    error = _error(g.error_code)
    if error == ErrorCode.group_id_not_found:
        return None  # classic, or no such group: DescribeGroups says which
    _check(error, f"ConsumerGroupDescribe of {group_id}")
    members = [
        MemberInfo(
            member_id=m.member_id,
            client_id=m.client_id,
            host=m.client_host,
            instance_id=m.instance_id,
            epoch=int(m.member_epoch),
            assignment=_named_partitions(m.assignment),
            target=_named_partitions(m.target_assignment),
        )
        for m in g.members
    ]
    return GroupDescription(
        group_id=group_id,
        group_type="consumer",
        state=g.group_state,
        coordinator=node,
        epoch=int(g.group_epoch),
        assignment_epoch=int(g.assignment_epoch),
        assignor=g.assignor_name,
        members=sorted(members, key=lambda m: m.member_id),
    )


def _describe_streams_group(
    conn: BrokerConnection, group_id: str, node: tuple[int, str, int]
) -> GroupDescription | None:
    """StreamsGroupDescribe; None when the group is not a streams group. A member's
    active tasks are shown as the partitions of their subtopology's source topics."""
    if STREAMS_GROUP_DESCRIBE not in conn.versions:
        return None
    response = conn.call(
        STREAMS_GROUP_DESCRIBE,
        {"group_ids": [group_id], "include_authorized_operations": False},
        versions=(0, 0),
    )
    g = response.groups[0]
    if _error(g.error_code) == ErrorCode.group_id_not_found:
        return None
    _check(g.error_code, f"StreamsGroupDescribe of {group_id}")
    subtopologies = (g.topology.subtopologies if g.topology is not None else None) or ()
    sources = {s.subtopology_id: tuple(s.source_topics) for s in subtopologies}

    def partitions(assignment: Any) -> tuple[TopicPartition, ...]:
        return tuple(
            sorted(
                (topic, int(p))
                for task in assignment.active_tasks
                for p in task.partitions
                for topic in sources.get(task.subtopology_id, ())
            )
        )

    members = [
        MemberInfo(
            member_id=m.member_id,
            client_id=m.client_id,
            host=m.client_host,
            instance_id=m.instance_id,
            epoch=int(m.member_epoch),
            assignment=partitions(m.assignment),
            target=partitions(m.target_assignment),
        )
        for m in g.members
    ]
    return GroupDescription(
        group_id=group_id,
        group_type="streams",
        state=g.group_state,
        coordinator=node,
        epoch=int(g.group_epoch),
        assignment_epoch=int(g.assignment_epoch),
        assignor="sticky",
        members=sorted(members, key=lambda m: m.member_id),
    )


def _describe_share_group(
    cluster: Cluster, conn: BrokerConnection, group_id: str, node: tuple[int, str, int]
) -> GroupDescription | None:
    """ShareGroupDescribe and DescribeShareGroupOffsets (start offsets and lag of each
    share-partition); None when the group is not a share group."""
    if SHARE_GROUP_DESCRIBE not in conn.versions:
        return None
    response = conn.call(
        SHARE_GROUP_DESCRIBE,
        {"group_ids": [group_id], "include_authorized_operations": False},
        versions=(1, 1),
    )
    g = response.groups[0]
    if _error(g.error_code) == ErrorCode.group_id_not_found:
        return None
    _check(g.error_code, f"ShareGroupDescribe of {group_id}")
    members = [
        MemberInfo(
            member_id=m.member_id,
            client_id=m.client_id,
            host=m.client_host,
            epoch=int(m.member_epoch),
            assignment=_named_partitions(m.assignment),
        )
        for m in g.members
    ]
    offsets = conn.call(
        DESCRIBE_SHARE_GROUP_OFFSETS,
        {"groups": [{"group_id": group_id, "topics": None}]},
        versions=(0, 1),
    ).groups[0]
    _check(offsets.error_code, f"DescribeShareGroupOffsets of {group_id}")
    starts = {
        (t.topic_name, int(p.partition_index)): (int(p.start_offset), int(getattr(p, "lag", -1)))
        for t in offsets.topics
        for p in t.partitions
        if _error(p.error_code) == ErrorCode.none
    }
    readers: dict[TopicPartition, list[MemberInfo]] = {}
    for member in members:
        for tp in member.assignment:
            readers.setdefault(tp, []).append(member)
    wanted = sorted(set(starts) | set(readers))
    ends = log_end_offsets(cluster, wanted)
    in_flight = in_flight_records(cluster, group_id, wanted)
    partitions = [
        PartitionLag(
            t,
            p,
            starts[(t, p)][0] if (t, p) in starts else None,
            ends.get((t, p)),
            share=True,
            share_lag=starts[(t, p)][1] if (t, p) in starts and starts[(t, p)][1] >= 0 else None,
            in_flight=in_flight.get((t, p)),
        )
        for t, p in wanted
    ]
    return GroupDescription(
        group_id=group_id,
        group_type="share",
        state=g.group_state,
        coordinator=node,
        epoch=int(g.group_epoch),
        assignment_epoch=int(g.assignment_epoch),
        assignor=g.assignor_name,
        members=sorted(members, key=lambda m: m.member_id),
        partitions=partitions,
    )


def _named_partitions(assignment: Any) -> tuple[TopicPartition, ...]:
    return tuple(
        sorted((tp.topic_name, int(p)) for tp in assignment.topic_partitions for p in tp.partitions)
    )


def _describe_classic_group(
    conn: BrokerConnection, group_id: str, node: tuple[int, str, int]
) -> GroupDescription:
    response = conn.call(
        DESCRIBE_GROUPS, {"groups": [group_id], "include_authorized_operations": False}, (0, 6)
    )
    g = response.groups[0]
    if _error(g.error_code) == ErrorCode.group_id_not_found:
        raise ClientError(f"group {group_id} does not exist")
    _check(g.error_code, f"DescribeGroups of {group_id}")
    is_consumer = g.protocol_type == "consumer"
    members = [
        MemberInfo(
            member_id=m.member_id,
            client_id=m.client_id,
            host=m.client_host,
            instance_id=getattr(m, "group_instance_id", None),
            assignment=decode_assignment(m.member_assignment) if is_consumer else (),
        )
        for m in g.members
    ]
    return GroupDescription(
        group_id=group_id,
        group_type="classic",
        state=g.group_state,
        coordinator=node,
        assignor=g.protocol_data,
        members=sorted(members, key=lambda m: m.member_id),
    )


def decode_assignment(data: bytes) -> tuple[TopicPartition, ...]:
    """Partitions of a ConsumerProtocolAssignment (any version: the layout starts the
    same): int16 version, [topic: int16 string, [int32 partition]], user data."""
    if not data:
        return ()
    out: list[TopicPartition] = []
    try:
        pos = 2
        (topics,) = struct.unpack_from(">i", data, pos)
        pos += 4
        for _ in range(max(topics, 0)):
            (length,) = struct.unpack_from(">h", data, pos)
            pos += 2
            topic = data[pos : pos + length].decode()
            pos += length
            (count,) = struct.unpack_from(">i", data, pos)
            pos += 4
            for _ in range(max(count, 0)):
                out.append((topic, struct.unpack_from(">i", data, pos)[0]))
                pos += 4
    except (struct.error, UnicodeDecodeError):
        return tuple(sorted(out))
    return tuple(sorted(out))


def fetch_committed(conn: BrokerConnection, group_id: str) -> dict[TopicPartition, int]:
    """Every committed offset of the group, from its coordinator."""
    version = conn.version_for(OFFSET_FETCH, (2, 9))
    if version >= 8:
        response = conn.call(
            OFFSET_FETCH,
            {"groups": [{"group_id": group_id, "topics": None}], "require_stable": False},
            versions=(version, version),
        )
        group = response.groups[0]
        _check(group.error_code, f"OffsetFetch for {group_id}")
        topics = group.topics
    else:
        response = conn.call(
            OFFSET_FETCH, {"group_id": group_id, "topics": None}, versions=(version, version)
        )
        _check(response.error_code, f"OffsetFetch for {group_id}")
        topics = response.topics
    committed = {}
    for t in topics:
        for p in t.partitions:
            if _error(p.error_code) == ErrorCode.none and int(p.committed_offset) >= 0:
                committed[(t.name, int(p.partition_index))] = int(p.committed_offset)
    return committed


def log_end_offsets(
    cluster: Cluster, partitions: Sequence[TopicPartition]
) -> dict[TopicPartition, int]:
    """The high watermark of each partition, asked of its leader (ListOffsets latest)."""
    return list_offsets(cluster, partitions, LATEST_TIMESTAMP)


# -- resetting offsets --------------------------------------------------------------------

INACTIVE_STATES = ("Empty", "Dead")


@dataclass(frozen=True, slots=True)
class OffsetReset:
    topic: str
    partition: int
    current: int | None
    new: int


def reset_targets(
    cluster: Cluster, group_id: str, topics: Sequence[str], all_topics: bool
) -> list[TopicPartition]:
    """The partitions a reset applies to: `topic` (every partition) or `topic:0,2`
    entries, or with `all_topics` every partition the group has committed offsets for."""
    if all_topics:
        node = find_coordinator(cluster, group_id)
        return sorted(fetch_committed(cluster.connection(node[1], node[2]), group_id))
    chosen: list[TopicPartition] = []
    whole = [t for t in topics if ":" not in t]
    counts = {t.name: len(t.partitions) for t in metadata(cluster, whole).topics} if whole else {}
    for spec in topics:
        name, sep, numbers = spec.partition(":")
        if sep:
            try:
                chosen += [(name, int(n)) for n in numbers.split(",") if n.strip()]
            except ValueError:
                raise ClientError(f"bad partition list in {spec!r}") from None
        else:
            chosen += [(name, p) for p in range(counts[name])]
    return sorted(set(chosen))


def plan_reset(
    cluster: Cluster,
    group_id: str,
    partitions: Sequence[TopicPartition],
    strategy: str,
    value: int | None = None,
) -> list[OffsetReset]:
    """New offsets by `strategy`: "earliest", "latest", "datetime" (value = epoch ms),
    "offset" (value) or "shift" (committed offset + value), the last two kept within each
    partition's earliest..latest as Kafka's tool keeps them."""
    if not partitions:
        raise ClientError("no partitions to reset")
    node = find_coordinator(cluster, group_id)
    committed = fetch_committed(cluster.connection(node[1], node[2]), group_id)
    earliest = list_offsets(cluster, partitions, EARLIEST_TIMESTAMP)
    latest = list_offsets(cluster, partitions, LATEST_TIMESTAMP)
    if strategy == "earliest":
        new = earliest
    elif strategy == "latest":
        new = latest
    elif strategy == "datetime":
        assert value is not None
        new = list_offsets(cluster, partitions, value)
    elif strategy == "offset":
        assert value is not None
        new = {tp: min(max(value, earliest[tp]), latest[tp]) for tp in partitions}
    elif strategy == "shift":
        assert value is not None
        missing = [f"{t}-{p}" for t, p in partitions if (t, p) not in committed]
        if missing:
            raise ClientError(f"no committed offset to shift for {', '.join(missing)}")
        new = {tp: min(max(committed[tp] + value, earliest[tp]), latest[tp]) for tp in partitions}
    else:
        raise ClientError(f"unknown reset strategy {strategy}")
    return [OffsetReset(t, p, committed.get((t, p)), new[(t, p)]) for t, p in partitions]


def apply_reset(cluster: Cluster, group_id: str, plan: Sequence[OffsetReset]) -> None:
    """Commit the planned offsets, as an admin client does (no member, generation -1).

    Kafka's tool refuses while the group has members: their next commit would undo the
    reset. The state is checked first so the refusal says why.
    """
    state = _group_state(cluster, group_id)
    if state not in INACTIVE_STATES:
        raise ClientError(
            f"assignments can only be reset if the group '{group_id}' is inactive, "
            f"but the current state is {state}"
        )
    node = find_coordinator(cluster, group_id)
    by_topic: dict[str, list[OffsetReset]] = {}
    for r in plan:
        by_topic.setdefault(r.topic, []).append(r)
    response = cluster.connection(node[1], node[2]).call(
        OFFSET_COMMIT,
        {
            "group_id": group_id,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [
                {
                    "name": t,
                    "partitions": [
                        {
                            "partition_index": r.partition,
                            "committed_offset": r.new,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "",
                        }
                        for r in rs
                    ],
                }
                for t, rs in by_topic.items()
            ],
        },
        versions=(2, 9),
    )
    for t in response.topics:
        for p in t.partitions:
            _check(p.error_code, f"committing {t.name}-{p.partition_index} for {group_id}")


def delete_group(cluster: Cluster, group_id: str) -> None:
    """DeleteGroups on the group's coordinator: its offsets and state go; a group with
    members is refused (NON_EMPTY_GROUP), as kafka-consumer-groups --delete reports."""
    node = find_coordinator(cluster, group_id)
    response = cluster.connection(node[1], node[2]).call(
        DELETE_GROUPS, {"groups_names": [group_id]}, versions=(0, 2)
    )
    (result,) = response.results
    _check(result.error_code, f"deleting group {group_id}")


def _group_state(cluster: Cluster, group_id: str) -> str:
    for listing in list_groups(cluster):
        if listing.group_id == group_id:
            return listing.state
    return "Dead"


# -- tables -------------------------------------------------------------------------------


def render_list(groups: Sequence[GroupListing]) -> str:
    return table(
        ["GROUP", "TYPE", "STATE", "PROTOCOL-TYPE"],
        [(g.group_id, g.group_type, g.state, g.protocol_type) for g in groups],
    )


def render_description(d: GroupDescription) -> str:
    node_id, host, port = d.coordinator
    head = [
        f"Group {d.group_id} ({d.group_type}), state {d.state}, "
        f"coordinator {node_id} ({host}:{port})",
    ]
    if d.group_type in ("consumer", "share", "streams"):
        head.append(
            f"Group epoch {d.epoch}, assignment epoch {d.assignment_epoch}, "
            f"assignor {d.assignor}, {len(d.members)} members"
        )
    else:
        head.append(f"Protocol {d.assignor or '-'}, {len(d.members)} members")
    members = table(
        ["MEMBER-ID", "CLIENT-ID", "HOST", "EPOCH", "PARTITIONS", "ASSIGNMENT"],
        [
            (
                m.member_id,
                m.client_id,
                m.host,
                m.epoch,
                len(m.assignment),
                _compact(m.assignment) or "-",
            )
            for m in d.members
        ],
    )
    return "\n".join([*head, "", members, "", render_lag(d)])


def render_lag(d: GroupDescription) -> str:
    if d.group_type == "share":
        return _render_share_lag(d)
    body = table(
        ["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "MEMBER-ID", "CLIENT-ID"],
        [
            (
                p.topic,
                p.partition,
                p.committed,
                p.log_end,
                p.lag,
                p.member.member_id if p.member else None,
                p.member.client_id if p.member else None,
            )
            for p in d.partitions
        ],
    )
    return f"{body}\n\nTotal lag: {d.total_lag}"


def _render_share_lag(d: GroupDescription) -> str:
    """A share group's partitions as kafka-share-groups --describe --offsets shows them
    (start offset and lag), with the log end offset and the leader's in-flight count."""
    readers: dict[TopicPartition, int] = {}
    for member in d.members:
        for tp in member.assignment:
            readers[tp] = readers.get(tp, 0) + 1
    body = table(
        ["TOPIC", "PARTITION", "START-OFFSET", "LOG-END-OFFSET", "LAG", "IN-FLIGHT", "MEMBERS"],
        [
            (
                p.topic,
                p.partition,
                p.committed,
                p.log_end,
                p.lag,
                p.in_flight,
                readers.get((p.topic, p.partition), 0),
            )
            for p in d.partitions
        ],
    )
    in_flight = sum(p.in_flight or 0 for p in d.partitions)
    return f"{body}\n\nTotal lag: {d.total_lag}, in flight: {in_flight}"


def _compact(partitions: Iterable[TopicPartition]) -> str:
    """`topic:0-2,5` style: partitions grouped by topic, runs collapsed."""
    by_topic: dict[str, list[int]] = {}
    for t, p in partitions:
        by_topic.setdefault(t, []).append(p)
    parts = []
    for topic in sorted(by_topic):
        numbers = sorted(by_topic[topic])
        runs: list[str] = []
        start = prev = numbers[0]
        for n in [*numbers[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            runs.append(str(start) if start == prev else f"{start}-{prev}")
            if n is not None:
                start = prev = n
        parts.append(f"{topic}:{','.join(runs)}")
    return " ".join(parts)


__all__ = [
    "GroupDescription",
    "OffsetReset",
    "apply_reset",
    "delete_group",
    "plan_reset",
    "reset_targets",
    "GroupListing",
    "MemberInfo",
    "PartitionLag",
    "decode_assignment",
    "describe_group",
    "list_groups",
    "render_description",
    "render_lag",
    "render_list",
]
