"""ApiVersions: the versions of every API this broker serves, straight from the registry,
and from v3 the feature levels supported and in force (kbroker.features).

A request newer than the broker knows cannot be decoded, so the connection answers it
with `unsupported_api_versions` before any handler runs.
"""

from __future__ import annotations

import re
import struct
from typing import Any

from kbroker.features import finalized_features, supported_features
from kbroker.handlers.context import RequestContext
from kbroker.handlers.registry import APIS, api_gates, handles, served_apis
from kbroker.protocol import requests, responses
from kbroker.protocol.messages import encode_response

API_VERSIONS = 18
INVALID_REQUEST = 42
# What Kafka's ApiVersionsRequest.isValid takes as a client's software name and version
# (KIP-511): letters, digits, '-' and '.', starting and ending with a letter or digit.
SOFTWARE_PATTERN = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


# Encoded answers by all they hold (the version, the settings that gate APIs, the finalized
# levels and their epoch): the same for every connection until a gating setting or the metadata
# changes. Each connection's first request, so the answer is written once, not each time
# (its 77 API entries were two thirds of the request's CPU).
_ANSWERS: dict[tuple[Any, ...], bytes] = {}
_MAX_ANSWERS = 32


@handles(API_VERSIONS, 0, 4)
def api_versions(
    ctx: RequestContext, request: requests.ApiVersionsRequest
) -> responses.ApiVersionsResponse | bytes:
    if ctx.version >= 3 and not _valid_software(request):
        # As Kafka: INVALID_REQUEST and no API list, the connection left open.
        return {"error_code": INVALID_REQUEST, "api_keys": [], "throttle_time": 0}
    if ctx.version >= 3:
        ctx.connection.software = (
            request.client_software_name,
            request.client_software_version,
        )
    if ctx.broker.quotas.active:
        return describe_api_versions(ctx)  # its throttle time is the request quota's
    broker = ctx.broker
    state = broker.controller.state
    key: tuple[Any, ...] = (ctx.version, api_gates(broker.config))
    if ctx.version >= 3:
        levels = finalized_features(broker.config, state.features)
        key = (*key, state.version, tuple(levels.items()))
    body = _ANSWERS.get(key)
    if body is None:
        if len(_ANSWERS) >= _MAX_ANSWERS:
            _ANSWERS.clear()
        answer = describe_api_versions(ctx)
        body = _ANSWERS[key] = encode_response(API_VERSIONS, ctx.version, answer)
    return body


def describe_api_versions(ctx: RequestContext) -> responses.ApiVersionsResponse:
    """The answer to a valid request: every API served, and from v3 the feature levels
    supported and in force."""
    answer: responses.ApiVersionsResponse = {
        "error_code": 0,
        "api_keys": [
            {"api_key": api.key, "min_version": api.min_version, "max_version": api.max_version}
            for api in served_apis(ctx.broker.config)
        ],
        "throttle_time": 0,
    }
    if ctx.version >= 3:
        # As a KRaft broker, the epoch of the finalized levels is the metadata the broker
        # has applied: it only grows, and grows with every UpdateFeatures.
        answer["supported_features"] = [
            {"name": f.name, "min_version": f.min_version, "max_version": f.max_version}
            for f in supported_features(ctx.version)
        ]
        answer["finalized_features_epoch"] = ctx.broker.controller.state.version
        answer["finalized_features"] = [
            {"name": name, "min_version_level": level, "max_version_level": level}
            for name, level in finalized_features(
                ctx.broker.config, ctx.broker.controller.state.features
            ).items()
        ]
    return answer


def _valid_software(request: requests.ApiVersionsRequest) -> bool:
    return bool(
        SOFTWARE_PATTERN.fullmatch(request.client_software_name)
        and SOFTWARE_PATTERN.fullmatch(request.client_software_version)
    )


def unsupported_api_versions() -> bytes:
    """ApiVersions v0 body with UNSUPPORTED_VERSION and the ranges served.

    Kafka answers an ApiVersions request newer than it knows this way so that the
    client can retry with a version both sides speak.
    """
    apis = sorted(APIS.values(), key=lambda a: a.key)
    body = struct.pack(">hi", 35, len(apis))
    body += b"".join(struct.pack(">hhh", a.key, a.min_version, a.max_version) for a in apis)
    return body
