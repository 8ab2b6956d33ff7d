"""Principals and ``ssl.principal.mapping.rules``: who a connection is, by Kafka's names.

A TLS client's principal is its certificate subject as an RFC 2253 distinguished name
(most specific attribute first, as Java's ``X500Principal.getName()`` prints it), mapped
by the listener's rules; a SASL client's is its authenticated user name. A connection
that proved nothing is ``User:ANONYMOUS``, as on Kafka.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kbroker.config.principal_rules import MappingRule


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    principal_type: str
    name: str
    # Authenticated with a delegation token (SCRAM tokenauth=true): such a connection may
    # not create, renew, expire or describe tokens, as on Kafka.
    token_authenticated: bool = field(default=False, compare=False)

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"


ANONYMOUS = KafkaPrincipal("User", "ANONYMOUS")


def user(name: str) -> KafkaPrincipal:
    return KafkaPrincipal("User", name)


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
