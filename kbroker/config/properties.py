"""A reader for Java ``.properties`` files, so Kafka's ``server.properties`` loads as is.

Follows ``java.util.Properties.load``: ``#`` and ``!`` comment lines, ``key=value``,
``key: value`` and ``key value``, a trailing odd backslash continuing the line (leading
blanks of the continuation dropped), and the escapes ``\\t \\n \\r \\f \\uXXXX``
(any other escaped character stands for itself). Files are read as UTF-8 rather than
Java's ISO-8859-1: the two agree on ASCII, which is what these files hold in practice.
Each entry keeps the line it started on so errors can point at it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from kbroker.config.errors import ConfigError

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_BLANK = " \t\f"
_SIMPLE_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


@dataclass(frozen=True)
class PropertyLine:
    key: str
    value: str
    line: int


def read_properties(path: Path) -> list[PropertyLine]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}", origin=str(path)) from exc
    return parse_properties(text, origin=str(path))


def parse_properties(text: str, origin: str = "<properties>") -> list[PropertyLine]:
    """Parse properties text into entries in file order (later duplicates win on use)."""
    lines = _LINE_BREAK.split(text)
    entries: list[PropertyLine] = []
    index = 0
    while index < len(lines):
        start = index
        natural = lines[index].lstrip(_BLANK)
        index += 1
        if not natural or natural[0] in "#!":
            continue
        logical = natural
        while _ends_with_continuation(logical):
            logical = logical[:-1]
            if index >= len(lines):
                break
            logical += lines[index].lstrip(_BLANK)
            index += 1
        key, value = _split_entry(logical, f"{origin}:{start + 1}")
        entries.append(PropertyLine(key, value, start + 1))
    return entries


def _ends_with_continuation(line: str) -> bool:
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _split_entry(line: str, where: str) -> tuple[str, str]:
    position = 0
    key_end = len(line)
    while position < len(line):
        char = line[position]
        if char == "\\":
            position += 2
            continue
        if char in "=:" or char in _BLANK:
            key_end = position
            break
        position += 1
    key = _unescape(line[:key_end], where)
    position = key_end
    while position < len(line) and line[position] in _BLANK:
        position += 1
    if position < len(line) and line[position] in "=:":
        position += 1
        while position < len(line) and line[position] in _BLANK:
            position += 1
    return key, _unescape(line[position:], where)


def _unescape(text: str, where: str) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    position = 0
    while position < len(text):
        char = text[position]
        position += 1
        if char != "\\":
            out.append(char)
            continue
        if position >= len(text):
            break
        escaped = text[position]
        position += 1
        if escaped == "u":
            digits = text[position : position + 4]
            if len(digits) != 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise ConfigError(f"{where}: malformed \\uxxxx escape", origin=where)
            out.append(chr(int(digits, 16)))
            position += 4
        else:
            out.append(_SIMPLE_ESCAPES.get(escaped, escaped))
    return "".join(out)
