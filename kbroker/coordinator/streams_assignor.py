"""The server-side task assignor of streams groups: Kafka's sticky rules.

Active tasks are spread so every member gets its share (the count differs by at most
one), and a task stays with the member that had it in the previous target while that
member is under its share. Standby tasks (`num_standby` per task) go to the least loaded
member of a process that holds neither the task's active nor another standby of it;
a previous standby owner is preferred. When there are fewer such processes than
standbys asked for, the task gets fewer. Like Kafka 4.3's sticky assignor it assigns no
warm-up tasks; the group carries warm-ups a client reports, nothing more. The task offsets
and end offsets a member's heartbeat carries are read and dropped, as Kafka 4.3's
coordinator drops them: no assignment there is lag-aware, so none here is either.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from kbroker.coordinator.streams_group import TaskAssignment, tasks_of

log = logging.getLogger("kbroker.coordinator.streams")

Task = tuple[str, int]


@dataclass(frozen=True, slots=True)
class AssignmentMember:
    process_id: str
    previous: TaskAssignment  # the member's previous target


def assign_tasks(
    members: Mapping[str, AssignmentMember],
    subtopology_tasks: Mapping[str, int],
    num_standby: int = 0,
) -> dict[str, TaskAssignment]:
    """The new target of every member: `subtopology_tasks` gives each subtopology's
    number of tasks (partitions 0..n-1)."""
    if not members:
        return {}
    tasks: list[Task] = sorted((s, p) for s, n in subtopology_tasks.items() for p in range(n))
    order = sorted(members)
    active: dict[str, list[Task]] = {m: [] for m in order}
    quota_high = -(-len(tasks) // len(order))  # ceil
    previous_active: dict[Task, str] = {}
    previous_standby: dict[Task, set[str]] = {}
    for member_id in order:
        prev = members[member_id].previous
        for s, parts in prev.active.items():
            for p in parts:
                previous_active.setdefault((s, p), member_id)
        for s, parts in prev.standby.items():
            for p in parts:
                previous_standby.setdefault((s, p), set()).add(member_id)

    # 1. Stickiness: a task stays with its previous owner while that member is below
    # its share: first up to the low share each, then up to the high share for as many
    # members as the remainder allows, so every member can still reach the low share.
    quota_low = len(tasks) // len(order)
    high_allowed = len(tasks) - quota_low * len(order)
    unassigned: list[Task] = []
    for task in tasks:
        owner = previous_active.get(task)
        if owner is not None and len(active[owner]) < quota_low:
            active[owner].append(task)
        else:
            unassigned.append(task)

    def may_take(member_id: str) -> bool:
        n = len(active[member_id])
        if n < quota_low:
            return True
        at_high = sum(1 for m in order if len(active[m]) >= quota_high)
        return n < quota_high and at_high < high_allowed

    rest: list[Task] = []
    for task in unassigned:
        owner = previous_active.get(task)
        if owner is not None and len(active[owner]) >= quota_low and may_take(owner):
            active[owner].append(task)
        else:
            rest.append(task)
    # 2. The rest to the least loaded members, spreading a subtopology's tasks.
    for task in rest:

        def load(member_id: str, task: Task = task) -> tuple[int, int, int, str]:
            same = sum(1 for t in active[member_id] if t[0] == task[0])
            standby_before = 0 if member_id in previous_standby.get(task, ()) else 1
            return (len(active[member_id]), standby_before, same, member_id)

        candidates = [m for m in order if may_take(m)] or order
        active[min(candidates, key=load)].append(task)

    # 3. Standby tasks, never on a process that runs the task as active or as another
    # standby.
    standby: dict[str, list[Task]] = {m: [] for m in order}
    if num_standby > 0:
        owner_of = {t: m for m, ts in active.items() for t in ts}
        for task in tasks:
            processes = {members[owner_of[task]].process_id}
            for _ in range(num_standby):
                eligible = [m for m in order if members[m].process_id not in processes]
                if not eligible:
                    log.debug("task %s_%d: no process left for another standby", *task)
                    break
                before = previous_standby.get(task, set())

                def standby_load(m: str, before: set[str] = before) -> tuple[int, int, str]:
                    return (0 if m in before else 1, len(active[m]) + len(standby[m]), m)

                chosen = min(eligible, key=standby_load)
                standby[chosen].append(task)
                processes.add(members[chosen].process_id)

    def compact(ts: list[Task]) -> dict[str, frozenset[int]]:
        return tasks_of((s, [p]) for s, p in ts)

    return {m: TaskAssignment(compact(active[m]), compact(standby[m]), {}) for m in order}
