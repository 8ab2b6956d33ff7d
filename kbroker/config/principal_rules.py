"""`ssl.principal.mapping.rules`: Kafka's rule syntax, parsed where settings are read so a
bad rule stops the start; kbroker/security/principal.py maps names with the rules."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MappingRule:
    """``RULE:pattern/replacement/[LU]``, or DEFAULT (pattern None): the first rule whose
    pattern matches the whole name wins; an unmatched name is refused (Kafka throws)."""

    pattern: re.Pattern[str] | None
    replacement: str = ""
    case: str = ""  # "L" lower-case, "U" upper-case the result

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        if self.pattern.fullmatch(name) is None:
            return None
        result = self.pattern.sub(self.replacement, name, count=1)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result


_RULE = re.compile(
    r"\s*(?:(?P<default>DEFAULT)|RULE:(?P<pattern>(?:\\.|[^\\/])*)/(?P<replacement>(?:\\.|[^\\/])*)"
    r"/(?P<case>[LU]?))\s*(?:,|$)"
)


def _java_replacement(text: str) -> str:
    """Java's ``$1`` group references become Python's ``\\g<1>``; ``\\/`` is a slash."""
    text = text.replace("\\/", "/")
    return re.sub(r"\$(\d+)", r"\\g<\1>", text)


def parse_mapping_rules(text: str) -> tuple[MappingRule, ...]:
    """Parse the comma list of rules; ValueError names the part that is not a rule."""
    rules: list[MappingRule] = []
    position, text = 0, text.strip()
    while position < len(text):
        match = _RULE.match(text, position)
        if match is None or match.end() == position:
            raise ValueError(f"invalid rule at {text[position:]!r}")
        if match["default"]:
            rules.append(MappingRule(None))
        else:
            try:
                pattern = re.compile(match["pattern"].replace("\\/", "/"))
            except re.error as exc:
                raise ValueError(f"invalid pattern {match['pattern']!r}: {exc}") from None
            rules.append(
                MappingRule(pattern, _java_replacement(match["replacement"]), match["case"])
            )
        position = match.end()
    return tuple(rules) or (MappingRule(None),)
