"""UpdateFeatures (57) and UnregisterBroker (64): the cluster operations of
`kafka-features.sh upgrade|downgrade` and `kafka-cluster.sh unregister`.

UpdateFeatures checks every update against the levels kbroker implements
(kbroker.features) with Kafka's messages and records them all in the metadata log, or
none: one refused update refuses the request (INVALID_UPDATE_VERSION), as Kafka 4.x's
controller does; `validate_only` checks without recording. UnregisterBroker forgets a
decommissioned broker (BROKER_ID_NOT_REGISTERED for an id not registered). Both need
ALTER on the cluster.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from kbroker.controller import ControllerError
from kbroker.features import SAFE_DOWNGRADE, UPGRADE, update_refusal
from kbroker.handlers.context import RequestContext
from kbroker.handlers.registry import handles
from kbroker.protocol import requests, responses
from kbroker.security.acl import CLUSTER_NAME, Operation, ResourceType

UPDATE_FEATURES = 57
UNREGISTER_BROKER = 64


def _code(exc: ControllerError) -> ErrorCode:
    try:
        return ErrorCode(exc.error_code)
    except ValueError:
        return ErrorCode.unknown_server_error


@handles(UPDATE_FEATURES, 0)
async def update_features(
    ctx: RequestContext, request: requests.UpdateFeaturesRequest
) -> responses.UpdateFeaturesResponse:
    broker = ctx.broker
    code, message = ErrorCode.none, None
    names = [u.feature for u in request.feature_updates]
    if not ctx.allowed(Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        code = ErrorCode.cluster_authorization_failed
        message = "The request was not authorized: ALTER on the cluster is needed."
    elif len(set(names)) != len(names):
        code = ErrorCode.invalid_request
        message = "The request contains multiple updates for the same feature."
    else:
        recorded = broker.controller.state.features
        levels: dict[str, int] = {}
        for update in request.feature_updates:
            upgrade_type = update.upgrade_type
            if ctx.version == 0:  # v0 says allow_downgrade instead
                upgrade_type = SAFE_DOWNGRADE if update.allow_downgrade else UPGRADE
            level = int(update.max_version_level)
            refused = update_refusal(
                broker.config, recorded, update.feature, level, int(upgrade_type), broker.node_id
            )
            if refused is not None:
                code, message = ErrorCode.invalid_update_version, refused
                break
            levels[update.feature] = max(level, 0)
        if code == ErrorCode.none and levels and not request.validate_only:
            try:
                await broker.controller.update_features(levels)
            except ControllerError as exc:
                code, message = _code(exc), exc.message
    answer: responses.UpdateFeaturesResponse = {
        "throttle_time": 0,
        "error_code": code,
        "error_message": message,
    }
    if ctx.version < 2:  # v0-1 answer each feature too, here with the request's outcome
        answer["results"] = [
            {"feature": name, "error_code": code, "error_message": message} for name in names
        ]
    return answer


@handles(UNREGISTER_BROKER, 0)
async def unregister_broker(
    ctx: RequestContext, request: requests.UnregisterBrokerRequest
) -> responses.UnregisterBrokerResponse:
    code, message = ErrorCode.none, None
    if not ctx.allowed(Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        code = ErrorCode.cluster_authorization_failed
        message = "The request was not authorized: ALTER on the cluster is needed."
    else:
        try:
            await ctx.broker.controller.unregister_broker(int(request.broker_id))
        except ControllerError as exc:
            code, message = _code(exc), exc.message
    return {"throttle_time": 0, "error_code": code, "error_message": message}
