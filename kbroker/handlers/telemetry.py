"""GetTelemetrySubscriptions and PushTelemetry (KIP-714), answered by kbroker.telemetry.

Kafka needs no ACL for either; an answer that is an error carries only its code (and
a zero subscription), as Kafka's getErrorResponse does.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from kbroker.handlers.context import RequestContext
from kbroker.handlers.registry import handles
from kbroker.protocol import requests, responses
from kbroker.telemetry import ClientInfo, ClientTelemetry

GET_TELEMETRY_SUBSCRIPTIONS = 71
PUSH_TELEMETRY = 72


def _client(ctx: RequestContext) -> ClientInfo:
    name, version = ctx.connection.software
    host, _, port = ctx.connection.peer.rpartition(":")
    return ClientInfo(ctx.client_id, name, version, host.strip("[]"), port)


def _service(ctx: RequestContext) -> ClientTelemetry:
    service = ctx.broker.telemetry
    if service is None:
        raise RuntimeError("client telemetry is not set up on this broker")
    return service


@handles(GET_TELEMETRY_SUBSCRIPTIONS, 0)
def get_telemetry_subscriptions(
    ctx: RequestContext, request: requests.GetTelemetrySubscriptionsRequest
) -> responses.GetTelemetrySubscriptionsResponse:
    answer = _service(ctx).get_subscriptions(request.client_instance_id, _client(ctx))
    if answer.error != ErrorCode.none:
        return {
            "throttle_time": 0,
            "error_code": answer.error,
            "client_instance_id": None,
            "subscription_id": 0,
            "push_interval": 0,
            "telemetry_max_bytes": 0,
            "delta_temporality": False,
        }
    return {"throttle_time": 0, "error_code": ErrorCode.none, **answer.body}


@handles(PUSH_TELEMETRY, 0)
def push_telemetry(
    ctx: RequestContext, request: requests.PushTelemetryRequest
) -> responses.PushTelemetryResponse:
    answer = _service(ctx).push(
        request.client_instance_id,
        request.subscription_id,
        request.terminating,
        request.compression_type,
        bytes(request.metrics),
        _client(ctx),
    )
    return {"throttle_time": 0, "error_code": answer.error}
