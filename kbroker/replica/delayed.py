"""Delayed operations, beside the partitions whose changes complete them.

Three kinds, as in Kafka's purgatories: a Fetch parked until its partitions' logs grow
(`DataWaiters`), a Produce with acks=all parked until the ISR holds its batch
(`DelayedAcks`, one per partition), and a DeleteRecords parked until every live replica
has moved its log start (`PendingDeletion`). None polls or blocks the loop: an append,
a follower's fetch or a role change completes them by plain callbacks.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

AckCallback = Callable[[ErrorCode], None]
# A deletion's outcome: the error code and the partition's low watermark (-1 on error).
DeletionCallback = Callable[[ErrorCode, int], None]


class Parked:
    """One request parked on some partitions: `wake` is called once, on the loop's next
    turn after the first of them grows (never inside the append that grew it), unless
    the request gives up first (`cancel`)."""

    __slots__ = ("_keys", "_owner", "wake", "_waking")

    def __init__(
        self, owner: DataWaiters, keys: list[tuple[str, int]], wake: Callable[[], None]
    ) -> None:
        self._owner = owner
        self._keys = keys
        self.wake = wake
        self._waking: asyncio.Handle | None = None

    def cancel(self) -> None:
        """Forget the request: `wake` is not called (any more)."""
        self._owner._forget(self)
        if self._waking is not None:
            self._waking.cancel()
            self._waking = None

    def _woken(self, loop: asyncio.AbstractEventLoop) -> None:
        self._owner._forget(self)
        self._waking = loop.call_soon(self._run)

    def _run(self) -> None:
        self._waking = None
        self.wake()


class DataWaiters:
    """Requests keyed by partition, woken when that partition's log grows.

    A Fetch that found less than min_bytes parks itself on every partition it reads,
    as a plain callback (`park`) or a future (`new_waiter`); an append wakes them.
    Nothing polls and nothing blocks the loop. A partition's set of waiters stays,
    empty or not, until the partition stops here (`release`): a follower's fetch
    session parks on the same thousands of partitions every round.
    """

    def __init__(self) -> None:
        self._waiting: dict[tuple[str, int], set[Parked]] = defaultdict(set)

    def park(self, keys: list[tuple[str, int]], wake: Callable[[], None]) -> Parked:
        """Call `wake()` soon after one of the partitions `keys` grows (once)."""
        parked = Parked(self, keys, wake)
        for key in keys:
            self._waiting[key].add(parked)
        return parked

    def new_waiter(self, keys: list[tuple[str, int]]) -> asyncio.Future[None]:
        """A future done when one of the partitions `keys` grows; cancel it to give up."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not future.done():
                future.set_result(None)

        parked = self.park(keys, wake)
        future.add_done_callback(lambda _: parked.cancel())
        return future

    def _forget(self, parked: Parked) -> None:
        waiting = self._waiting
        for key in parked._keys:
            parked_here = waiting.get(key)
            if parked_here is not None:
                parked_here.discard(parked)

    def release(self, key: tuple[str, int]) -> None:
        """The partition `key` stopped here: drop its set of waiters if none is left."""
        if not self._waiting.get(key, True):
            del self._waiting[key]

    def parked(self, key: tuple[str, int]) -> int:
        """How many requests wait for data of the partition `key` now."""
        return len(self._waiting.get(key, ()))

    def parked_requests(self) -> int:
        """How many requests wait for data now, whatever their partitions."""
        return len(set().union(*self._waiting.values()))

    def wake(self, key: tuple[str, int]) -> None:
        waiting = self._waiting.get(key)
        if waiting:
            loop = asyncio.get_running_loop()
            for parked in list(waiting):
                parked._woken(loop)

    def wake_all(self) -> None:
        for key in list(self._waiting):
            self.wake(key)


@dataclass(slots=True, eq=False)
class PendingAck:
    """One partition's share of a Produce with acks=all: done when the high watermark
    reaches `required_offset` (the offset after the batch)."""

    required_offset: int
    callback: AckCallback
    done: bool = False

    def cancel(self) -> None:
        """The request gave up (timed out): its callback is never called."""
        self.done = True


class DelayedAcks:
    """Kafka's produce purgatory for one partition.

    Appends arrive in offset order, so the waiting acknowledgements are ordered by the
    offset they need and complete from the front as the high watermark advances.
    """

    __slots__ = ("pending",)

    def __init__(self) -> None:
        # In offset order; read (not changed) by the partition to skip an empty purgatory
        # without a call on every append.
        self.pending: deque[PendingAck] = deque()

    def __len__(self) -> int:
        return len(self.pending)

    def add(self, required_offset: int, callback: AckCallback) -> PendingAck:
        pending = PendingAck(required_offset, callback)
        self.pending.append(pending)
        return pending

    def complete_up_to(self, high_watermark: int, code: ErrorCode = ErrorCode.none) -> None:
        """Answer every acknowledgement whose batch is now below the high watermark."""
        queue = self.pending
        while queue and queue[0].required_offset <= high_watermark:
            self._finish(queue.popleft(), code)

    def fail_all(self, code: ErrorCode) -> None:
        """Leadership moved: no acknowledgement can come from this replica any more."""
        queue, self.pending = self.pending, deque()
        for pending in queue:
            self._finish(pending, code)

    @staticmethod
    def _finish(pending: PendingAck, code: ErrorCode) -> None:
        if not pending.done:
            pending.done = True
            pending.callback(code)


@dataclass(slots=True, eq=False)
class PendingDeletion:
    """One partition's share of a DeleteRecords (Kafka's DelayedDeleteRecords): done when
    the low watermark, the smallest log start offset among the replicas on live brokers
    (`live`), reaches `offset`, so that no replica elected later serves deleted records."""

    offset: int
    live: Callable[[int], bool]
    callback: DeletionCallback
    done: bool = False

    def cancel(self) -> None:
        """The request gave up (timed out): its callback is never called."""
        self.done = True

    def finish(self, code: ErrorCode, low_watermark: int) -> None:
        if not self.done:
            self.done = True
            self.callback(code, low_watermark)
