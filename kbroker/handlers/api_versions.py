"""ApiVersions: the versions of every API this broker serves, straight from the registry."""

from __future__ import annotations

from typing import Any

from kbroker.handlers.registry import APIS, handles

API_VERSIONS = 18


@handles(API_VERSIONS, 0, 4)
def api_versions(ctx: Any, request: Any) -> dict[str, Any]:
    return {
        "error_code": 0,
        "api_keys": [
            {"api_key": api.key, "min_version": api.min_version, "max_version": api.max_version}
            for api in sorted(APIS.values(), key=lambda a: a.key)
        ],
        "throttle_time": 0,
    }
