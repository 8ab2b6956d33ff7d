"""Operations on one group, run one at a time: each writes its records, then applies them.

An operation computes a `Change` (the records it produces, applied as they come to a
working copy of the group) and a `finish` callback. The change's records are encoded and
written to the group's partition of the internal topic; only once the write succeeded
(and the partition is still ours) are they applied to the live state and `finish` called
with no error, so a failed write changes nothing. Operations on one key run in arrival
order, each computed from the state its predecessors left, whatever the write latency.
This is the part of Kafka's CoordinatorRuntime the group coordinators share; it knows
nothing of any group type.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Container
from typing import Any, Generic, Protocol, Self, TypeVar

from kio.schema.errors import ErrorCode

E = ErrorCode
Finish = Callable[[ErrorCode], None]

R = TypeVar("R")  # a record
W = TypeVar("W")  # the records as written


class _Group(Protocol):
    def copy(self) -> Self: ...

    def apply(self, record: Any) -> None: ...


G = TypeVar("G", bound=_Group)


class Change(Generic[G, R]):
    """The records one operation produces, applied as they come to a working copy of the
    group (`base`, or a new group when there is none)."""

    __slots__ = ("group_id", "base", "work", "records")

    def __init__(self, group_id: str, base: G | None, new: Callable[[str], G]) -> None:
        self.group_id = group_id
        self.base = base
        self.work: G | None = None if base is not None else new(group_id)
        self.records: list[R] = []

    @property
    def view(self) -> G:
        return self.work if self.work is not None else self.base  # type: ignore[return-value]

    def emit(self, record: R) -> None:
        if self.work is None:
            assert self.base is not None
            self.work = self.base.copy()
        self.work.apply(record)
        self.records.append(record)


C = TypeVar("C", bound="Change[Any, Any]")
Operation = Callable[[], tuple[C | None, Finish]]


class SerialWriter(Generic[C, W]):
    """A queue of operations per group id, each one's records written before they apply.

    `encode` turns a change's records into what `write(partition, encoded, done)` appends
    (raising one of `encode_errors` for records it cannot encode); `apply(group_id,
    change)` applies a written change to the live state; `partition_for` and `owned` say
    where a group's records go and whether this broker still coordinates that partition.
    """

    def __init__(
        self,
        *,
        label: str,
        logger: logging.Logger,
        encode: Callable[[list[Any]], W],
        encode_errors: tuple[type[Exception], ...],
        write: Callable[[int, W, Finish], None],
        apply: Callable[[str, C], None],
        partition_for: Callable[[str], int],
        owned: Callable[[], Container[int]],
        callback_failed: str,
    ) -> None:
        self._label = label
        self._log = logger
        self._encode = encode
        self._encode_errors = encode_errors
        self._write = write
        self._apply = apply
        self._partition_for = partition_for
        self._owned = owned
        self._callback_failed = callback_failed
        self._queues: dict[str, deque[Operation[C]]] = {}

    def busy(self, group_id: str) -> bool:
        """Whether an operation on the group is running or waiting."""
        return group_id in self._queues

    def submit(self, group_id: str, op: Operation[C]) -> None:
        queue = self._queues.get(group_id)
        if queue is not None:
            queue.append(op)
            return
        self._queues[group_id] = deque()
        self._execute(group_id, op)

    def call(self, finish: Finish, code: ErrorCode) -> None:
        """Call an operation's `finish`; a failing callback must not stop the queue."""
        try:
            finish(code)
        except Exception:
            self._log.exception(self._callback_failed)

    def _next_op(self, group_id: str) -> Operation[C] | None:
        queue = self._queues.get(group_id)
        if queue is None:
            return None
        if queue:
            return queue.popleft()
        del self._queues[group_id]
        return None

    def _execute(self, group_id: str, op: Operation[C] | None) -> None:
        label, log = self._label, self._log
        while op is not None:
            try:
                change, finish = op()
            except Exception:
                log.exception("%s %s: operation failed", label, group_id)
                op = self._next_op(group_id)
                continue
            if change is None or not change.records:
                self.call(finish, E.none)
                op = self._next_op(group_id)
                continue
            try:
                encoded = self._encode(change.records)
            except self._encode_errors as exc:
                log.error("%s %s: cannot encode records: %s", label, group_id, exc)
                self.call(finish, E.unknown_server_error)
                op = self._next_op(group_id)
                continue
            partition = self._partition_for(group_id)

            def done(
                code: ErrorCode,
                change: C = change,
                finish: Finish = finish,
                partition: int = partition,
            ) -> None:
                if code == E.none and partition not in self._owned():
                    code = E.not_coordinator
                if code == E.none:
                    self._apply(group_id, change)
                else:
                    log.warning(
                        "%s %s: writing %d records failed: %s",
                        label,
                        group_id,
                        len(change.records),
                        code.name,
                    )
                self.call(finish, code)
                self._execute(group_id, self._next_op(group_id))

            self._write(partition, encoded, done)
            return
