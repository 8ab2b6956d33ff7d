"""The one exception the configuration layer raises for bad input."""

from __future__ import annotations


class ConfigError(ValueError):
    """A setting is unknown, malformed or inconsistent with another.

    The message always names the setting and where its value came from (a file and
    line, an environment variable, an ``--override``), because the operator who reads
    it has to find and fix that exact spot. ``setting`` and ``origin`` carry the same
    facts for callers that map the error onto a protocol error code.
    """

    def __init__(self, message: str, *, setting: str | None = None, origin: str | None = None):
        super().__init__(message)
        self.setting = setting
        self.origin = origin
