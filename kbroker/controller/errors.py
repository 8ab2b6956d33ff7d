"""Errors the controller reports, carrying the Kafka error code a handler puts on the wire."""

from __future__ import annotations

UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
UNSUPPORTED_VERSION = 35
INVALID_TOPIC_EXCEPTION = 17
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REPLICA_ASSIGNMENT = 39
INVALID_CONFIG = 40
NOT_CONTROLLER = 41
INVALID_REQUEST = 42
FENCED_LEADER_EPOCH = 74
STALE_BROKER_EPOCH = 77
PREFERRED_LEADER_NOT_AVAILABLE = 80
ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
ELECTION_NOT_NEEDED = 84
NO_REASSIGNMENT_IN_PROGRESS = 85
INVALID_UPDATE_VERSION = 95
UNKNOWN_TOPIC_ID = 100
BROKER_ID_NOT_REGISTERED = 102
INELIGIBLE_REPLICA = 107
DUPLICATE_VOTER = 126
VOTER_NOT_FOUND = 127


class ControllerError(Exception):
    """A refused metadata change; `error_code` is the Kafka error code to answer with."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(error_code, message)
        self.error_code = error_code
        self.message = message

    def __str__(self) -> str:
        return f"[{self.error_code}] {self.message}"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ControllerError)
            and other.error_code == self.error_code
            and other.message == self.message
        )

    def __hash__(self) -> int:
        return hash((self.error_code, self.message))


class ControllerStartError(RuntimeError):
    """The controller could not start (port taken, no quorum in time, foreign data dir)."""


class NoQuorumError(ControllerStartError):
    """No quorum of the voters committed the start's first change before its deadline."""
