"""Which step held the event loop, and whose CPU it was: slow steps named as they happen.

`loop_lag` says that the loop ran a callback late; this says why. A beat callback runs
on the loop every `BEAT_S` and notes the time and the loop thread's CPU time
(`time.thread_time`). A watchdog thread looks every `WATCH_S`; once a beat is more than
`SAMPLE_AFTER_S` overdue it takes the loop thread's Python stack (`sys._current_frames`)
every `TICK_S`, and the CPU time of every thread of the process, until the loop runs the beat
again. A collector callback (`gc.callbacks`) times each garbage collection, in whichever
thread it runs, since a collection holds every thread through the GIL.

When the beat comes `threshold` or more late, the step that held the loop is counted
and logged once, with what it cost:

- the loop thread's CPU across the step: a step that used most of its wall time as CPU
  is the broker's own work; one that used little waited (for the GIL another thread
  held, for a blocking call, or for a CPU of a loaded machine);
- whether the loop thread was blocked in a kernel call other than the GIL's futex
  (`/proc/self/task/<tid>/wchan`) when sampled: an fsync or a file creation made inline;
- the frames sampled while it held the loop (`file:line function` of the innermost
  kbroker frame, and of the innermost frame when that is not kbroker's), with how many
  ticks each was seen: the culprit;
- any garbage collection that ran in it, with its generation, wall and CPU time and
  thread; and any other thread that used CPU while the loop waited.

A step whose own threads used at least half of `threshold` of CPU (the loop's, a
collection's or another thread's), or in which the loop thread was blocked in a call, is
logged as a WARNING and counted in
`kbroker_event_loop_slow_steps_total` and `kbroker_event_loop_slow_step_cpu_seconds_total`;
one that mostly waited is logged at INFO and counted in
`kbroker_event_loop_waited_steps_total`: on a loaded machine those are not the broker's.

Its cost when nothing stalls is one beat callback on the loop each 50 ms (a wake-up of
its own only when the loop is idle), a watchdog wake-up each 100 ms and a few
microseconds in each garbage collection: each wake-up of an idle process costs some
30-60 µs of CPU on a small VM, so they are kept few (under 2 ms of CPU a second idle,
nothing measurable per request; docs/benchmarks.md). A step is measured by how late it
made the next beat (as `loop_lag` measures its probe), so one of 100 ms or more is
always reported; the watchdog's look every 100 ms samples a step's frames while it
runs, unless it ends first.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from types import FrameType
from typing import Any

from prometheus_client.core import CounterMetricFamily, Metric

log = logging.getLogger("kbroker.loop")

BEAT_S = 0.05
WATCH_S = 0.1
TICK_S = 0.01
SAMPLE_AFTER_S = 0.02
THRESHOLD_S = 0.05
GC_NOTE_S = 0.005  # collections at least this long are kept to explain a slow step
PACKAGE_MARK = "/kbroker/"


def describe_frame(frame: FrameType | None) -> str:
    """The innermost kbroker frame of a stack (and the innermost one, if not kbroker's)."""
    if frame is None:
        return "?"
    inner = frame
    ours = None
    while frame is not None:
        if PACKAGE_MARK in frame.f_code.co_filename:
            ours = frame
            break
        frame = frame.f_back
    parts = []
    if ours is not None:
        parts.append(_where(ours))
    if ours is not inner:
        parts.append(_where(inner))
    return " in ".join(reversed(parts)) if len(parts) == 2 else parts[0]


def _where(frame: FrameType) -> str:
    name = frame.f_code.co_filename
    cut = name.rfind(PACKAGE_MARK)
    short = name[cut + 1 :] if cut >= 0 else name.rsplit("/", 2)[-1]
    return f"{short}:{frame.f_lineno} {frame.f_code.co_qualname}"


def thread_cpu(native_id: int) -> float | None:
    """The CPU time of a thread of this process, by its kernel thread id; None once the
    thread has ended.

    The clock is named from the kernel's id (Linux's per-thread CPU clock id,
    `~tid << 3 | CPUCLOCK_PERTHREAD | CPUCLOCK_SCHED`), not through
    `pthread_getcpuclockid`: that reads the thread's pthread structure, which is freed
    once the thread ends, and crashed the process when a thread listed a moment before
    had ended since. The kernel refuses a thread id that is gone, or not of this process."""
    try:
        return time.clock_gettime((~native_id << 3) | 6)
    except (OSError, OverflowError, ValueError):
        return None  # the thread ended


class StallWatch:
    """Names the steps that hold one event loop `threshold` seconds or longer."""

    def __init__(
        self,
        threshold: float = THRESHOLD_S,
        beat: float = BEAT_S,
        watch: float = WATCH_S,
        tick: float = TICK_S,
        sample_after: float = SAMPLE_AFTER_S,
    ) -> None:
        self.threshold = threshold
        self.beat = beat
        self.watch = watch
        self.tick = tick
        self.sample_after = sample_after
        self.slow_steps = 0
        self.slow_cpu_s = 0.0
        self.waited_steps = 0
        self.reports: list[str] = []  # the last few slow steps' reports (tests)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_ident = 0
        self._loop_native_id = 0
        self._loop_wchan = ""  # where in the kernel the loop thread sleeps (/proc)
        self._handle: asyncio.TimerHandle | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._beat_wall = 0.0  # time.monotonic() at the last beat
        self._beat_cpu = 0.0  # the loop thread's CPU time at the last beat
        self._due = 0.0
        # Filled by the watchdog during a late beat, read and reset by the next beat.
        self._samples: Counter[str] = Counter()
        self._blocked = 0  # samples that found the loop thread blocked in a call
        self._cpu_at_detect: dict[int, tuple[str, float]] = {}  # by kernel thread id
        self._gc_start: tuple[float, float] | None = None
        self._gcs: list[tuple[float, float, float, int, str]] = []

    # -- lifecycle ------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._loop_ident = threading.get_ident()
        self._loop_native_id = threading.get_native_id()
        self._loop_wchan = f"/proc/self/task/{self._loop_native_id}/wchan"
        self._beat_wall = time.monotonic()
        self._beat_cpu = time.thread_time()
        self._due = self._beat_wall + self.beat
        self._handle = loop.call_later(self.beat, self._on_beat)
        gc.callbacks.append(self._on_gc)
        self._stopping = False
        self._thread = threading.Thread(target=self._watch, name="loop-stall-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        self._stopping = True
        if self._thread is not None:
            self._thread.join(timeout=1)
            self._thread = None

    # -- the loop's side --------------------------------------------------------------

    def _on_beat(self) -> None:
        loop = self._loop
        assert loop is not None
        now = time.monotonic()
        cpu = time.thread_time()
        lag = now - self._due
        if lag >= self.threshold:
            self._report(lag, now, cpu - self._beat_cpu)
        elif self._samples:
            self._samples.clear()
            self._blocked = 0
            self._cpu_at_detect.clear()
        if self._gcs:
            self._gcs.clear()
        self._beat_wall, self._beat_cpu = now, cpu
        self._due = now + self.beat
        self._handle = loop.call_at(self._due, self._on_beat)

    def _report(self, lag: float, now: float, loop_cpu: float) -> None:
        samples, self._samples = self._samples, Counter()
        blocked, self._blocked = self._blocked, 0
        at_detect, self._cpu_at_detect = self._cpu_at_detect, {}
        since = self._beat_wall
        gcs = [g for g in self._gcs if g[0] >= since]
        others = []
        for native_id, (name, before) in at_detect.items():
            if native_id == self._loop_native_id:
                continue
            after = thread_cpu(native_id)
            if after is not None and after - before >= 0.005:
                others.append((after - before, name))
        others.sort(reverse=True)
        gc_cpu = sum(g[2] for g in gcs if g[4] != "loop")
        own = max(loop_cpu, gc_cpu, others[0][0] if others else 0.0)
        parts = [
            f"event loop held {1000 * lag:.0f} ms past its beat; "
            f"loop thread CPU {1000 * loop_cpu:.0f} ms"
        ]
        if samples:
            total = sum(samples.values())
            seen = ", ".join(f"{where} ({n}/{total})" for where, n in samples.most_common(3))
            parts.append(f"in {seen}")
        else:
            parts.append("in one step the watchdog could not sample (the GIL was held)")
        for _start, wall, gcpu, generation, thread in gcs:
            parts.append(
                f"gc generation {generation} in the {thread} thread "
                f"{1000 * wall:.0f} ms ({1000 * gcpu:.0f} ms CPU)"
            )
        if others:
            parts.append(
                "other threads' CPU "
                + ", ".join(f"{name} {1000 * cpu:.0f} ms" for cpu, name in others[:3])
            )
        total = sum(samples.values())
        in_a_call = blocked > 0 and 2 * blocked >= total
        if in_a_call:
            parts.append(f"the loop thread was blocked in a call in {blocked}/{total} samples")
        text = "; ".join(parts)
        if own >= self.threshold * 0.5 or in_a_call:
            self.slow_steps += 1
            self.slow_cpu_s += loop_cpu
            log.warning("slow step: %s", text)
            self.reports.append(text)
            del self.reports[:-20]
        else:
            self.waited_steps += 1
            log.info("late step, mostly waiting (machine load or the GIL): %s", text)

    # -- the garbage collector's side ---------------------------------------------------

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_start = (time.monotonic(), time.thread_time())
            return
        start = self._gc_start
        if start is None:
            return
        wall = time.monotonic() - start[0]
        if wall >= GC_NOTE_S:
            name = (
                "loop"
                if threading.get_ident() == self._loop_ident
                else threading.current_thread().name
            )
            self._gcs.append(
                (start[0], wall, time.thread_time() - start[1], info["generation"], name)
            )
            del self._gcs[:-8]

    # -- the watchdog thread --------------------------------------------------------------

    def _watch(self) -> None:
        wait = self.watch
        while not self._stopping:
            time.sleep(wait)  # pacing: the watchdog's look at the loop's beat
            overdue = time.monotonic() - self._due
            if overdue < self.sample_after:
                wait = self.watch
                continue
            wait = self.tick
            if not self._cpu_at_detect:
                snapshot = {}
                for thread in threading.enumerate():
                    native_id = thread.native_id
                    if native_id is None or thread is threading.current_thread():
                        continue
                    cpu = thread_cpu(native_id)
                    if cpu is not None:
                        snapshot[native_id] = (thread.name, cpu)
                self._cpu_at_detect = snapshot
            frame = sys._current_frames().get(self._loop_ident)
            self._samples[describe_frame(frame)] += 1
            del frame
            if self._asleep():
                self._blocked += 1

    def _asleep(self) -> bool:
        """The loop thread sleeps in a kernel call other than a futex (the GIL's wait)."""
        try:
            with open(self._loop_wchan, "rb") as wchan:
                where = wchan.read()
        except OSError:
            return False
        # Not blocked: running (0), waiting for the GIL (a futex), or idle in epoll
        # (the loop between steps, when the process itself waited for a CPU).
        return where not in (b"", b"0") and not where.startswith(
            (b"futex", b"ep_poll", b"do_epoll")
        )

    # -- metrics ---------------------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily(
            "kbroker_event_loop_slow_steps_total",
            "Steps that held the event loop 50 ms or more with the process's own CPU "
            "(kbroker.metrics.loop_stalls; each one is logged with its culprit).",
            value=self.slow_steps,
        )
        yield CounterMetricFamily(
            "kbroker_event_loop_slow_step_cpu_seconds_total",
            "The loop thread's CPU time spent in those slow steps.",
            value=self.slow_cpu_s,
        )
        yield CounterMetricFamily(
            "kbroker_event_loop_waited_steps_total",
            "Steps the event loop ran 50 ms or more late while using little CPU: it "
            "waited for the GIL, a blocking call or the machine.",
            value=self.waited_steps,
        )
