"""Process plumbing shared by the peers: ports, RSS and CPU of a process tree, stopping.

Broker figures are read from /proc so every peer (a Python process, a C binary, Redis)
is measured the same way, including any children or threads it spawns.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    """A loopback port that was free a moment ago (the broker binds it right after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def process_tree(pid: int) -> list[int]:
    """`pid` and all its descendants, found through /proc/<pid>/task/*/children."""
    seen: list[int] = []
    stack = [pid]
    while stack:
        p = stack.pop()
        if p in seen:
            continue
        seen.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            with contextlib.suppress(OSError):
                stack.extend(int(c) for c in (task / "children").read_text().split())
    return seen


def pin(pid: int, cpus: set[int]) -> None:
    """Bind every thread of `pid` and of its descendants to `cpus` (a thread's affinity is
    its own: setting the process's would move only its main thread)."""
    for p in process_tree(pid):
        for task in Path(f"/proc/{p}/task").glob("*"):
            with contextlib.suppress(OSError):  # a thread that just ended
                os.sched_setaffinity(int(task.name), cpus)


def _status_kib(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


@dataclass(frozen=True)
class Memory:
    """Resident memory of a process tree in MiB: now (VmRSS) and peak (VmHWM)."""

    rss_mib: float
    hwm_mib: float


def tree_memory(pid: int) -> Memory:
    pids = process_tree(pid)
    rss = sum(_status_kib(p, "VmRSS") for p in pids)
    hwm = sum(_status_kib(p, "VmHWM") for p in pids)
    return Memory(rss_mib=rss / 1024, hwm_mib=hwm / 1024)


PF_KTHREAD = 0x00200000


@dataclass(frozen=True)
class ProcCpu:
    """CPU ticks of one process (all threads), of its reaped children, and if it is a kthread."""

    ticks: int
    children_ticks: int
    kthread: bool


def _proc_cpu(pid: int | str) -> ProcCpu | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Fields after the parenthesised command name: flags is field 9, utime..cstime 14-17.
    fields = stat[stat.rindex(")") + 2 :].split()
    return ProcCpu(
        ticks=int(fields[11]) + int(fields[12]),
        children_ticks=int(fields[13]) + int(fields[14]),
        kthread=bool(int(fields[6]) & PF_KTHREAD),
    )


def tree_cpu_seconds(pid: int) -> float:
    """User+system CPU seconds used so far by a process tree, all threads.

    Children that have exited and were reaped count through their parent's cutime/cstime,
    so a short-lived child (Redis forks one to rewrite its AOF) never makes this go down.
    """
    total = 0
    for p in process_tree(pid):
        cpu = _proc_cpu(p)
        total += cpu.ticks + cpu.children_ticks if cpu else 0
    return total / CLOCK_TICKS


def cpu_snapshot() -> dict[int, ProcCpu]:
    """CPU of every process on the machine, to tell what neighbours used meanwhile."""
    snap: dict[int, ProcCpu] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            cpu = _proc_cpu(entry.name)
            if cpu is not None:
                snap[int(entry.name)] = cpu
    return snap


def foreign_cpu_seconds(
    before: dict[int, ProcCpu], after: dict[int, ProcCpu], ours: set[int]
) -> float:
    """CPU seconds that user processes other than `ours` used between two snapshots.

    Kernel threads (journal commits, writeback, softirq work) are left out: much of what
    they do is on the measured brokers' behalf. Reaped children are left out too (a
    parent's cutime jumps by a child's whole life at the moment it reaps it), so a
    process that both starts and ends between the snapshots goes uncounted.
    """
    ticks = 0
    for pid, cpu in after.items():
        if pid in ours or cpu.kthread:
            continue
        prior = before.get(pid)
        ticks += cpu.ticks - (prior.ticks if prior else 0)
    return max(ticks, 0) / CLOCK_TICKS


def self_cpu_seconds() -> float:
    """CPU seconds of this process (the client), librdkafka's threads included."""
    t = os.times()
    return t.user + t.system


def machine_busy_seconds() -> float:
    """CPU seconds all processes on the machine have been busy (from /proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    # Fields 9 and 10 (guest time) are already counted in user and nice.
    return (sum(fields[:8]) - idle) / CLOCK_TICKS


def wait_for_quiet(max_wait: float, cores: float = 0.3, window: float = 1.0) -> float:
    """Waits until other work uses under `cores` CPUs over `window`, at most `max_wait` s.

    Returns the foreign load (in cores) seen in the last window. The machine is shared,
    so this keeps a neighbour's burst from landing in the middle of a measurement.
    """
    deadline = time.perf_counter() + max_wait
    while True:
        before = cpu_snapshot()
        time.sleep(window)
        load = foreign_cpu_seconds(before, cpu_snapshot(), {os.getpid()}) / window
        if load < cores or time.perf_counter() >= deadline:
            return load


def loadavg() -> float:
    """1-minute load average: other work on the shared machine shows up here."""
    return float(Path("/proc/loadavg").read_text().split()[0])


def stop_process(proc: subprocess.Popen, timeout: float = 20.0) -> float:
    """SIGTERM, then SIGKILL after `timeout`; returns the seconds the process took to exit."""
    if proc.poll() is not None:
        return 0.0
    start = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    return time.perf_counter() - start


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
