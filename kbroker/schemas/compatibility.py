"""Compatibility levels (Confluent's names) over a schema type's reader/writer relation."""

from __future__ import annotations

from collections.abc import Sequence

from kbroker.schemas.formats import ParsedSchema

LEVELS = (
    "NONE",
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
)
DEFAULT_LEVEL = "BACKWARD"


def check(new: ParsedSchema, existing: Sequence[ParsedSchema], level: str) -> list[str]:
    """Why `new` may not follow `existing` (oldest first) under `level`; empty if it may.

    BACKWARD: the new schema reads data written with the latest (every one, transitive);
    FORWARD: the latest (every one) reads data written with the new; FULL: both.
    """
    if level == "NONE" or not existing:
        return []
    against = existing if level.endswith("_TRANSITIVE") else existing[-1:]
    base = level.removesuffix("_TRANSITIVE")
    problems: list[str] = []
    for old in reversed(against):
        if base in ("BACKWARD", "FULL"):
            problems += new.read_problems(old)
        if base in ("FORWARD", "FULL"):
            problems += old.read_problems(new)
        if problems:
            break
    return problems
