"""DescribeClientQuotas: kbroker sets no client quotas, so none match.

The filter is still checked as Kafka checks it (known entity types, each at most once,
a name with an exact match and none otherwise), so a malformed filter fails here as it
would on Kafka. AlterClientQuotas is not served: a quota the broker would not enforce
must not look accepted.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kbroker.handlers.context import RequestContext
from kbroker.handlers.registry import handles

DESCRIBE_CLIENT_QUOTAS = 48
ENTITY_TYPES = frozenset({"user", "client-id", "ip"})
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2


@handles(DESCRIBE_CLIENT_QUOTAS, 0)
def describe_client_quotas(ctx: RequestContext, request: Any) -> dict[str, Any]:
    problem = _filter_problem(request.components)
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.invalid_request if problem else ErrorCode.none,
        "error_message": problem,
        "entries": None if problem else [],
    }


def _filter_problem(components: Any) -> str | None:
    seen: set[str] = set()
    for component in components:
        kind = component.entity_type
        if kind not in ENTITY_TYPES:
            return f"Custom entity type '{kind}' not supported"
        if kind in seen:
            return f"Duplicate entity type '{kind}'"
        seen.add(kind)
        if component.match_type == MATCH_EXACT and component.match is None:
            return f"Exact match for '{kind}' needs a name"
        if component.match_type in (MATCH_DEFAULT, MATCH_ANY) and component.match is not None:
            return f"Unexpected name for a non-exact match of '{kind}'"
        if component.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY):
            return f"Unknown match type {component.match_type}"
    return None
