"""What /health reports: each check the broker can fail, and why it failed.

A broker is unhealthy when a log directory it writes to is gone, read-only or full (a
small probe file is written and removed: what a failed disk or a remount read-only
refuses), or when (in a cluster) the active controller has not acknowledged a heartbeat
within broker.session.timeout.ms — after that the controller fences the broker anyway.
/ready says whether the broker serves at all; /health says what is wrong with it.

The log directory checks do file I/O: the HTTP endpoint runs them off the event loop.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kbroker import __version__

if TYPE_CHECKING:
    from kbroker.metrics.broker_view import MeteredBroker


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    ok: bool
    detail: str


PROBE_NAME = ".kbroker-health-probe"


def log_dir_check(directory: Path) -> Check:
    """Blocking: stats the directory and writes, then removes, a probe file in it."""
    name = f"log_dir {directory}"
    if not directory.is_dir():
        return Check(name, False, "missing or not a directory")
    if not os.access(directory, os.W_OK | os.X_OK):
        return Check(name, False, "not writable")
    probe = directory / PROBE_NAME
    try:
        with open(probe, "wb") as f:
            f.write(b"kbroker /health probe\n")
        probe.unlink()
    except OSError as exc:
        with contextlib.suppress(OSError):
            probe.unlink()
        return Check(name, False, f"cannot write: {exc.strerror or exc}")
    return Check(name, True, "ok")


def storage_checks(
    offline_dirs: Mapping[str, str], failed: Mapping[tuple[str, int], str]
) -> list[Check]:
    """What the log manager met while making or opening logs: a directory an I/O error
    came from is offline (Kafka's offline log directory) even if a probe file still
    writes; partitions whose logs could not be opened (no descriptors left) are named."""
    checks = [Check(f"log_dir {d} offline", False, why) for d, why in sorted(offline_dirs.items())]
    if failed:
        (topic, partition), why = next(iter(sorted(failed.items())))
        checks.append(
            Check(
                "partition_logs",
                False,
                f"{len(failed)} partition log(s) could not be opened, first {topic}-{partition}: "
                f"{why}",
            )
        )
    return checks


def controller_check(
    is_cluster: bool,
    last_ack: float | None,
    session_timeout_s: float,
    now: float,
    quorum_wait: str | None = None,
) -> Check:
    """`quorum_wait`: what the start still waits for (Controller.quorum_wait())."""
    if quorum_wait is not None:
        return Check("controller", False, f"starting: {quorum_wait}")
    if not is_cluster:
        return Check("controller", True, "ok (in this process)")
    if last_ack is None:
        return Check("controller", False, "not registered with the active controller")
    silent = now - last_ack
    if silent > session_timeout_s:
        return Check(
            "controller",
            False,
            f"no heartbeat acknowledged for {silent:.1f}s (broker.session.timeout.ms "
            f"{session_timeout_s * 1000:.0f})",
        )
    return Check("controller", True, "ok")


def broker_controller_check(broker: MeteredBroker) -> Check:
    return controller_check(
        broker.config.quorum.is_cluster,
        broker.last_heartbeat_ack,
        broker.config.broker_session_timeout_ms / 1000,
        time.monotonic(),
        broker.controller.quorum_wait(),
    )


def report(checks: list[Check]) -> tuple[bool, dict[str, Any]]:
    """(healthy, the JSON body of /health)."""
    healthy = all(c.ok for c in checks)
    body: dict[str, Any] = {"status": "ok" if healthy else "unhealthy", "version": __version__}
    if not healthy:
        body["unhealthy"] = [f"{c.name}: {c.detail}" for c in checks if not c.ok]
    body["checks"] = [asdict(c) for c in checks]
    return healthy, body
