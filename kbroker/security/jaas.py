"""Kafka's JAAS lines (``sasl.jaas.config``): a login module, its flag and its options.

The broker reads the PLAIN users from the listener's line,
``org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="secret";``
as Kafka's ``PlainServerCallbackHandler`` does: each ``user_<name>`` option is a user.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
FLAGS = ("required", "requisite", "sufficient", "optional")

_HEAD = re.compile(r"\s*(?P<module>[A-Za-z_$][\w.$]*)\s+(?P<flag>\w+)")
_OPTION = re.compile(
    r'\s*(?P<key>[^\s=;"]+)\s*=\s*(?:"(?P<quoted>(?:\\.|[^"\\])*)"|(?P<bare>[^\s;"]+))'
)


@dataclass(frozen=True)
class JaasEntry:
    module: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)


def parse_jaas(text: str) -> JaasEntry:
    """One login module entry ending with ``;``. ValueError says what is wrong, never
    quoting the option values (they are passwords)."""
    head = _HEAD.match(text)
    if head is None:
        raise ValueError("JAAS config must start with a login module class and a flag")
    if head["flag"] not in FLAGS:
        raise ValueError(f"JAAS flag must be one of {', '.join(FLAGS)}")
    options: dict[str, str] = {}
    position = head.end()
    while True:
        rest = text[position:].lstrip()
        if rest.startswith(";"):
            if rest[1:].strip():
                raise ValueError("JAAS config holds more than one login module entry")
            break
        match = _OPTION.match(text, position)
        if match is None:
            raise ValueError("JAAS config options must be key=value pairs ending with ';'")
        value = match["quoted"] if match["quoted"] is not None else match["bare"]
        options[match["key"]] = re.sub(r"\\(.)", r"\1", value)
        position = match.end()
    return JaasEntry(head["module"], head["flag"], options)


def plain_users(entry: JaasEntry) -> dict[str, str]:
    """``user_<name>="<password>"`` options of a PlainLoginModule line."""
    if entry.module != PLAIN_LOGIN_MODULE:
        raise ValueError(f"PLAIN needs {PLAIN_LOGIN_MODULE}, not {entry.module}")
    return {k[len("user_") :]: v for k, v in entry.options.items() if k.startswith("user_")}
