"""Errors the log raises; handlers map them to Kafka error codes."""

from __future__ import annotations


class LogError(Exception):
    """Base of storage errors."""


class OffsetOutOfRangeError(LogError):
    """An offset below the log start offset or above the log end offset."""


class LogClosedError(LogError):
    """The log was closed or deleted."""
