"""Every setting kbroker accepts is applied, a synonym, or declared inert - and the
table's word for it agrees with the source.

The scan reads kbroker's own code, minus the tables that define the settings, for
reads of each name (the quoted name not used as a dict key, or ``config.<attr>``): an
applied setting must be read somewhere, an inert one nowhere. Making a setting real
without reclassifying it, or classifying one applied that nothing reads, fails here.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from kbroker.cli import _log_inert_settings
from kbroker.config import BrokerConfig, describe_broker_config, describe_topic_config
from kbroker.config.broker_settings import BROKER_CONFIGS, SYNONYM_GROUPS
from kbroker.config.topic import TOPIC_BROKER_SYNONYMS, TOPIC_CONFIGS
from kbroker.config.types import INERT_NOTE, SettingRole

PACKAGE = Path(__file__).resolve().parent.parent / "kbroker"
TABLES = {
    "config/broker_settings.py",
    "config/describe.py",
    "config/types.py",
    "config/typed.py",  # generated from the table: one property per setting
}
CROSS_CHECK_PAIR = re.compile(r'^\s*\("[a-z.]+", "[a-z.]+"\),\s*$', re.MULTILINE)


def _source_without_tables() -> dict[str, str]:
    texts = {}
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative in TABLES:
            continue
        text = path.read_text()
        if relative == "config/topic.py":
            # the table and the name-to-name synonym map define, they do not read
            head, _, rest = text.partition("TOPIC_CONFIG_DEFS:")
            text = head + rest.partition("\ndef _invalid")[2]
        if relative == "config/broker.py":
            text = CROSS_CHECK_PAIR.sub("", text)  # min <= max checks are not uses
        texts[relative] = text
    return texts


SOURCE = _source_without_tables()


def readers(name: str) -> list[str]:
    """Modules reading setting ``name``."""
    quoted = re.compile(r'["\']' + re.escape(name) + r'["\'](?!\s*:)')
    attribute = re.compile(r"config\." + re.escape(name.replace(".", "_")) + r"\b")
    return sorted(f for f, t in SOURCE.items() if quoted.search(t) or attribute.search(t))


TOPIC_DEFAULTS = set(TOPIC_BROKER_SYNONYMS.values())
DIRECT_BROKER = sorted(n for n in BROKER_CONFIGS if n not in TOPIC_DEFAULTS)


def _named(role: SettingRole, table: dict, names: list[str]) -> list[str]:
    return [n for n in names if table[n].role is role]


@pytest.mark.parametrize("name", _named(SettingRole.APPLIED, BROKER_CONFIGS, DIRECT_BROKER))
def test_an_applied_broker_setting_is_read_outside_the_table(name: str) -> None:
    assert readers(name), f"{name} is classified applied but nothing reads it"


@pytest.mark.parametrize("name", _named(SettingRole.INERT, BROKER_CONFIGS, DIRECT_BROKER))
def test_an_inert_broker_setting_is_read_nowhere(name: str) -> None:
    assert readers(name) == [], f"{name} is classified inert but is read: reclassify it"


@pytest.mark.parametrize("name", _named(SettingRole.APPLIED, TOPIC_CONFIGS, sorted(TOPIC_CONFIGS)))
def test_an_applied_topic_config_is_read_outside_the_table(name: str) -> None:
    assert readers(name), f"topic config {name} is classified applied but nothing reads it"


@pytest.mark.parametrize("name", _named(SettingRole.INERT, TOPIC_CONFIGS, sorted(TOPIC_CONFIGS)))
def test_an_inert_topic_config_is_read_nowhere(name: str) -> None:
    assert readers(name) == [], f"topic config {name} is classified inert but is read"


@pytest.mark.parametrize("topic_name", sorted(TOPIC_BROKER_SYNONYMS))
def test_a_topic_configs_broker_default_shares_its_role(topic_name: str) -> None:
    broker_name = TOPIC_BROKER_SYNONYMS[topic_name]
    assert BROKER_CONFIGS[broker_name].role is TOPIC_CONFIGS[topic_name].role


@pytest.mark.parametrize("name", _named(SettingRole.SYNONYM, BROKER_CONFIGS, DIRECT_BROKER))
def test_a_synonym_feeds_another_setting_in_the_resolver(name: str) -> None:
    in_group = any(name in group[1:] for group in SYNONYM_GROUPS)
    assert in_group or "config/broker.py" in readers(name)
    assert TOPIC_CONFIGS.get(name) is None


def test_every_setting_has_one_of_the_three_roles() -> None:
    for definition in (*BROKER_CONFIGS.values(), *TOPIC_CONFIGS.values()):
        assert isinstance(definition.role, SettingRole), definition.name


def test_describe_configs_documents_an_inert_broker_setting_as_inert() -> None:
    config = BrokerConfig.from_settings({})
    docs = {e.name: e.documentation for e in describe_broker_config(config)}
    assert docs["num.io.threads"].startswith(INERT_NOTE)
    assert not docs["log.retention.check.interval.ms"].startswith(INERT_NOTE)


def test_describe_configs_documents_an_inert_topic_config_as_inert() -> None:
    config = BrokerConfig.from_settings({})
    docs = {e.name: e.documentation for e in describe_topic_config({}, config)}
    assert docs["remote.storage.enable"].startswith(INERT_NOTE)
    assert not docs["retention.ms"].startswith(INERT_NOTE)
    # Served since Fetch v0-3 are: it decides whether they are down-converted.
    assert not docs["message.downconversion.enable"].startswith(INERT_NOTE)


def test_start_up_names_the_inert_settings_that_were_set(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = BrokerConfig.from_settings({"num.io.threads": "16", "log.retention.hours": "1"})
    with caplog.at_level(logging.INFO, logger="kbroker.config"):
        _log_inert_settings(config)
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert len(lines) == 1
    assert "num.io.threads" in lines[0]
    assert "log.retention.hours" not in lines[0]


def test_start_up_is_silent_about_inert_settings_left_alone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="kbroker.config"):
        _log_inert_settings(BrokerConfig.from_settings({}))
    assert [r for r in caplog.records if r.levelno >= logging.INFO] == []


def test_debug_lists_every_inert_setting(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="kbroker.config"):
        _log_inert_settings(BrokerConfig.from_settings({}))
    (line,) = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert "zookeeper.connect" in line and "replica.socket.receive.buffer.bytes" in line
