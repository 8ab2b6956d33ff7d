"""The session and rebalance timers of consumer- and streams-protocol group members.

A member's session deadline moves with each heartbeat, but its one timer moves only when
it would fire late, so a heartbeat costs a dict store rather than a timer. A member asked
to revoke must do so within its rebalance timeout. Either timer, firing, asks its
coordinator to fence the member.
"""

from __future__ import annotations

from collections.abc import Callable, Container
from typing import Protocol

from kbroker.coordinator.clock import Scheduler, Timer


class TimedGroup(Protocol):
    session_timers: dict[str, tuple[Timer, int]]
    session_deadlines: dict[str, int]
    rebalance_timers: dict[str, Timer]

    @property
    def members(self) -> Container[str]: ...


def schedule_session_timeout(
    scheduler: Scheduler,
    group: TimedGroup,
    member_id: str,
    timeout: int,
    live: Callable[[], bool],
    expire: Callable[[], None],
) -> None:
    """Push the member's session deadline `timeout` ms out. When it passes, `expire`
    is called, if `live()` (the group is still the coordinator's) and it has the member."""
    deadline = scheduler.now_ms() + timeout
    group.session_deadlines[member_id] = deadline
    running = group.session_timers.get(member_id)
    if running is not None and running[1] <= deadline:
        return
    if running is not None:
        running[0].cancel()
    _arm_session_timer(scheduler, group, member_id, timeout, live, expire)


def _arm_session_timer(
    scheduler: Scheduler,
    group: TimedGroup,
    member_id: str,
    delay: int,
    live: Callable[[], bool],
    expire: Callable[[], None],
) -> None:
    due = scheduler.now_ms() + delay

    def fire() -> None:
        current = group.session_timers.get(member_id)
        if current is None or current[0] is not timer:
            return
        del group.session_timers[member_id]
        if not live() or member_id not in group.members:
            return
        deadline = group.session_deadlines.get(member_id)
        if deadline is None:
            return
        now = scheduler.now_ms()
        if now < deadline:
            _arm_session_timer(scheduler, group, member_id, deadline - now, live, expire)
            return
        expire()

    timer = scheduler.call_later(delay, fire)
    group.session_timers[member_id] = (timer, due)


def schedule_member_timer(
    scheduler: Scheduler,
    timers: dict[str, Timer],
    member_id: str,
    timeout: int,
    expire: Callable[[], None],
) -> None:
    """(Re)start the member's timer in `timers` (one a member); `expire` is called if it
    fires before it is cancelled or restarted."""
    cancel_member_timer(timers, member_id)

    def fire() -> None:
        if timers.get(member_id) is not timer:
            return
        del timers[member_id]
        expire()

    timer = scheduler.call_later(timeout, fire)
    timers[member_id] = timer


def cancel_member_timer(timers: dict[str, Timer], member_id: str) -> None:
    timer = timers.pop(member_id, None)
    if timer is not None:
        timer.cancel()


def schedule_rebalance_timeout(
    scheduler: Scheduler,
    group: TimedGroup,
    member_id: str,
    timeout: int,
    expire: Callable[[], None],
) -> None:
    """(Re)start the member's rebalance timer; `expire` is called if it fires."""
    schedule_member_timer(scheduler, group.rebalance_timers, member_id, timeout, expire)


def cancel_rebalance_timeout(group: TimedGroup, member_id: str) -> None:
    cancel_member_timer(group.rebalance_timers, member_id)


def cancel_member_timers(group: TimedGroup, member_id: str) -> None:
    running = group.session_timers.pop(member_id, None)
    if running is not None:
        running[0].cancel()
    group.session_deadlines.pop(member_id, None)
    cancel_rebalance_timeout(group, member_id)
