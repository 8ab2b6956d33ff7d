"""Per-partition answers of a controller operation, grouped by topic for the response.

The controller answers ElectLeaders and AlterPartitionReassignments with one
(topic, partition, error code, message) tuple per partition; both responses carry
them as a list of topics each holding its partitions' results, under field names
that differ by API, so the grouping is written once here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kio.schema.errors import ErrorCode

PartitionResult = tuple[str, int, int, str | None]


def results_by_topic(
    results: Iterable[PartitionResult], topic_field: str, partitions_field: str, index_field: str
) -> list[dict[str, Any]]:
    """One entry per topic, in the order the topics first appear in `results`:
    {topic_field: name, partitions_field: [{index_field, error_code, error_message}]}."""
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for topic, partition, code, message in results:
        by_topic.setdefault(topic, []).append(
            {index_field: partition, "error_code": ErrorCode(code), "error_message": message}
        )
    return [
        {topic_field: topic, partitions_field: partitions} for topic, partitions in by_topic.items()
    ]
