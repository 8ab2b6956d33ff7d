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
import re
import sys
import traceback
from typing import Any, TextIO

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# Attributes every LogRecord has; anything else on a record came from `extra=`.
_STANDARD = frozenset(
    logging.LogRecord("", 0, "", 0, "", None, None).__dict__.keys() | {"message", "asctime"}
)


# Characters that could end a log line early or rewrite it on a terminal: C0 and C1
# controls, DEL, and Unicode's line and paragraph separators.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_controls(text: str) -> str:
    """`text` with every control character written as an escape (\\n as \\x0a)."""
    return _UNSAFE.sub(_escape, text)


# What traceback.format writes itself: frame lines (with their source) and the headers
# between chained exceptions; anything else is an exception's message.
_TRACEBACK_LINES = (
    "Traceback (most recent call last):",
    "  File ",
    "\nThe above exception was the direct cause",
    "\nDuring handling of the above exception",
)


class TextFormatter(logging.Formatter):
    """The text format, one record per line whatever its arguments hold.

    Log messages carry text clients choose (client ids, group and member ids, topic
    names, SASL user names): a newline in one must not start a line that looks like the
    broker's own, nor may control bytes reach an operator's terminal. The one place all
    of them pass is here, so the message is escaped here, after its arguments are
    substituted; a traceback (which the broker writes, not a client) keeps its lines.
    """

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        record.message = escape_controls(record.message)
        return super().formatMessage(record)

    def formatException(self, ei: Any) -> str:  # noqa: N802 - logging's name
        """The traceback's frames as Python writes them; the exceptions' own messages,
        which may quote a client's bytes, escaped onto one line each."""
        chunks = []
        for chunk in traceback.TracebackException(*ei[:3]).format():
            if chunk.startswith(_TRACEBACK_LINES):
                chunks.append(chunk)
            else:
                chunks.append(escape_controls(chunk.rstrip("\n")) + "\n")
        return "".join(chunks).rstrip("\n")


class JsonFormatter(logging.Formatter):
    """One JSON object per record; a traceback, if any, in "exception". JSON strings
    escape control characters themselves, so a client's newline stays inside its field."""

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


def configure_logging(
    level: str, fmt: str, levels: dict[str, str], stream: TextIO | None = None
) -> None:
    """Replace the root logger's handlers with one writing `fmt` lines to `stream`."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    apply_log_levels(level, levels)


def apply_log_levels(level: str, levels: dict[str, str]) -> None:
    """logging.level on the root logger, logging.levels on single loggers (at start, and
    again when a dynamic config changes them)."""
    logging.getLogger().setLevel(level.upper())
    for name, named_level in levels.items():
        logging.getLogger(name).setLevel(named_level)
