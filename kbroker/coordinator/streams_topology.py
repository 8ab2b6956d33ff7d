"""A streams group's topology checked against the cluster, as Kafka's ConfiguredTopology:
how many tasks each subtopology has, which internal topics (repartition, changelog) the
broker must create and with how many partitions, and what stops the group from running
(the heartbeat's status codes).

Request-level validation (`validate_topology`) raises for a topology no cluster could
run (STREAMS_INVALID_TOPOLOGY); `configure` decides against the topics there are now.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kbroker.coordinator.streams_group import Subtopology, TopicInfo, Topology

# StreamsGroupHeartbeatResponse's status codes (Kafka 4.3).
STALE_TOPOLOGY = 0
MISSING_SOURCE_TOPICS = 1
INCORRECTLY_PARTITIONED_TOPICS = 2
MISSING_INTERNAL_TOPICS = 3
SHUTDOWN_APPLICATION = 4
ASSIGNMENT_DELAYED = 5

_LEGAL = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


class InvalidTopology(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class InternalTopic:
    """An internal topic to create: name, partitions, replication factor (0: the
    broker's default) and topic configs."""

    name: str
    partitions: int
    replication_factor: int
    configs: tuple[tuple[str, str], ...] = ()


@dataclass(slots=True)
class ConfiguredTopology:
    """The outcome of checking a topology against the topics there are."""

    tasks: dict[str, int] = field(default_factory=dict)  # subtopology -> tasks; empty if not ready
    statuses: list[tuple[int, str]] = field(default_factory=list)
    to_create: list[InternalTopic] = field(default_factory=list)

    @property
    def ready(self) -> bool:
        return not self.statuses


def _check_name(name: str) -> None:
    if not name or name in (".", "..") or len(name) > 249 or not set(name) <= _LEGAL:
        raise InvalidTopology(f"Topic name {name!r} is not a legal topic name.")


def validate_topology(topology: Topology) -> None:
    """Kafka's checks of a topology a member sends (STREAMS_INVALID_TOPOLOGY)."""
    seen: set[str] = set()
    repartition_sources: set[str] = set()
    for s in topology.subtopologies:
        if not s.subtopology_id:
            raise InvalidTopology("Subtopology IDs must be non-empty.")
        if s.subtopology_id in seen:
            raise InvalidTopology(f"Duplicate subtopology ID {s.subtopology_id}.")
        seen.add(s.subtopology_id)
        if not s.source_topics and not s.source_topic_regex and not s.repartition_source_topics:
            raise InvalidTopology(f"Subtopology {s.subtopology_id} has no source topics.")
        if s.source_topic_regex:
            raise InvalidTopology(
                f"Subtopology {s.subtopology_id} reads topics by regular expression, which "
                "kbroker does not serve."
            )
        for name in s.source_topics:
            _check_name(name)
        for info in (*s.state_changelog_topics, *s.repartition_source_topics):
            _check_name(info.name)
            if info.partitions < 0:
                raise InvalidTopology(f"Topic {info.name} has a negative number of partitions.")
        for info in s.state_changelog_topics:
            if info.partitions != 0:
                raise InvalidTopology(
                    f"Changelog topic {info.name} must have an undefined partition count, "
                    f"but it is set to {info.partitions}."
                )
        repartition_sources.update(t.name for t in s.repartition_source_topics)
        for group in s.copartition_groups:
            for index, bound in (
                (group.source_topics, len(s.source_topics)),
                (group.source_topic_regex, len(s.source_topic_regex)),
                (group.repartition_source_topics, len(s.repartition_source_topics)),
            ):
                for i in index:
                    if not 0 <= i < bound:
                        raise InvalidTopology(
                            f"Copartition group of subtopology {s.subtopology_id} refers to "
                            f"topic index {i}, which does not exist."
                        )
    for s in topology.subtopologies:
        for sink in s.repartition_sink_topics:
            if sink not in repartition_sources:
                raise InvalidTopology(
                    f"Repartition sink topic {sink} of subtopology {s.subtopology_id} is not "
                    "a repartition source topic of any subtopology."
                )
        overlap = set(s.source_topics) & {t.name for t in s.repartition_source_topics}
        if overlap:
            raise InvalidTopology(
                f"Topics {sorted(overlap)} are both source and repartition source topics."
            )


def configure(
    topology: Topology,
    topics: Mapping[str, int],
    group_id: str = "",
) -> ConfiguredTopology:
    """Check `topology` against the existing topics (name -> partitions)."""
    out = ConfiguredTopology()
    missing_sources = sorted(
        {t for s in topology.subtopologies for t in s.source_topics if t not in topics}
    )
    if missing_sources:
        out.statuses.append(
            (MISSING_SOURCE_TOPICS, f"Source topics {', '.join(missing_sources)} are missing.")
        )
        return out

    # Repartition topics: a declared count, else the most tasks of any subtopology
    # writing to it, found by iterating until nothing changes (Kafka's RepartitionTopics).
    repartition: dict[str, TopicInfo] = {}
    for s in topology.subtopologies:
        for info in s.repartition_source_topics:
            repartition[info.name] = info
    counts: dict[str, int] = {n: i.partitions for n, i in repartition.items() if i.partitions > 0}

    def tasks_of(s: Subtopology) -> int | None:
        sizes = [topics[t] for t in s.source_topics]
        for info in s.repartition_source_topics:
            n = counts.get(info.name)
            if n is None:
                return None
            sizes.append(n)
        return max(sizes) if sizes else 0

    changed = True
    while changed:
        changed = False
        for name in repartition:
            if name in counts:
                continue
            writers = [
                n
                for s in topology.subtopologies
                if name in s.repartition_sink_topics
                for n in [tasks_of(s)]
            ]
            if writers and all(n is not None for n in writers):
                counts[name] = max(n for n in writers if n is not None)
                changed = True

    # Copartitioned topics must agree; repartition topics with no count take the others'.
    for s in topology.subtopologies:
        for group in s.copartition_groups:
            external = [s.source_topics[i] for i in group.source_topics]
            internal = [
                s.repartition_source_topics[i].name for i in group.repartition_source_topics
            ]
            sizes = {topics[t] for t in external}
            if len(sizes) > 1:
                out.statuses.append(
                    (
                        INCORRECTLY_PARTITIONED_TOPICS,
                        f"Following topics do not have the same number of partitions: "
                        f"[{', '.join(sorted(external))}]",
                    )
                )
                return out
            if sizes:
                (size,) = sizes
                for name in internal:
                    declared = repartition[name].partitions
                    if declared > 0 and declared != size:
                        out.statuses.append(
                            (
                                INCORRECTLY_PARTITIONED_TOPICS,
                                f"Number of partitions {declared} of repartition topic {name} "
                                f"does not match the number of partitions {size} of the "
                                "topics it is copartitioned with.",
                            )
                        )
                        return out
                    counts[name] = size
            else:
                known = {counts[n] for n in internal if n in counts}
                if known:
                    size = max(known)
                    for name in internal:
                        counts[name] = size
    unresolved = sorted(n for n in repartition if n not in counts)
    if unresolved:
        out.statuses.append(
            (
                INCORRECTLY_PARTITIONED_TOPICS,
                f"The number of partitions of repartition topics {', '.join(unresolved)} "
                "cannot be determined.",
            )
        )
        return out

    tasks: dict[str, int] = {}
    for s in topology.subtopologies:
        n = tasks_of(s)
        tasks[s.subtopology_id] = n or 0

    wanted: dict[str, InternalTopic] = {}
    for name, info in repartition.items():
        wanted[name] = InternalTopic(name, counts[name], info.replication_factor, info.configs)
    for s in topology.subtopologies:
        for info in s.state_changelog_topics:
            wanted[info.name] = InternalTopic(
                info.name, tasks[s.subtopology_id], info.replication_factor, info.configs
            )
    wrong = []
    for name, topic in sorted(wanted.items()):
        have = topics.get(name)
        if have is None:
            out.to_create.append(topic)
        elif have != topic.partitions:
            wrong.append(f"{name} (expected {topic.partitions}, found {have})")
    if wrong:
        out.statuses.append(
            (
                INCORRECTLY_PARTITIONED_TOPICS,
                f"Internal topics have the wrong number of partitions: {', '.join(wrong)}",
            )
        )
        return out
    if out.to_create:
        out.statuses.append(
            (
                MISSING_INTERNAL_TOPICS,
                f"Internal topics are missing: [{', '.join(t.name for t in out.to_create)}]",
            )
        )
        return out
    out.tasks = tasks
    return out
