"""Create, Renew, Expire and DescribeDelegationToken (KIP-48, KIP-373) as Kafka answers them.

Tokens live in the metadata log (kbroker.controller's delegation_tokens, never their
HMACs, which each node derives from ``delegation.token.secret.key``); without that key
every request is answered DELEGATION_TOKEN_AUTH_DISABLED. As on Kafka, none of them is
allowed over a connection that proved no identity (PLAINTEXT, or TLS without a client
certificate) or one authenticated with a token. Creating a token for another owner needs
CREATE_TOKENS on that USER; describing another's token needs DESCRIBE on the token or
DESCRIBE_TOKENS on its owner; renewing and expiring are for the owner, the requester and
the renewers.
"""

from __future__ import annotations

import datetime
import hmac as _hmac
import time

from kio.schema.errors import ErrorCode

from kbroker.controller import ControllerError
from kbroker.controller.state import DelegationToken
from kbroker.handlers.context import RequestContext
from kbroker.handlers.registry import handles
from kbroker.protocol import requests, responses
from kbroker.protocol.messages import duration_ms
from kbroker.security.acl import Operation, ResourceType
from kbroker.security.principal import ANONYMOUS
from kbroker.security.tokens import new_token_id, token_hmac

CREATE_DELEGATION_TOKEN = 38
RENEW_DELEGATION_TOKEN = 39
EXPIRE_DELEGATION_TOKEN = 40
DESCRIBE_DELEGATION_TOKEN = 41

E = ErrorCode
USER_TYPE = "User"


def _ts(ms: int) -> datetime.datetime:
    """A timestamp field; -1 (none) too, which kio's int conversion would make null."""
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _allowed(ctx: RequestContext) -> bool:
    """Kafka's allowTokenRequests: an authenticated identity, not a token's."""
    principal = ctx.principal
    return not principal.token_authenticated and principal != ANONYMOUS


def _secret(ctx: RequestContext) -> str | None:
    secret = ctx.broker.config.delegation_token_secret_key
    return str(secret) if secret else None


def _split(principal: str) -> tuple[str, str]:
    kind, _, name = principal.partition(":")
    return kind, name


def _may_renew(ctx: RequestContext, token: DelegationToken) -> bool:
    me = str(ctx.principal)
    return me in (token.owner, token.requester) or me in token.renewers


def _by_hmac(ctx: RequestContext, secret: str, mac: bytes) -> DelegationToken | None:
    for token in ctx.broker.controller.state.delegation_tokens.values():
        if _hmac.compare_digest(token_hmac(secret, token.token_id), mac):
            return token
    return None


def _controller_code(exc: ControllerError) -> ErrorCode:
    try:
        return ErrorCode(exc.error_code)
    except ValueError:
        return E.unknown_server_error


@handles(CREATE_DELEGATION_TOKEN, 0)
async def create_delegation_token(
    ctx: RequestContext, request: requests.CreateDelegationTokenRequest
) -> responses.CreateDelegationTokenResponse:
    requester = str(ctx.principal)
    owner_type = request.owner_principal_type
    owner_name = request.owner_principal_name
    owner = f"{owner_type}:{owner_name}" if owner_name else requester

    def answer(
        code: ErrorCode, token: DelegationToken | None = None, mac: bytes = b""
    ) -> responses.CreateDelegationTokenResponse:
        kind, name = _split(owner)
        body: responses.CreateDelegationTokenResponse = {
            "error_code": code,
            "principal_type": kind,
            "principal_name": name,
            "issue_timestamp": _ts(token.issue_ms if token else -1),
            "expiry_timestamp": _ts(token.expiry_ms if token else -1),
            "max_timestamp": _ts(token.max_ms if token else -1),
            "token_id": token.token_id if token else "",
            "hmac": mac,
            "throttle_time": 0,
        }
        if ctx.version >= 3:
            r_kind, r_name = _split(requester)
            body["token_requester_principal_type"] = r_kind
            body["token_requester_principal_name"] = r_name
        return body

    if not _allowed(ctx):
        return answer(E.delegation_token_request_not_allowed)
    secret = _secret(ctx)
    if secret is None:
        return answer(E.delegation_token_auth_disabled)
    if (owner_name and owner_type != USER_TYPE) or any(
        r.principal_type != USER_TYPE for r in request.renewers
    ):
        return answer(E.invalid_principal_type)
    if owner != requester and not ctx.allowed(Operation.CREATE_TOKENS, ResourceType.USER, owner):
        return answer(E.delegation_token_authorization_failed)
    config = ctx.broker.config
    longest = int(config.delegation_token_max_lifetime_ms)
    asked = duration_ms(request.max_lifetime)
    lifetime = longest if asked <= 0 else min(asked, longest)
    now = _now_ms()
    token = DelegationToken(
        new_token_id(),
        owner,
        requester,
        tuple(f"{r.principal_type}:{r.principal_name}" for r in request.renewers),
        now,
        min(now + lifetime, now + int(config.delegation_token_expiry_time_ms)),
        now + lifetime,
    )
    try:
        await ctx.broker.security.put_delegation_token(token)
    except ControllerError as exc:
        return answer(_controller_code(exc))
    return answer(E.none, token, token_hmac(secret, token.token_id))


async def _change_expiry(
    ctx: RequestContext, mac: bytes, period_ms: int, renewing: bool
) -> responses.RenewDelegationTokenResponse:
    """Renew (expiry moved to now + period, the default period when negative) or expire
    (at once when the period is negative), never past the token's max timestamp."""

    def answer(code: ErrorCode, expiry: int = -1) -> responses.RenewDelegationTokenResponse:
        return {"error_code": code, "expiry_timestamp": _ts(expiry), "throttle_time": 0}

    if not _allowed(ctx):
        return answer(E.delegation_token_request_not_allowed)
    secret = _secret(ctx)
    if secret is None:
        return answer(E.delegation_token_auth_disabled)
    token = _by_hmac(ctx, secret, mac)
    if token is None:
        return answer(E.delegation_token_not_found)
    if not _may_renew(ctx, token):
        return answer(E.delegation_token_owner_mismatch)
    now = _now_ms()
    if token.max_ms < now or token.expiry_ms < now:
        return answer(E.delegation_token_expired)
    security = ctx.broker.security
    try:
        if not renewing and period_ms < 0:
            await security.remove_delegation_tokens([token.token_id])
            return answer(E.none, now)
        if renewing and period_ms < 0:
            period_ms = int(ctx.broker.config.delegation_token_expiry_time_ms)
        expiry = min(token.max_ms, now + period_ms)
        await security.put_delegation_token(
            DelegationToken(
                token.token_id,
                token.owner,
                token.requester,
                token.renewers,
                token.issue_ms,
                expiry,
                token.max_ms,
            ),
            existing=True,
        )
    except ControllerError as exc:
        return answer(_controller_code(exc))
    return answer(E.none, expiry)


@handles(RENEW_DELEGATION_TOKEN, 0)
async def renew_delegation_token(
    ctx: RequestContext, request: requests.RenewDelegationTokenRequest
) -> responses.RenewDelegationTokenResponse:
    return await _change_expiry(ctx, bytes(request.hmac), duration_ms(request.renew_period), True)


@handles(EXPIRE_DELEGATION_TOKEN, 0)
async def expire_delegation_token(
    ctx: RequestContext, request: requests.ExpireDelegationTokenRequest
) -> responses.ExpireDelegationTokenResponse:
    period = duration_ms(request.expiry_time_period)
    return await _change_expiry(ctx, bytes(request.hmac), period, False)


@handles(DESCRIBE_DELEGATION_TOKEN, 0)
def describe_delegation_token(
    ctx: RequestContext, request: requests.DescribeDelegationTokenRequest
) -> responses.DescribeDelegationTokenResponse:
    def answer(
        code: ErrorCode, tokens: list[responses.DescribedDelegationToken] | None = None
    ) -> responses.DescribeDelegationTokenResponse:
        return {"error_code": code, "tokens": tokens or [], "throttle_time": 0}

    if not _allowed(ctx):
        return answer(E.delegation_token_request_not_allowed)
    secret = _secret(ctx)
    if secret is None:
        return answer(E.delegation_token_auth_disabled)
    owners = (
        None
        if request.owners is None
        else {f"{o.principal_type}:{o.principal_name}" for o in request.owners}
    )
    if owners is not None and not owners:
        return answer(E.none)
    now = _now_ms()
    found: list[responses.DescribedDelegationToken] = []
    for token in sorted(
        ctx.broker.controller.state.delegation_tokens.values(), key=lambda t: t.issue_ms
    ):
        if token.expiry_ms < now or (owners is not None and token.owner not in owners):
            continue
        if not (
            _may_renew(ctx, token)
            or ctx.allowed(Operation.DESCRIBE, ResourceType.DELEGATION_TOKEN, token.token_id)
            or ctx.allowed(Operation.DESCRIBE_TOKENS, ResourceType.USER, token.owner)
        ):
            continue
        kind, name = _split(token.owner)
        described: responses.DescribedDelegationToken = {
            "principal_type": kind,
            "principal_name": name,
            "issue_timestamp": token.issue_ms,
            "expiry_timestamp": token.expiry_ms,
            "max_timestamp": token.max_ms,
            "token_id": token.token_id,
            "hmac": token_hmac(secret, token.token_id),
            "renewers": [
                {"principal_type": _split(r)[0], "principal_name": _split(r)[1]}
                for r in token.renewers
            ],
        }
        if ctx.version >= 3:
            r_kind, r_name = _split(token.requester)
            described["token_requester_principal_type"] = r_kind
            described["token_requester_principal_name"] = r_name
        found.append(described)
    return answer(E.none, found)
