"""The ways bytes from a client fail to parse, shared by the framing and batch codecs."""

from __future__ import annotations


class MalformedRequest(Exception):
    """A request whose bytes do not parse; Kafka closes the connection on these."""


class InvalidBatchError(Exception):
    """A records blob that must not be appended."""


class CorruptBatchError(InvalidBatchError):
    """Bad CRC, magic, length or record count (Kafka's CORRUPT_MESSAGE)."""
