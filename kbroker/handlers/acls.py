"""DescribeAcls, CreateAcls and DeleteAcls on a broker without an authorizer.

kbroker authorizes nothing (it refuses to start with `authorizer.class.name` set), so,
as Kafka does when no authorizer is configured, every ACL request is answered
SECURITY_DISABLED. Admin tools and UIs then learn that ACLs are off, instead of failing
on an API the broker does not advertise.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kbroker.handlers.context import RequestContext
from kbroker.handlers.registry import handles

DESCRIBE_ACLS = 29
CREATE_ACLS = 30
DELETE_ACLS = 31
NO_AUTHORIZER = "No Authorizer is configured on the broker"


@handles(DESCRIBE_ACLS, 1)
def describe_acls(ctx: RequestContext, request: Any) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.security_disabled,
        "error_message": NO_AUTHORIZER,
        "resources": [],
    }


@handles(CREATE_ACLS, 1)
def create_acls(ctx: RequestContext, request: Any) -> dict[str, Any]:
    refused = {"error_code": ErrorCode.security_disabled, "error_message": NO_AUTHORIZER}
    return {"throttle_time": 0, "results": [refused for _ in request.creations]}


@handles(DELETE_ACLS, 1)
def delete_acls(ctx: RequestContext, request: Any) -> dict[str, Any]:
    refused = {
        "error_code": ErrorCode.security_disabled,
        "error_message": NO_AUTHORIZER,
        "matching_acls": [],
    }
    return {"throttle_time": 0, "filter_results": [refused for _ in request.filters]}
