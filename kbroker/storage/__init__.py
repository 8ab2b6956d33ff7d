"""Partition log storage: segments, offset and time indexes, recovery, retention."""

from kbroker.storage.config import LogConfig
from kbroker.storage.errors import LogClosedError, LogError, OffsetOutOfRangeError
from kbroker.storage.file_slice import FileSlice
from kbroker.storage.log import AppendResult, PartitionLog
from kbroker.storage.manager import LogManager

__all__ = [
    "AppendResult",
    "FileSlice",
    "LogClosedError",
    "LogConfig",
    "LogError",
    "LogManager",
    "OffsetOutOfRangeError",
    "PartitionLog",
]
