"""Principals and ``ssl.principal.mapping.rules``: who a connection is, by Kafka's names.

A TLS client's principal is its certificate subject as an RFC 2253 distinguished name
(most specific attribute first, as Java's ``X500Principal.getName()`` prints it), mapped
by the listener's rules; a SASL client's is its authenticated user name. A connection
that proved nothing is ``User:ANONYMOUS``, as on Kafka.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"


ANONYMOUS = KafkaPrincipal("User", "ANONYMOUS")


def user(name: str) -> KafkaPrincipal:
    return KafkaPrincipal("User", name)


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


def map_name(rules: Sequence[MappingRule], name: str) -> str:
    for rule in rules:
        mapped = rule.apply(name)
        if mapped is not None:
            return mapped
    raise ValueError(f"no ssl.principal.mapping.rules rule matches {name!r}")


# The attribute keywords Java's X500Principal prints in RFC 2253 form; others by OID-less
# long name, which no mapping rule of Kafka's documentation relies on.
_RDN_KEYWORDS = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
_SPECIAL = re.compile(r'([,+"\\<>;=])')


def _escape(value: str) -> str:
    value = _SPECIAL.sub(r"\\\1", value)
    if value.startswith(("#", " ")):
        value = "\\" + value
    if value.endswith(" "):
        value = value[:-1] + "\\ "
    return value


def distinguished_name(peercert: dict[str, Any]) -> str:
    """``ssl.SSLObject.getpeercert()``'s subject as RFC 2253 text (last RDN first)."""
    rdns = []
    for rdn in reversed(peercert.get("subject", ())):
        rdns.append(
            "+".join(f"{_RDN_KEYWORDS.get(key, key)}={_escape(value)}" for key, value in rdn)
        )
    return ",".join(rdns)
