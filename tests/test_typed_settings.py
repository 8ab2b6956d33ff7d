"""kbroker/config/typed.py has one property per broker setting, typed as the settings
table declares, and each returns what ``BrokerConfig.get`` does, live after dynamic
changes (regenerate the file with scripts/typed_settings.py)."""

from __future__ import annotations

import importlib.util
import types
import typing
from pathlib import Path

import pytest

from kbroker.config import BrokerConfig
from kbroker.config.broker_settings import BROKER_CONFIGS
from kbroker.config.typed import ListenerSettings, TypedSettings

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "typed_settings.py"


def _script() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("typed_settings_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_module_matches_the_settings_table() -> None:
    script = _script()
    rendered = script.render()
    # The file is the rendering after ruff format, which only rewraps long lines.
    assert " ".join(script.TARGET.read_text().split()) == " ".join(rendered.split()), (
        "kbroker/config/typed.py is stale: run scripts/typed_settings.py"
    )


def test_every_setting_has_a_property_and_nothing_else_does() -> None:
    properties = {n for n, v in vars(TypedSettings).items() if isinstance(v, property)}
    assert properties == {d.python_name for d in BROKER_CONFIGS.values()}


CONFIGS = {
    "defaults": BrokerConfig.from_settings(),
    "set": BrokerConfig.from_settings(
        {
            "broker.rack": "r1",
            "log.retention.hours": "2",
            "log.dirs": "/tmp/a,/tmp/b",
            "delegation.token.secret.key": "s3cret",
            "super.users": "User:admin",
            "log.cleaner.io.buffer.load.factor": "0.5",
        }
    ),
    "controller only": BrokerConfig.from_settings(
        {
            "process.roles": "controller",
            "node.id": "3",
            "listeners": "CONTROLLER://127.0.0.1:19093",
            "controller.listener.names": "CONTROLLER",
            "controller.quorum.voters": "3@127.0.0.1:19093",
        }
    ),
    "dynamic": BrokerConfig.from_settings({"max.connections": "50"}).with_dynamic(
        {"max.connections": "70", "log.cleaner.threads": "3"}, {"log.retention.ms": "9000"}
    ),
}


@pytest.mark.parametrize("which", sorted(CONFIGS))
def test_each_property_returns_the_effective_value_of_its_declared_type(which: str) -> None:
    config = CONFIGS[which]
    hints = typing.get_type_hints(TypedSettings)
    for name, definition in BROKER_CONFIGS.items():
        value = getattr(config, definition.python_name)
        assert value is config.get(name) or value == config.get(name), name
        expected = (
            hints.get(definition.python_name)
            or typing.get_type_hints(getattr(TypedSettings, definition.python_name).fget)["return"]
        )
        if value is None:
            assert types.NoneType in typing.get_args(expected), f"{name} is None"
            continue
        allowed = (
            typing.get_args(expected) if isinstance(expected, types.UnionType) else (expected,)
        )
        plain = tuple(typing.get_origin(a) or a for a in allowed if a is not types.NoneType)
        assert isinstance(value, plain), f"{name}={value!r} is not {expected}"
        if isinstance(value, bool):
            assert bool in plain, f"{name}={value!r} is not {expected}"
        if isinstance(value, list):
            assert all(isinstance(item, str) for item in value), name


def test_a_dynamic_change_is_what_the_property_reads() -> None:
    static = BrokerConfig.from_settings({"max.connections": "50"})
    assert static.max_connections == 50
    changed = static.with_dynamic({"max.connections": "70"}, {})
    assert changed.max_connections == 70 == changed.get("max.connections")
    assert changed.with_dynamic({}, {"max.connections": "90"}).max_connections == 90
    assert changed.log_retention_ms == 7 * 24 * 3_600_000


def test_an_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError):
        _ = BrokerConfig.from_settings().log_retention  # type: ignore[attr-defined]


def test_a_listener_reads_its_own_value_else_the_broker_wide_one() -> None:
    config = BrokerConfig.from_settings(
        {
            "listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL",
            "ssl.client.auth": "requested",
            "listener.name.ssl.ssl.client.auth": "required",
            "listener.name.ssl.sasl.enabled.mechanisms": "PLAIN",
        }
    )
    ssl_listener, plain = config.listener_settings("SSL"), config.listener_settings("PLAINTEXT")
    assert ssl_listener.ssl_client_auth == "required"
    assert plain.ssl_client_auth == "requested"
    assert ssl_listener.sasl_enabled_mechanisms == ["PLAIN"]
    assert plain.sasl_enabled_mechanisms == config.sasl_enabled_mechanisms
    hints = {
        name: typing.get_type_hints(value.fget)["return"]
        for name, value in vars(ListenerSettings).items()
        if isinstance(value, property)
    }
    assert hints == {
        name: typing.get_type_hints(getattr(TypedSettings, name).fget)["return"] for name in hints
    }
    assert "ssl_keystore_location" in hints and "connections_max_reauth_ms" in hints
