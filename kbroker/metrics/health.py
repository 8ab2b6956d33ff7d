"""What /health reports: each check the broker can fail, and why it failed.

A broker is unhealthy when a log directory it writes to is gone or unusable, or when
(in a cluster) the active controller has not acknowledged a heartbeat within
broker.session.timeout.ms — after that the controller fences the broker anyway.
/ready says whether the broker serves at all; /health says what is wrong with it.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kbroker.broker import Broker


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    ok: bool
    detail: str


def log_dir_check(directory: Path) -> Check:
    name = f"log_dir {directory}"
    if not directory.is_dir():
        return Check(name, False, "missing or not a directory")
    if not os.access(directory, os.W_OK | os.X_OK):
        return Check(name, False, "not writable")
    return Check(name, True, "ok")


def controller_check(
    is_cluster: bool, last_ack: float | None, session_timeout_s: float, now: float
) -> Check:
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


def health(broker: Broker) -> tuple[bool, dict[str, Any]]:
    """(healthy, the JSON body of /health)."""
    checks = [log_dir_check(d) for d in broker.log_dirs]
    checks.append(
        controller_check(
            broker.config.quorum.is_cluster,
            broker.last_heartbeat_ack,
            broker.config.get("broker.session.timeout.ms") / 1000,
            time.monotonic(),
        )
    )
    healthy = all(c.ok for c in checks)
    body: dict[str, Any] = {"status": "ok" if healthy else "unhealthy"}
    if not healthy:
        body["unhealthy"] = [f"{c.name}: {c.detail}" for c in checks if not c.ok]
    body["checks"] = [asdict(c) for c in checks]
    return healthy, body
