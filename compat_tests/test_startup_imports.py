"""A serving broker loads only what serving needs: every compat test starts brokers, so
each module imported at start is paid hundreds of times per run (bench/startup.py
measures the whole start; docs/benchmarks.md has the figures).

The node runs with PYTHONPROFILEIMPORTTIME, which makes the interpreter write one line
per module it imports to stderr, the node's log. The harness also lets a test broker keep
its compiled modules, so the next start does not compile them again.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from compat_tests.broker_process import BrokerProcess, broker_environment, running_broker

IMPORT_LINE = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)$", re.MULTILINE)
REQUEST_SCHEMA = re.compile(r"^kio\.schema\.(\w+)\.v\d+\.request$")


@pytest.fixture(scope="module")
def started(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PYTHONPROFILEIMPORTTIME", "1")
        with running_broker(Path(tmp_path_factory.mktemp("startup-imports"))) as node:
            yield node


@pytest.fixture(scope="module")
def imported(started: BrokerProcess) -> set[str]:
    names = set(IMPORT_LINE.findall(started.log_text()))
    assert "kbroker.broker" in names  # the log does hold the node's imports
    return names


def test_a_serving_broker_does_not_load_hypothesis(imported: set[str]) -> None:
    # kio registers hypothesis strategies whenever hypothesis is importable, as it is here.
    assert "hypothesis.core" not in imported


def test_a_serving_broker_does_not_load_the_admin_commands_or_rich(imported: set[str]) -> None:
    assert "kbroker.admin.commands" not in imported
    assert not {name for name in imported if name == "rich" or name.startswith("rich.")}


def test_a_serving_broker_loads_only_the_request_schemas_it_was_sent(
    imported: set[str],
) -> None:
    # Readiness sent ApiVersions and a stock client's Metadata, and librdkafka may ask for
    # its telemetry subscription (KIP-714) as it starts; nothing else.
    apis = {m.group(1) for name in imported if (m := REQUEST_SCHEMA.match(name))}
    assert apis <= {"api_versions", "metadata", "get_telemetry_subscriptions"}


def test_a_test_broker_leaves_its_compiled_modules_for_the_next_start(
    started: BrokerProcess,
) -> None:
    spec = importlib.util.find_spec("kbroker.broker")
    assert spec is not None and spec.origin is not None
    own_prefix = sys.pycache_prefix
    sys.pycache_prefix = broker_environment().get("PYTHONPYCACHEPREFIX")
    try:
        compiled = Path(importlib.util.cache_from_source(spec.origin))
    finally:
        sys.pycache_prefix = own_prefix
    assert compiled.is_file()
