"""SaslHandshake and SaslAuthenticate: the connection runs the exchange, these route to it.

Before authentication the connection's gate lets only these two (and ApiVersions)
reach the handler table; afterwards a SaslHandshake starts a re-authentication
(KIP-368). On a listener without SASL both are answered ILLEGAL_SASL_STATE, as Kafka
answers them. A refusal may come after connection.failed.authentication.delay.ms.
"""

from __future__ import annotations

from collections.abc import Awaitable

from kbroker.handlers.context import RequestContext
from kbroker.handlers.registry import handles
from kbroker.protocol import requests, responses

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36


@handles(SASL_HANDSHAKE, 0, 1)
def sasl_handshake(
    ctx: RequestContext, request: requests.SaslHandshakeRequest
) -> responses.SaslHandshakeResponse | Awaitable[responses.SaslHandshakeResponse]:
    return ctx.connection.sasl_handshake(request.mechanism, ctx.version)


@handles(SASL_AUTHENTICATE, 0, 2)
def sasl_authenticate(
    ctx: RequestContext, request: requests.SaslAuthenticateRequest
) -> responses.SaslAuthenticateResponse | Awaitable[responses.SaslAuthenticateResponse]:
    return ctx.connection.sasl_authenticate(bytes(request.auth_bytes), ctx.version)
