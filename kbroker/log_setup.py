"""How the broker process logs: text or JSON lines on stderr, a level per logger.

`logging.format=json` writes one JSON object per line (time, level, logger, message, and
any structured fields a call passed with `extra=`), for log shippers that index fields;
`text` is the human-readable default. `logging.levels` sets levels of single loggers on
top of `logging.level` (`kbroker.request=INFO,kbroker.controller=WARNING`), as Kafka's
log4j configuration does per logger; BROKER_LOGGER configs change them at run time.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
from typing import Any, TextIO

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

# Attributes every LogRecord has; anything else on a record came from `extra=`.
_STANDARD = frozenset(
    logging.LogRecord("", 0, "", 0, "", None, None).__dict__.keys() | {"message", "asctime"}
)


class JsonFormatter(logging.Formatter):
    """One JSON object per record; a traceback, if any, in "exception"."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


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


def configure_logging(
    level: str, fmt: str, levels: dict[str, str], stream: TextIO | None = None
) -> None:
    """Replace the root logger's handlers with one writing `fmt` lines to `stream`."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name, named_level in levels.items():
        logging.getLogger(name).setLevel(named_level)
