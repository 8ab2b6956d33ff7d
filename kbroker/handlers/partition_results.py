"""Per-partition answers of a controller operation, grouped by topic for the response.

The controller answers ElectLeaders and AlterPartitionReassignments with one
(topic, partition, error code, message) tuple per partition; both responses carry
them as a list of topics each holding its partitions' results (under field names that
differ by API, which each handler writes into its own typed entities).
"""

from __future__ import annotations

from collections.abc import Iterable

from kio.schema.errors import ErrorCode

PartitionResult = tuple[str, int, int, str | None]


def by_topic(
    results: Iterable[PartitionResult],
) -> dict[str, list[tuple[int, ErrorCode, str | None]]]:
    """Each topic's (partition, error code, message) results, the topics in the order
    they first appear in `results`."""
    grouped: dict[str, list[tuple[int, ErrorCode, str | None]]] = {}
    for topic, partition, code, message in results:
        grouped.setdefault(topic, []).append((partition, ErrorCode(code), message))
    return grouped
