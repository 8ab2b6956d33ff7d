"""ElectLeaders: every partition already has its preferred leader.

A single broker leads every partition it holds, and that broker is each partition's
first (preferred) and only replica, so no election is ever needed. As Kafka does, a
request naming partitions gets ELECTION_NOT_NEEDED for each existing one and
UNKNOWN_TOPIC_OR_PARTITION for the rest; a request for all partitions (a null list)
gets an empty answer, since Kafka lists only partitions it tried to elect for.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kbroker.handlers.context import RequestContext
from kbroker.handlers.registry import handles

ELECT_LEADERS = 43


@handles(ELECT_LEADERS, 0)
def elect_leaders(ctx: RequestContext, request: Any) -> dict[str, Any]:
    topics = ctx.broker.controller.state.topics
    results = []
    for requested in request.topic_partitions or ():
        info = topics.get(requested.topic)
        count = len(info.partitions) if info is not None else 0
        results.append(
            {
                "topic": requested.topic,
                "partition_result": [
                    _result(partition, 0 <= partition < count) for partition in requested.partitions
                ],
            }
        )
    return {"throttle_time": 0, "error_code": ErrorCode.none, "replica_election_results": results}


def _result(partition: int, exists: bool) -> dict[str, Any]:
    if exists:
        code, message = (
            ErrorCode.election_not_needed,
            "Leader election not needed for topic partition.",
        )
    else:
        code, message = ErrorCode.unknown_topic_or_partition, None
    return {"partition_id": partition, "error_code": code, "error_message": message}
