"""AlterUserScramCredentials and DescribeUserScramCredentials (KIP-554).

The client sends the salted password; the broker derives and replicates only the stored
and server keys (kbroker.security.scram), so the metadata log never holds anything a
client could log in with. Each request is checked as Kafka checks it, one result per user.
"""

from __future__ import annotations

from collections import Counter
from typing import Protocol

from kio.schema.errors import ErrorCode

from kbroker.controller.errors import ControllerError
from kbroker.handlers.context import RequestContext
from kbroker.handlers.registry import handles
from kbroker.protocol import requests, responses
from kbroker.security.acl import CLUSTER_NAME, Operation, ResourceType
from kbroker.security.scram import (
    MAX_ITERATIONS,
    MECHANISM_TYPES,
    MIN_ITERATIONS,
    TYPE_OF,
    credential_from_salted,
)

DESCRIBE_USER_SCRAM_CREDENTIALS = 50
ALTER_USER_SCRAM_CREDENTIALS = 51


@handles(DESCRIBE_USER_SCRAM_CREDENTIALS, 0)
async def describe_user_scram_credentials(
    ctx: RequestContext, request: requests.DescribeUserScramCredentialsRequest
) -> responses.DescribeUserScramCredentialsResponse:
    if not ctx.allowed(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.cluster_authorization_failed,
            "error_message": None,
            "results": [],
        }
    credentials = ctx.broker.security.state.scram_credentials
    by_user: dict[str, list[responses.CredentialInfo]] = {}
    for (user, mechanism), credential in sorted(credentials.items()):
        by_user.setdefault(user, []).append(
            {"mechanism": TYPE_OF[mechanism], "iterations": credential.iterations}
        )
    asked = [u.name for u in request.users] if request.users else sorted(by_user)
    counts = Counter(asked)
    results: list[responses.DescribeUserScramCredentialsResult] = []
    for name in dict.fromkeys(asked):
        infos: list[responses.CredentialInfo]
        message: str | None
        if counts[name] > 1:
            error, message, infos = (
                ErrorCode.duplicate_resource,
                f"Cannot describe SCRAM credentials for the same user twice: {name}",
                [],
            )
        elif name not in by_user:
            error, message, infos = (
                ErrorCode.resource_not_found,
                f"Attempt to describe nonexistent user {name}",
                [],
            )
        else:
            error, message, infos = ErrorCode.none, None, by_user[name]
        results.append(
            {"user": name, "error_code": error, "error_message": message, "credential_infos": infos}
        )
    return {"throttle_time": 0, "error_code": 0, "error_message": None, "results": results}


class _Change(Protocol):
    """What a deletion and an upsertion both name: a user's credential for a mechanism."""

    @property
    def name(self) -> str: ...
    @property
    def mechanism(self) -> int: ...


@handles(ALTER_USER_SCRAM_CREDENTIALS, 0)
async def alter_user_scram_credentials(
    ctx: RequestContext, request: requests.AlterUserScramCredentialsRequest
) -> responses.AlterUserScramCredentialsResponse:
    changes: tuple[_Change, ...] = (*request.deletions, *request.upsertions)
    if not ctx.allowed(Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        users = dict.fromkeys(c.name for c in changes)
        denied = ErrorCode.cluster_authorization_failed
        return {
            "throttle_time": 0,
            "results": [{"user": u, "error_code": denied, "error_message": None} for u in users],
        }
    existing = ctx.broker.security.state.scram_credentials
    # Kafka's controller takes at most one change per user in a request (any mechanisms).
    per_user = Counter(change.name for change in changes)
    errors: dict[str, tuple[ErrorCode, str]] = {}
    order: list[str] = []

    def refuse(user: str, code: ErrorCode, message: str) -> None:
        errors.setdefault(user, (code, message))

    for change in changes:
        order.append(change.name)
        mechanism = MECHANISM_TYPES.get(change.mechanism)
        if not change.name:
            refuse(change.name, ErrorCode.unacceptable_credential, "Username must not be empty")
        elif mechanism is None:
            refuse(change.name, ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")
        elif per_user[change.name] > 1:
            refuse(
                change.name,
                ErrorCode.duplicate_resource,
                "A user credential cannot be altered twice in the same request",
            )
    for deletion in request.deletions:
        mechanism = MECHANISM_TYPES.get(deletion.mechanism)
        if mechanism is not None and (deletion.name, mechanism) not in existing:
            refuse(
                deletion.name,
                ErrorCode.resource_not_found,
                "Attempt to delete a user credential that does not exist",
            )
    for upsertion in request.upsertions:
        if not MIN_ITERATIONS <= upsertion.iterations <= MAX_ITERATIONS:
            refuse(
                upsertion.name,
                ErrorCode.unacceptable_credential,
                f"Iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}",
            )
        elif not upsertion.salt or not upsertion.salted_password:
            refuse(
                upsertion.name, ErrorCode.unacceptable_credential, "Salt and password must be set"
            )

    upserts = []
    for u in request.upsertions:
        if u.name in errors:
            continue
        mechanism = MECHANISM_TYPES[u.mechanism]
        c = credential_from_salted(mechanism, bytes(u.salt), u.iterations, bytes(u.salted_password))
        upserts.append((u.name, mechanism, c.salt, c.iterations, c.stored_key, c.server_key))
    deletes = [
        (d.name, MECHANISM_TYPES[d.mechanism]) for d in request.deletions if d.name not in errors
    ]
    if upserts or deletes:
        try:
            await ctx.broker.security.alter_scram_credentials(upserts, deletes)
        except ControllerError as exc:
            for user in order:
                refuse(user, ErrorCode(exc.error_code), exc.message)
    results: list[responses.AlterUserScramCredentialsResult] = []
    for user in dict.fromkeys(order):
        code, message = errors.get(user, (ErrorCode.none, None))
        results.append({"user": user, "error_code": code, "error_message": message})
    return {"throttle_time": 0, "results": results}
