"""CreateAcls, DescribeAcls and DeleteAcls against the replicated ACLs.

With ``authorizer.class.name`` empty, as Kafka does without an authorizer, every ACL
request is answered SECURITY_DISABLED, so admin tools learn ACLs are off. With the
StandardAuthorizer, creating and deleting need ALTER on the cluster and describing needs
DESCRIBE on it (CLUSTER_AUTHORIZATION_FAILED otherwise); bindings and filters are checked
as Kafka checks them (INVALID_REQUEST), and the ACLs are replicated metadata.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Protocol, TypeVar

from kio.schema.errors import ErrorCode

from kbroker.controller.errors import ControllerError
from kbroker.handlers.context import RequestContext, caught_up
from kbroker.handlers.registry import handles
from kbroker.protocol import requests, responses
from kbroker.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    binding_problem,
)

DESCRIBE_ACLS = 29
CREATE_ACLS = 30
DELETE_ACLS = 31
NO_AUTHORIZER = "No Authorizer is configured on the broker"
CLUSTER_DENIED = "Cluster authorization failed."


def _cluster_allowed(ctx: RequestContext, operation: Operation) -> bool:
    return ctx.allowed(operation, ResourceType.CLUSTER, CLUSTER_NAME)


class _Filter(Protocol):
    """A DescribeAcls request or a DeleteAcls filter (v1+: both carry a pattern type)."""

    @property
    def resource_type_filter(self) -> int: ...
    @property
    def resource_name_filter(self) -> str | None: ...
    @property
    def pattern_type_filter(self) -> int: ...
    @property
    def principal_filter(self) -> str | None: ...
    @property
    def host_filter(self) -> str | None: ...
    @property
    def operation(self) -> int: ...
    @property
    def permission_type(self) -> int: ...


def _filter(f: _Filter) -> AclFilter:
    return AclFilter(
        _enum(ResourceType, f.resource_type_filter),
        f.resource_name_filter,
        _enum(PatternType, f.pattern_type_filter),
        f.principal_filter,
        f.host_filter,
        _enum(Operation, f.operation),
        _enum(Permission, f.permission_type),
    )


AclEnum = TypeVar("AclEnum", ResourceType, PatternType, Operation, Permission)


def _enum(kind: type[AclEnum], value: int) -> AclEnum:
    """The member for a wire value; UNKNOWN for a value this broker does not know."""
    try:
        return kind(int(value))
    except ValueError:
        return kind["UNKNOWN"]


def _described(b: AclBinding) -> responses.AclDescription:
    return {
        "principal": b.principal,
        "host": b.host,
        "operation": int(b.operation),
        "permission_type": int(b.permission),
    }


@handles(DESCRIBE_ACLS, 0)  # v0 through protocol.legacy_messages
def describe_acls(
    ctx: RequestContext, request: requests.DescribeAclsRequest
) -> responses.DescribeAclsResponse:
    answer: responses.DescribeAclsResponse = {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "resources": [],
    }
    if ctx.broker.authorizer is None:
        return {**answer, "error_code": ErrorCode.security_disabled, "error_message": NO_AUTHORIZER}
    if not _cluster_allowed(ctx, Operation.DESCRIBE):
        return {
            **answer,
            "error_code": ErrorCode.cluster_authorization_failed,
            "error_message": CLUSTER_DENIED,
        }
    acl_filter = _filter(request)
    if acl_filter.problem:
        return {
            **answer,
            "error_code": ErrorCode.invalid_request,
            "error_message": acl_filter.problem,
        }
    grouped: dict[tuple[ResourceType, str, PatternType], list[AclBinding]] = defaultdict(list)
    for b in ctx.broker.security.state.acls:
        if acl_filter.matches(b):
            grouped[(b.resource_type, b.resource_name, b.pattern_type)].append(b)
    answer["resources"] = [
        {
            "resource_type": int(rtype),
            "resource_name": name,
            "pattern_type": int(pattern),
            "acls": [_described(b) for b in bindings],
        }
        for (rtype, name, pattern), bindings in grouped.items()
    ]
    return answer


@handles(CREATE_ACLS, 0)  # v0 through protocol.legacy_messages
async def create_acls(
    ctx: RequestContext, request: requests.CreateAclsRequest
) -> responses.CreateAclsResponse:
    def result(code: ErrorCode, message: str | None = None) -> responses.AclCreationResult:
        return {"error_code": code, "error_message": message}

    if ctx.broker.authorizer is None:
        refused = result(ErrorCode.security_disabled, NO_AUTHORIZER)
        return {"throttle_time": 0, "results": [refused for _ in request.creations]}
    if not _cluster_allowed(ctx, Operation.ALTER):
        refused = result(ErrorCode.cluster_authorization_failed, CLUSTER_DENIED)
        return {"throttle_time": 0, "results": [refused for _ in request.creations]}
    results: list[responses.AclCreationResult] = []
    valid: list[AclBinding] = []
    for c in request.creations:
        binding = AclBinding(
            _enum(ResourceType, c.resource_type),
            c.resource_name,
            _enum(PatternType, c.resource_pattern_type),
            c.principal,
            c.host,
            _enum(Operation, c.operation),
            _enum(Permission, c.permission_type),
        )
        problem = binding_problem(binding)
        if problem:
            results.append(result(ErrorCode.invalid_request, problem))
        else:
            results.append(result(ErrorCode.none))
            valid.append(binding)
    if valid:
        try:
            await ctx.broker.security.create_acls(valid)
        except ControllerError as exc:
            failed = result(ErrorCode(exc.error_code), exc.message)
            results = [failed if r["error_code"] == ErrorCode.none else r for r in results]
    return {"throttle_time": 0, "results": results}


@handles(DELETE_ACLS, 0)  # v0 through protocol.legacy_messages
async def delete_acls(
    ctx: RequestContext, request: requests.DeleteAclsRequest
) -> responses.DeleteAclsResponse:
    def refused(code: ErrorCode, message: str) -> responses.DeleteAclsFilterResult:
        return {"error_code": code, "error_message": message, "matching_acls": []}

    if ctx.broker.authorizer is None:
        no = refused(ErrorCode.security_disabled, NO_AUTHORIZER)
        return {"throttle_time": 0, "filter_results": [no for _ in request.filters]}
    if not _cluster_allowed(ctx, Operation.ALTER):
        no = refused(ErrorCode.cluster_authorization_failed, CLUSTER_DENIED)
        return {"throttle_time": 0, "filter_results": [no for _ in request.filters]}
    # The bindings to delete are matched in the fresh image, as Kafka's controller
    # matches them in its own: ACLs created through another node a moment ago included.
    await caught_up(ctx.broker.controller)
    existing = ctx.broker.security.state.acls
    results: list[responses.DeleteAclsFilterResult] = []
    doomed: dict[AclBinding, None] = {}
    for f in request.filters:
        acl_filter = _filter(f)
        if acl_filter.problem:
            results.append(refused(ErrorCode.invalid_request, acl_filter.problem))
            continue
        matching = [b for b in existing if acl_filter.matches(b)]
        doomed.update(dict.fromkeys(matching))
        results.append(
            {
                "error_code": ErrorCode.none,
                "error_message": None,
                "matching_acls": [
                    {
                        "error_code": ErrorCode.none,
                        "error_message": None,
                        "resource_type": int(b.resource_type),
                        "resource_name": b.resource_name,
                        "pattern_type": int(b.pattern_type),
                        **_described(b),
                    }
                    for b in matching
                ],
            }
        )
    if doomed:
        try:
            await ctx.broker.security.delete_acls(list(doomed))
        except ControllerError as exc:
            results = [refused(ErrorCode(exc.error_code), exc.message) for _ in results]
    return {"throttle_time": 0, "filter_results": results}
