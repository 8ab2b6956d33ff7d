"""A driver process of another client (Go, JavaScript) that prints one JSON object a line.

The compat tests of non-Python clients run a small program of the client's own language
and read what it saw as JSON lines; `JsonLines` collects them as they come, in a reader
thread, so a test can wait for an event while the program runs on.
"""

from __future__ import annotations

import json
import subprocess
import threading
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
