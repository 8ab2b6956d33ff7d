"""The state machine the Raft log drives, and its snapshot file.

It lives on the Raft thread: commands are applied there in log order, and the snapshot
is written there between two commands, so the state it writes matches the log position
pysyncobj records with it. Readers on other threads only ever see whole published
`MetadataState` snapshots through the listener.
"""

from __future__ import annotations

import logging
import os
import pickle
import time
from collections.abc import Callable, Sequence
from typing import Any

from kbroker.controller.commands import BROKER_HEARTBEAT, REGISTER_BROKER, apply_command
from kbroker.controller.events import MetadataEvent, diff_events
from kbroker.controller.state import MetadataState, state_from_plain, state_to_plain

log = logging.getLogger("kbroker.controller")

Listener = Callable[[MetadataState, Sequence[MetadataEvent]], None]


class MetadataMachine:
    def __init__(
        self,
        listener: Listener | None = None,
        fsync: bool = False,
        on_load_error: Callable[[BaseException], None] | None = None,
        on_write_error: Callable[[OSError], None] | None = None,
    ) -> None:
        self.state = MetadataState()
        self.listener = listener
        self.on_load_error = on_load_error
        # pysyncobj swallows a snapshot that cannot be written and tries again later;
        # the error is handed here first (the process halts, as Kafka's does when its
        # metadata log directory fails), or logged without it.
        self.on_write_error = on_write_error
        self._fsync = fsync
        # pysyncobj logs and ignores a snapshot it cannot load, then replays a journal that
        # was truncated up to that snapshot: metadata would silently go missing. The error
        # is kept here so the controller refuses to start instead.
        self.load_error: BaseException | None = None
        # node id -> time.monotonic() this replica applied the broker's latest heartbeat or
        # registration. Not replicated state: only the active controller acts on it, to
        # fence the silent (KRaft keeps broker sessions out of the log the same way).
        self.last_seen: dict[int, float] = {}

    def apply(self, kind: str, payload: dict[str, Any]) -> Any:
        if kind in (BROKER_HEARTBEAT, REGISTER_BROKER):
            self.last_seen[payload["node_id"]] = time.monotonic()
        applied = apply_command(self.state, kind, payload)
        if applied.state is not self.state:
            self.state = applied.state
            if self.listener is not None:
                self.listener(applied.state, applied.events)
        return applied.outcome

    def write_snapshot(self, path: str, raft_data: tuple[Any, ...]) -> None:
        """pysyncobj's serializer hook: `raft_data` is (last entry, entry before it,
        cluster nodes); pysyncobj renames `path` over the previous snapshot afterwards."""
        last_entry, prev_entry, cluster = raft_data
        blob = {
            "raft": (
                last_entry,
                prev_entry,
                # A read-only node (an observer) is in its own cluster as None.
                sorted(str(node) for node in cluster if node is not None),
            ),
            "state": state_to_plain(self.state),
        }
        try:
            with open(path, "wb") as f:
                pickle.dump(blob, f, protocol=pickle.HIGHEST_PROTOCOL)
                if self._fsync:
                    f.flush()
                    os.fsync(f.fileno())
        except OSError as e:
            if self.on_write_error is not None:
                self.on_write_error(e)
            else:
                log.error("metadata snapshot %s cannot be written: %r", path, e)
            raise
        log.debug("metadata snapshot written at version %d", self.state.version)

    def read_snapshot(self, path: str) -> tuple[Any, ...]:
        """pysyncobj's deserializer hook: restores the state and returns the Raft part."""
        try:
            with open(path, "rb") as f:
                blob = pickle.load(f)
            old, new = self.state, state_from_plain(blob["state"])
        except BaseException as e:
            self.load_error = e
            log.critical("metadata snapshot %s is unreadable: %r", path, e)
            if self.on_load_error is not None:
                self.on_load_error(e)
            raise
        self.state = new
        if self.listener is not None:
            self.listener(new, diff_events(old, new))
        log.info("metadata snapshot loaded at version %d", new.version)
        return tuple(blob["raft"])
