"""Delegation-token requests on a broker without delegation.token.secret.key: Kafka's
DELEGATION_TOKEN_AUTH_DISABLED for an authenticated caller; the HMAC is HMAC-SHA512."""

from __future__ import annotations

import asyncio
import base64
import datetime
import hashlib
import hmac
from types import SimpleNamespace

from kio.schema.errors import ErrorCode

from kbroker.config import BrokerConfig
from kbroker.handlers.delegation_tokens import (
    create_delegation_token,
    describe_delegation_token,
    renew_delegation_token,
)
from kbroker.security.principal import user
from kbroker.security.tokens import token_hmac, token_password
from tests.handler_context import handler_context


def context(api_key: int, version: int, secret: str | None = None):  # type: ignore[no-untyped-def]
    config = BrokerConfig.from_settings(
        {
            **({"delegation.token.secret.key": secret} if secret is not None else {}),
            "delegation.token.max.lifetime.ms": "604800000",
            "delegation.token.expiry.time.ms": "86400000",
        }
    )
    controller = SimpleNamespace(state=SimpleNamespace(delegation_tokens={}))
    ctx = handler_context(api_key, version, config=config, controller=controller)
    ctx.connection.principal = user("alice")  # type: ignore[misc]
    return ctx


def test_every_token_request_is_refused_while_tokens_are_disabled():
    request = SimpleNamespace(
        owner_principal_type=None,
        owner_principal_name=None,
        renewers=(),
        max_lifetime=datetime.timedelta(milliseconds=-1),
    )
    answer = asyncio.run(create_delegation_token(context(38, 3), request))
    assert answer["error_code"] == ErrorCode.delegation_token_auth_disabled
    renew = SimpleNamespace(hmac=b"x", renew_period=datetime.timedelta(0))
    answer = asyncio.run(renew_delegation_token(context(39, 2), renew))
    assert answer["error_code"] == ErrorCode.delegation_token_auth_disabled
    answer = describe_delegation_token(context(41, 3), SimpleNamespace(owners=None))
    assert answer["error_code"] == ErrorCode.delegation_token_auth_disabled


def test_a_token_request_over_a_token_is_not_allowed():
    ctx = context(41, 3, secret="s")
    ctx.connection.principal = type(ctx.principal)("User", "alice", token_authenticated=True)  # type: ignore[misc]
    answer = describe_delegation_token(ctx, SimpleNamespace(owners=None))
    assert answer["error_code"] == ErrorCode.delegation_token_request_not_allowed


def test_the_hmac_is_hmac_sha512_of_the_token_id_and_the_password_its_base64():
    mac = token_hmac("secret", "token-id")
    assert mac == hmac.new(b"secret", b"token-id", hashlib.sha512).digest()
    assert token_password(mac) == base64.b64encode(mac).decode()
