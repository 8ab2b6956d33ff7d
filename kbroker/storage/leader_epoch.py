"""Leader epoch cache: the first offset written in each leader epoch.

Followers ask the leader "where did my last epoch end?" (OffsetForLeaderEpoch) and
truncate to the answer after a leader change; fetchers use it to detect diverging
logs. Entries change only when a new epoch writes its first batch, on truncation
and when the log start moves, so the file is rewritten whole (Kafka's
leader-epoch-checkpoint text format: version, count, then "epoch offset" lines).
"""

from __future__ import annotations

import os
from bisect import bisect_left, bisect_right

LEADER_EPOCH_FILE = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCache:
    __slots__ = ("path", "epochs", "starts")

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, LEADER_EPOCH_FILE)
        self.epochs: list[int] = []
        self.starts: list[int] = []

    @classmethod
    def load(cls, directory: str) -> LeaderEpochCache:
        cache = cls(directory)
        try:
            with open(cache.path, encoding="ascii") as f:
                lines = f.read().split("\n")
            count = int(lines[1])
            for line in lines[2 : 2 + count]:
                epoch, start = line.split()
                cache.epochs.append(int(epoch))
                cache.starts.append(int(start))
            if cache.epochs != sorted(set(cache.epochs)) or cache.starts != sorted(cache.starts):
                raise ValueError("entries out of order")
        except (OSError, ValueError, IndexError):
            cache.epochs, cache.starts = [], []
        return cache

    @property
    def latest_epoch(self) -> int:
        return self.epochs[-1] if self.epochs else UNDEFINED_EPOCH

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self.epochs, self.starts, strict=True))

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` begins at `start_offset`; True if the cache changed."""
        if epoch < 0 or (self.epochs and epoch <= self.epochs[-1]):
            return False
        changed = False
        while self.starts and self.starts[-1] >= start_offset:
            self.epochs.pop()
            self.starts.pop()
            changed = True
        if self.epochs and epoch <= self.epochs[-1]:
            return changed
        self.epochs.append(epoch)
        self.starts.append(start_offset)
        return True

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's endOffsetForEpoch: (largest epoch <= `epoch`, first offset after it)."""
        if epoch == UNDEFINED_EPOCH or not self.epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if epoch == self.epochs[-1]:
            return epoch, log_end_offset
        higher = bisect_right(self.epochs, epoch)
        if higher == len(self.epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        floor = higher - 1
        if floor < 0:
            return epoch, self.starts[higher]
        return self.epochs[floor], self.starts[higher]

    def truncate_from_end(self, end_offset: int) -> bool:
        """Drop epochs that start at or after `end_offset` (log truncated there)."""
        i = bisect_left(self.starts, end_offset)
        if i == len(self.starts):
            return False
        del self.epochs[i:]
        del self.starts[i:]
        return True

    def clear(self) -> None:
        """Forget every epoch (the log was emptied and starts again elsewhere)."""
        self.epochs.clear()
        self.starts.clear()

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log now starts at `start_offset`: drop epochs wholly before it and move the
        start of the one that holds it."""
        i = bisect_right(self.starts, start_offset) - 1
        if i < 0 or (i == 0 and self.starts[0] == start_offset):
            return False
        del self.epochs[:i]
        del self.starts[:i]
        self.starts[0] = start_offset
        return True

    def persist(self) -> None:
        lines = ["0", str(len(self.epochs))]
        lines += [f"{e} {s}" for e, s in zip(self.epochs, self.starts, strict=True)]
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="ascii") as f:
            f.write("\n".join(lines) + "\n")
        os.replace(tmp, self.path)
