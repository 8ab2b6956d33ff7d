"""logging.format, logging.levels and request logging as the broker process applies them."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from inprocess import RawClient, run_broker

from kbroker.broker import Broker
from kbroker.config import ConfigError, load_broker_config
from kbroker.config.logger_levels import parse_levels
from kbroker.log_setup import configure_logging

API_VERSIONS = 18


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    named = {n: logging.getLogger(n).level for n in ("kbroker.request", "kbroker.quiet")}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, old in named.items():
        logging.getLogger(name).setLevel(old)


def test_json_format_writes_one_object_per_line_with_extra_fields(restore_logging):
    out = io.StringIO()
    configure_logging("INFO", "json", {}, out)
    logging.getLogger("kbroker.test").warning("disk %s full", "/d", extra={"log_dir": "/d"})
    entry = json.loads(out.getvalue())
    assert entry["level"] == "WARNING" and entry["logger"] == "kbroker.test"
    assert entry["message"] == "disk /d full" and entry["log_dir"] == "/d"
    assert entry["time"].endswith("+00:00")


def test_json_format_carries_a_traceback_inside_the_object(restore_logging):
    out = io.StringIO()
    configure_logging("INFO", "json", {}, out)
    try:
        raise ValueError("bad\nthing")
    except ValueError:
        logging.getLogger("kbroker.test").exception("failed")
    (line,) = out.getvalue().splitlines()
    assert "ValueError: bad" in json.loads(line)["exception"]


def test_text_format_is_one_readable_line(restore_logging):
    out = io.StringIO()
    configure_logging("INFO", "text", {}, out)
    logging.getLogger("kbroker.test").info("hello")
    assert out.getvalue().rstrip().endswith("INFO kbroker.test: hello")


def test_levels_per_logger_override_the_root_level(restore_logging):
    out = io.StringIO()
    configure_logging("WARNING", "text", parse_levels(["kbroker.request=DEBUG"]), out)
    logging.getLogger("kbroker.request").debug("shown")
    logging.getLogger("kbroker.quiet").info("hidden")
    assert "shown" in out.getvalue() and "hidden" not in out.getvalue()


def test_a_malformed_logger_level_stops_the_start():
    with pytest.raises(ConfigError, match="logging.levels"):
        load_broker_config(None, ["logging.levels=kbroker.request=LOUD"], {})
    with pytest.raises(ValueError, match="not LOGGER=LEVEL"):
        parse_levels(["kbroker.request"])


def _api_versions_logged(tmp_path: Path, overrides: list[str], caplog) -> list[logging.LogRecord]:
    async def check(broker: Broker, port: int) -> None:
        client = await RawClient.connect(port)
        await client.call(
            API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}
        )
        client.close()

    with caplog.at_level(logging.INFO, logger="kbroker.request"):
        run_broker(tmp_path, check, overrides)
    return [r for r in caplog.records if r.name == "kbroker.request"]


def test_requests_are_logged_with_their_fields_when_enabled(tmp_path, caplog):
    (record,) = _api_versions_logged(tmp_path, ["logging.requests.enable=true"], caplog)
    assert record.api == "api_versions" and record.api_version == 3
    assert record.client_id == "test" and record.duration_ms >= 0
    assert "api_versions v3 correlation 1 from 127.0.0.1:" in record.getMessage()


def test_requests_are_not_logged_by_default(tmp_path, caplog):
    assert _api_versions_logged(tmp_path, [], caplog) == []


def test_text_lines_escape_control_characters_in_client_text(restore_logging: None) -> None:
    stream = io.StringIO()
    configure_logging("INFO", "text", {}, stream)
    logging.getLogger("kbroker.test").warning(
        "group %s joined", "g\n2026-01-01 00:00:00,000 ERROR kbroker.fake: FORGED\x1b[0m\u2028"
    )
    (line,) = stream.getvalue().splitlines()
    assert line.endswith(
        "group g\\x0a2026-01-01 00:00:00,000 ERROR kbroker.fake: FORGED\\x1b[0m\\u2028 joined"
    )


def test_a_traceback_keeps_its_lines_but_not_a_clients_newline_in_its_message(
    restore_logging: None,
) -> None:
    stream = io.StringIO()
    configure_logging("INFO", "text", {}, stream)
    try:
        raise ValueError("tag\nFORGED")
    except ValueError:
        logging.getLogger("kbroker.test").exception("handler failed")
    lines = stream.getvalue().splitlines()
    assert lines[1] == "Traceback (most recent call last):"
    assert lines[-1] == "ValueError: tag\\x0aFORGED"
    assert not any(line.startswith("FORGED") for line in lines)
