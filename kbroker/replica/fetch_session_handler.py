"""The fetching side of a fetch session (KIP-227), Kafka's FetchSessionHandler: what a
follower's replica fetcher sends its leader each round.

The first Fetch names every partition, with session id 0 and epoch 0, which asks the
leader for a session. Once the leader answers with a session id, each Fetch names only
the partitions added or changed since the last one (fetch offset, log start offset,
leader epoch, last fetched epoch or byte bound) and forgets those no longer fetched, at
the next epoch (after 2**31-1 comes 1, never 0). The leader reads every partition of
the session at the position it last heard of, so a follower idle on a thousand
partitions sends an almost empty Fetch and gets an almost empty answer: a partition
left out of an incremental answer had nothing new.

Any error ends the session: FETCH_SESSION_ID_NOT_FOUND starts over with no session
named (epoch 0); any other top-level error, an answer that does not fit the request,
or a failed request (the connection lost, a timeout) sends the next Fetch in full, at
epoch 0 under the old session id, which closes that session on the leader and opens a
new one.

No I/O here: the fetcher asks `build` for the next request's partitions and tells
`handle_response` or `handle_error` how it went.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from kbroker.replica.fetch_sessions import (
    FETCH_SESSION_ID_NOT_FOUND,
    INITIAL_EPOCH,
    NO_SESSION,
    next_epoch,
)

SessionKey = tuple[uuid.UUID, int]  # (topic id, partition)


class SessionPartition(NamedTuple):
    """What the leader keeps of one partition of the session; a change to any field
    sends the partition again."""

    fetch_offset: int
    log_start_offset: int
    current_leader_epoch: int
    last_fetched_epoch: int
    max_bytes: int


@dataclass(slots=True)
class SessionRequest:
    """One Fetch's session fields and the partitions it names."""

    session_id: int
    epoch: int
    send: dict[SessionKey, SessionPartition] = field(default_factory=dict)
    forget: list[SessionKey] = field(default_factory=list)

    @property
    def full(self) -> bool:
        return self.epoch == INITIAL_EPOCH


class FetchSessionHandler:
    """One fetcher's session with one leader."""

    def __init__(self) -> None:
        self.session_id = NO_SESSION
        self.next_epoch = INITIAL_EPOCH
        # The partitions of the session as the last request left them, in its order.
        self.partitions: dict[SessionKey, SessionPartition] = {}
        self._last: SessionRequest | None = None

    def build(self, wanted: dict[SessionKey, SessionPartition]) -> SessionRequest:
        """The next Fetch for the partitions `wanted` now (in the order to send them):
        all of them in a full Fetch, else only what differs from the session."""
        if self.next_epoch == INITIAL_EPOCH:
            request = SessionRequest(self.session_id, INITIAL_EPOCH, dict(wanted))
        else:
            known = self.partitions
            request = SessionRequest(
                self.session_id,
                self.next_epoch,
                {key: data for key, data in wanted.items() if known.get(key) != data},
                [key for key in known if key not in wanted],
            )
        self.partitions = dict(wanted)
        self._last = request
        return request

    def handle_response(
        self, error_code: int, session_id: int, answered: Iterable[SessionKey]
    ) -> bool:
        """Take a Fetch answer's top-level error, its session id and the partitions it
        answers; False when its partitions are not to be used (an error, or an answer
        that does not fit the request), and the next Fetch is full."""
        request = self._last
        self._last = None
        if error_code:
            if error_code == FETCH_SESSION_ID_NOT_FOUND:
                self._start_over()
            else:
                self._close_existing()
            return False
        if request is None:  # an answer to no request: trust none of the session
            self._close_existing()
            return False
        keys = set(answered)
        if request.full:
            if keys != set(self.partitions):  # a full answer names exactly what was asked
                self._start_over()
                return False
            if session_id == NO_SESSION:  # the leader keeps no session for us
                self._start_over()
            else:
                self.session_id, self.next_epoch = session_id, next_epoch(INITIAL_EPOCH)
            return True
        if not keys <= self.partitions.keys():  # an incremental answer names no stranger
            self._close_existing()
            return False
        if session_id == NO_SESSION:  # the leader closed the session
            self._start_over()
        else:
            self.next_epoch = next_epoch(self.next_epoch)
        return True

    def handle_error(self) -> None:
        """The Fetch failed (no answer, a lost connection): the next one is full."""
        self._last = None
        self._close_existing()

    def _start_over(self) -> None:
        """Kafka's INITIAL metadata: a full Fetch naming no session."""
        self.session_id = NO_SESSION
        self.next_epoch = INITIAL_EPOCH

    def _close_existing(self) -> None:
        """Kafka's nextCloseExisting: a full Fetch under the old session id, which the
        leader drops before it opens a new one."""
        self.next_epoch = INITIAL_EPOCH
