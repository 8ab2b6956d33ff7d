"""ElectLeaders: preferred-leader and unclean elections through the controller.

PREFERRED gives a partition back to its first replica when that replica is in the ISR
and live (ELECTION_NOT_NEEDED when it already leads, PREFERRED_LEADER_NOT_AVAILABLE
when it cannot); UNCLEAN gives a leaderless partition a leader, from outside the ISR if
need be (ELIGIBLE_LEADERS_NOT_AVAILABLE when no replica is live). A request naming
partitions gets a result for each; a request for all partitions (a null list) lists
only those an election was tried for, as Kafka does. Version 0 has no election type
(it is PREFERRED) and no top-level error code.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from kbroker.controller import ControllerError
from kbroker.handlers.context import RequestContext
from kbroker.handlers.partition_results import by_topic
from kbroker.handlers.registry import handles
from kbroker.protocol import requests, responses
from kbroker.security.acl import CLUSTER_NAME, Operation, ResourceType

ELECT_LEADERS = 43
PREFERRED, UNCLEAN = 0, 1


@handles(ELECT_LEADERS, 0)
async def elect_leaders(
    ctx: RequestContext, request: requests.ElectLeadersRequest
) -> responses.ElectLeadersResponse:
    election_type = request.election_type
    response: responses.ElectLeadersResponse = {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "replica_election_results": [],
    }
    if election_type not in (PREFERRED, UNCLEAN):
        response["error_code"] = ErrorCode.invalid_request
        return response
    if not ctx.allowed(Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        response["error_code"] = ErrorCode.cluster_authorization_failed
        return response
    wanted = (
        None
        if request.topic_partitions is None
        else [(t.topic, int(p)) for t in request.topic_partitions for p in t.partitions]
    )
    try:
        results = await ctx.broker.controller.elect_leaders(election_type, wanted)
    except ControllerError as exc:
        if ctx.version == 0:  # no top-level error: every partition carries it
            results = [(t, p, exc.error_code, exc.message) for t, p in wanted or ()]
        else:
            response["error_code"] = ErrorCode(exc.error_code)
            return response
    response["replica_election_results"] = [
        {
            "topic": topic,
            "partition_result": [
                {"partition_id": index, "error_code": code, "error_message": message}
                for index, code, message in partitions
            ],
        }
        for topic, partitions in by_topic(results).items()
    ]
    return response
