"""Rules for every test run of the project (tests/ and compat_tests/).

- `slow`: every test in compat_tests/ (real broker processes, stock clients, clusters)
  and the unit tests marked so by hand. `make test-fast` runs the rest.
- No silent skips: under `make test` (FORBID_SKIPPED_TESTS=1; not a KBROKER_* name, which
  brokers started by the tests would read as a setting) a skipped test fails the run,
  since on this project's machines every tool a test needs is installed by
  scripts/install-test-tools.sh. A test that must be able to skip says why with
  `@pytest.mark.may_skip("why")`; its skips are reported but do not fail the run.
- Tests wait for conditions, not for time: `compat_tests.waiting.eventually` (and
  `eventually_async`) polls the state that shows something happened and fails naming
  what never did. A sleep that stays says why on its line or the one before: the input
  of a time-based behaviour, a delay injected on purpose, pacing, or an absence check.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).parent
COMPAT_TESTS = ROOT / "compat_tests"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slow: starts real processes or waits on clusters (left out by make test-fast)"
    )
    config.addinivalue_line(
        "markers", "may_skip(reason): this test may skip without failing make test, because ..."
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if COMPAT_TESTS in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.slow)


def _skips_forbidden() -> bool:
    return os.environ.get("FORBID_SKIPPED_TESTS", "") not in ("", "0")


_forbidden_skips: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not report.skipped or not _skips_forbidden() or hasattr(report, "wasxfail"):
        return
    if "may_skip" in report.keywords:
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    _forbidden_skips.append(f"{report.nodeid}: {reason}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _forbidden_skips and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _forbidden_skips:
        return
    terminalreporter.section("skipped tests fail make test")
    terminalreporter.write_line(
        "Every tool a test needs is installed by scripts/install-test-tools.sh; install it,"
        " or mark a test that must be able to skip with @pytest.mark.may_skip('why'):"
    )
    for line in _forbidden_skips:
        terminalreporter.write_line(f"  {line}")
