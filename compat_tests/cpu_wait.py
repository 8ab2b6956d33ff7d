"""How long threads waited for a CPU: the machine's share of a latency, not the broker's.

Linux counts, per thread, the time it was runnable but given no CPU (the second field
of /proc/<pid>/task/<tid>/schedstat). On a shared machine that wait is part of any
latency measured from outside; subtracting it leaves what the broker itself took.

Which waits delay an answer: the asking thread's own, the broker's event-loop thread's,
and the wait of a broker thread that was preempted while holding the GIL (the loop
cannot run Python meanwhile). Only one thread holds the GIL at a time, so of the other
broker threads only the one that waited longest is counted, not their sum: several
workers waiting at once do not delay the loop several times over.
"""

from __future__ import annotations

import os
import threading


class CpuWait:
    """Per answer: `start()` before sending, `waited()` after the answer, in seconds."""

    def __init__(self, broker_pid: int) -> None:
        self.broker_pid = broker_pid
        self.me = (os.getpid(), threading.get_native_id())
        self._start: dict[tuple[int, int], int] = {}

    def _snapshot(self) -> dict[tuple[int, int], int]:
        counts: dict[tuple[int, int], int] = {}
        threads = [(self.broker_pid, int(t)) for t in os.listdir(f"/proc/{self.broker_pid}/task")]
        for pid, tid in [*threads, self.me]:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    counts[(pid, tid)] = int(f.read().split()[1])
            except (OSError, ValueError, IndexError):
                pass  # the thread ended meanwhile
        return counts

    def start(self) -> None:
        self._start = self._snapshot()

    def waited(self) -> float:
        now = self._snapshot()
        delta = {key: count - self._start.get(key, 0) for key, count in now.items()}
        loop = (self.broker_pid, self.broker_pid)  # the main thread's id is the process id
        own = delta.pop(self.me, 0) + delta.pop(loop, 0)
        return (own + max(delta.values(), default=0)) / 1e9
