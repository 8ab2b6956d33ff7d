"""Metadata's topic entries, written once for as long as what they show stays.

Clients ask Metadata for the same topics again and again (at start, at every refresh,
after every retriable error), and the topics are most of the answer: written from a
description, a topic cost some 5 µs a partition, 225-280 µs for one of 50. What
an entry shows comes from the topic's `TopicInfo`, which the controller's state replaces
(it is frozen) whenever a partition's leader, ISR or replicas change, and from the
brokers' liveness and offline replicas. So the bytes written for one `TopicInfo` under
one view of the brokers are kept and copied into later answers while both stay, as
Kafka answers Metadata from its metadata image instead of describing each partition
anew.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kbroker.controller.state import BrokerInfo, TopicInfo
from kbroker.protocol import legacy_messages, messages, response_writer, responses
from kbroker.protocol.entity_build import field_plan

METADATA = 3
BrokersView = tuple[tuple[int, bool, frozenset[tuple[object, int]]], ...]
"""What of the brokers a topic's entry shows: (node id, fenced, offline replicas)."""


@dataclass(slots=True)
class WrittenTopic:
    """A topic's entry: its description and the bytes written from it."""

    topic: TopicInfo
    brokers: BrokersView
    description: responses.MetadataResponseTopic
    written: bytes


def brokers_view(brokers: Mapping[int, BrokerInfo]) -> BrokersView:
    return tuple((n, b.fenced, b.offline_replicas) for n, b in brokers.items())


def answer_type(version: int) -> type:
    return messages.response_type(METADATA, messages.wire_version(METADATA, version))


@functools.cache
def topic_type(version: int) -> type:
    """The entity class of a Metadata answer's topic in this version."""
    for name, _kind, nested, _is_array, _default in field_plan(answer_type(version)):
        if name == "topics" and nested is not None:
            return nested
    raise LookupError(f"Metadata v{version} has no topics")


def write_answer(
    version: int,
    answer: responses.MetadataResponse,
    topics: list[WrittenTopic | responses.MetadataResponseTopic],
) -> bytes | None:
    """The answer's body with `topics` in place of its described ones (the written
    entries copied as they are), or None where only descriptions can be written."""
    if (METADATA, version) in legacy_messages.LEGACY:
        return None
    prewritten = dict(answer)
    prewritten["topics"] = [t.written if type(t) is WrittenTopic else t for t in topics]
    try:
        return response_writer.write(answer_type(version), prewritten)
    except response_writer.GiveUp:
        return None


class TopicAnswers:
    """The entries written so far, by (topic name, version). Bounded: past `limit`
    entries (topics deleted, versions no longer asked for) all are dropped at once; the
    handler raises the bound to four versions of every topic there is."""

    def __init__(self, limit: int = 4096) -> None:
        self.limit = limit
        self._entries: dict[tuple[str, int], WrittenTopic] = {}

    def hold(self, topics: int) -> None:
        """Keep entries for four versions of `topics` topics, 4,096 at least."""
        self.limit = max(4096, 4 * topics)

    def entry(
        self,
        topic: TopicInfo,
        version: int,
        view: BrokersView,
        describe: Callable[[], responses.MetadataResponseTopic],
    ) -> WrittenTopic | responses.MetadataResponseTopic:
        """The topic's entry, written now if nothing written for this `TopicInfo` and
        brokers' view is kept; its description alone if the writer cannot write it."""
        key = (topic.name, version)
        kept = self._entries.get(key)
        if kept is not None and kept.topic is topic and kept.brokers == view:
            return kept
        description = describe()
        try:
            written = response_writer.write_within(
                answer_type(version), topic_type(version), description
            )
        except response_writer.GiveUp:
            return description
        if len(self._entries) >= self.limit:
            self._entries.clear()
        entry = self._entries[key] = WrittenTopic(topic, view, description, written)
        return entry

    def __len__(self) -> int:
        return len(self._entries)
