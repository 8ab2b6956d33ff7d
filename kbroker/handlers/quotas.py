"""AlterClientQuotas and DescribeClientQuotas: the client quotas the broker enforces.

Entities are users and client-ids (a null name is the default entity); the values are
``producer_byte_rate``, ``consumer_byte_rate`` and ``request_percentage``, kept in the
replicated metadata and enforced by kbroker.security.quotas. Keys kbroker does not
enforce (``controller_mutation_rate``, ``connection_creation_rate``, IP entities) are
refused with INVALID_REQUEST rather than accepted and ignored. Filters are checked as
Kafka checks them. Altering needs ALTER_CONFIGS on the cluster, describing
DESCRIBE_CONFIGS (CLUSTER_AUTHORIZATION_FAILED otherwise).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from kio.schema.errors import ErrorCode

from kbroker.controller.errors import ControllerError
from kbroker.handlers.context import RequestContext
from kbroker.handlers.registry import handles
from kbroker.protocol import requests, responses
from kbroker.security.acl import CLUSTER_NAME, Operation, ResourceType
from kbroker.security.quotas import (
    CLIENT_ID,
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    QUOTA_KEYS,
    USER,
    Entity,
)

DESCRIBE_CLIENT_QUOTAS = 48
ALTER_CLIENT_QUOTAS = 49
ENTITY_TYPES = frozenset({USER, CLIENT_ID, "ip"})
ENFORCED_ENTITY_TYPES = frozenset({USER, CLIENT_ID})
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2


@handles(DESCRIBE_CLIENT_QUOTAS, 0)
def describe_client_quotas(
    ctx: RequestContext, request: requests.DescribeClientQuotasRequest
) -> responses.DescribeClientQuotasResponse:
    answer: responses.DescribeClientQuotasResponse = {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "entries": [],
    }
    if not ctx.allowed(Operation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
        return {**answer, "error_code": ErrorCode.cluster_authorization_failed, "entries": None}
    problem = _filter_problem(request.components)
    if problem:
        return {
            **answer,
            "error_code": ErrorCode.invalid_request,
            "error_message": problem,
            "entries": None,
        }
    strict = request.strict
    entries: list[responses.DescribeClientQuotasEntryData] = []
    for entity, values in ctx.broker.security.state.client_quotas.items():
        if _matches(entity, request.components, strict):
            entries.append(
                {
                    "entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                    "values": [{"key": k, "value": float(v)} for k, v in sorted(values.items())],
                }
            )
    answer["entries"] = entries
    return answer


class _Component(Protocol):
    """One component of a DescribeClientQuotas filter."""

    @property
    def entity_type(self) -> str: ...
    @property
    def match_type(self) -> int: ...
    @property
    def match(self) -> str | None: ...


class _EntityPart(Protocol):
    @property
    def entity_type(self) -> str: ...
    @property
    def entity_name(self) -> str | None: ...


class _Op(Protocol):
    @property
    def key(self) -> str: ...
    @property
    def value(self) -> float: ...
    @property
    def remove(self) -> bool: ...


class _Entry(Protocol):
    """One entity's changes in AlterClientQuotas."""

    @property
    def entity(self) -> Sequence[_EntityPart]: ...
    @property
    def ops(self) -> Sequence[_Op]: ...


def _matches(entity: Entity, components: Sequence[_Component], strict: bool) -> bool:
    names = dict(entity)
    for c in components:
        if c.entity_type not in names:
            return False
        name = names[c.entity_type]
        if c.match_type == MATCH_EXACT and name != c.match:
            return False
        if c.match_type == MATCH_DEFAULT and name is not None:
            return False
    return not strict or len(names) == len(components)


def _filter_problem(components: Sequence[_Component]) -> str | None:
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


def _entry_problem(entry: _Entry) -> str | None:
    kinds = [e.entity_type for e in entry.entity]
    if not kinds:
        return "Invalid empty client quota entity"
    if len(set(kinds)) != len(kinds):
        return "Duplicate entity type in client quota entity"
    for kind in kinds:
        if kind == "ip":
            return "kbroker does not enforce IP quotas (connection_creation_rate)"
        if kind not in ENTITY_TYPES:
            return f"Custom entity type '{kind}' not supported"
    for op in entry.ops:
        if op.key not in QUOTA_KEYS:
            return f"kbroker does not enforce the client quota {op.key!r}"
        if op.remove:
            continue
        if op.value <= 0:
            return f"{op.key} must be positive"
        if op.key in (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE) and op.value != int(op.value):
            return f"{op.key} must be a whole number of bytes per second"
    return None


@handles(ALTER_CLIENT_QUOTAS, 0)
async def alter_client_quotas(
    ctx: RequestContext, request: requests.AlterClientQuotasRequest
) -> responses.AlterClientQuotasResponse:
    def entity_of(entry: _Entry) -> list[responses.AlterClientQuotasEntityData]:
        return [{"entity_type": e.entity_type, "entity_name": e.entity_name} for e in entry.entity]

    if not ctx.allowed(Operation.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
        denied = ErrorCode.cluster_authorization_failed
        return {
            "throttle_time": 0,
            "entries": [
                {"error_code": denied, "error_message": None, "entity": entity_of(e)}
                for e in request.entries
            ],
        }
    results: list[responses.AlterClientQuotasEntryData] = []
    changes: list[tuple[Entity, dict[str, float], list[str]]] = []
    for entry in request.entries:
        problem = _entry_problem(entry)
        results.append(
            {
                "error_code": ErrorCode.invalid_request if problem else ErrorCode.none,
                "error_message": problem,
                "entity": entity_of(entry),
            }
        )
        if problem is None:
            entity = tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity))
            values = {op.key: float(op.value) for op in entry.ops if not op.remove}
            removed = [op.key for op in entry.ops if op.remove]
            changes.append((entity, values, removed))
    if changes and not request.validate_only:
        try:
            await ctx.broker.security.alter_client_quotas(changes)
        except ControllerError as exc:
            for r in results:
                if r["error_code"] == ErrorCode.none:
                    r["error_code"], r["error_message"] = ErrorCode(exc.error_code), exc.message
    return {"throttle_time": 0, "entries": results}
