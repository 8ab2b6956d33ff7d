"""Kafka's LogDirFailureChannel: where every I/O error from a log in service goes.

Whoever met the error (an append as leader or as follower, a read, an fsync, retention,
the cleaner, DeleteRecords) reports it here, and the one rule is applied in one place:
running out of descriptors or memory fails only the operation; any other error (EIO,
ENOSPC, EROFS, ...) means the log directory can no longer be trusted, and it goes
offline at once with every log in it (the log manager's `fail_dir`).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kbroker.storage.log import PartitionLog

# Errors of the process, not of a disk: a partition fails, its directory does not.
RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM})


def reason_of(exc: OSError) -> str:
    """How an I/O error is named in logs and in a client's error message."""
    return f"{type(exc).__name__}: {exc}"


class LogDirFailureChannel:
    """Takes a log's directory offline on an I/O error from it (see the module)."""

    __slots__ = ("_fail_dir",)

    def __init__(self, fail_dir: Callable[[str, str], object]) -> None:
        self._fail_dir = fail_dir

    def report(self, plog: PartitionLog, exc: OSError) -> str:
        """An I/O error from `plog`; returns why, for the client's answer."""
        reason = reason_of(exc)
        if exc.errno not in RESOURCE_ERRNOS:
            self._fail_dir(os.path.dirname(plog._dir), reason)
        return reason
