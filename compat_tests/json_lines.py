"""A driver process of another client (Go, JavaScript) that prints one JSON object a line.

The compat tests of non-Python clients run a small program of the client's own language
and read what it saw as JSON lines; `JsonLines` collects them as they come, in a reader
thread, so a test can wait for an event while the program runs on.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class JsonLines:
    """A running driver process and the JSON lines it has printed so far."""

    proc: subprocess.Popen[str]
    events: list[dict[str, Any]] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition)

    def __post_init__(self) -> None:
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self.changed:
                self.events.append(json.loads(line))
                self.changed.notify_all()
        with self.changed:
            self.changed.notify_all()

    def of(self, kind: str) -> list[dict[str, Any]]:
        """The events of one kind (their "event" field) seen so far."""
        with self.changed:
            return [e for e in self.events if e.get("event") == kind]

    def wait_until(self, ready: Callable[[], bool], timeout: float, what: str) -> None:
        """Wait (on each new line) until `ready()`; fail once `timeout` passes or the
        process exits without it."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while not ready():
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    if ready():
                        return
                    raise AssertionError(f"never saw {what}; events: {self.events[-20:]}")
                self.changed.wait(min(left, 0.2))

    def finish(self, timeout: float = 30.0) -> dict[str, Any]:
        raise NotImplementedError

    def stop(self, timeout: float = 30.0) -> dict[str, Any]:
        """SIGTERM, then what `finish` returns."""
        self.proc.send_signal(signal.SIGTERM)
        return self.finish(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
