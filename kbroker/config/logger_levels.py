"""Logger levels as settings name them (`log.levels`, `--log-level`): parsed and checked
here, below everything that reads settings; kbroker/log_setup.py applies them."""

from __future__ import annotations

from typing import Any

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def parse_levels(items: list[str]) -> dict[str, str]:
    """`logger=LEVEL` items to {logger: LEVEL}; raises ValueError on a malformed one."""
    levels = {}
    for item in items:
        name, sep, level = item.partition("=")
        name, level = name.strip(), level.strip().upper()
        if not sep or not name:
            raise ValueError(f"{item!r} is not LOGGER=LEVEL")
        if level not in LEVELS:
            raise ValueError(f"{item!r}: level must be one of {', '.join(LEVELS)}")
        levels[name] = level
    return levels


def validate_levels(value: Any) -> None:
    parse_levels(list(value))
