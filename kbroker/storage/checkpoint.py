"""The per-partition checkpoint: log start offset, recovery point, clean-shutdown state.

One small JSON file, replaced atomically (write + rename). `clean` is present only
while the files match what a clean close left, so an open that finds it skips every
scan; the log clears it before its first change. No fsync: a lost or stale
checkpoint only costs a recovery scan, never data, because the recovery point only
moves after the data it covers was fsynced.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

from kbroker.storage.entry_file import replace_file

CHECKPOINT_FILE = "partition.checkpoint"


@dataclass(slots=True)
class CleanState:
    log_end_offset: int
    active_base_offset: int
    active_size: int


@dataclass(slots=True)
class PartitionCheckpoint:
    log_start_offset: int = 0
    recovery_point: int = 0
    clean: CleanState | None = None
    # The high watermark when written (Kafka's replication-offset-checkpoint): a reopened
    # log must not expose or assume as committed what was never committed.
    high_watermark: int | None = None


def read_checkpoint(directory: str) -> PartitionCheckpoint | None:
    """The checkpoint, or None when missing or unreadable (then everything is recovered)."""
    try:
        with open(os.path.join(directory, CHECKPOINT_FILE), "rb") as f:
            raw = json.loads(f.read())
        clean = raw.get("clean")
        return PartitionCheckpoint(
            int(raw["log_start_offset"]),
            int(raw["recovery_point"]),
            CleanState(
                int(clean["log_end_offset"]),
                int(clean["active_base_offset"]),
                int(clean["active_size"]),
            )
            if clean
            else None,
            int(raw["high_watermark"]) if raw.get("high_watermark") is not None else None,
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_checkpoint(directory: str, checkpoint: PartitionCheckpoint) -> None:
    path = os.path.join(directory, CHECKPOINT_FILE)
    data = json.dumps(asdict(checkpoint), separators=(",", ":")).encode()
    replace_file(path, data)
