"""The share-partition leader's side of ShareFetch and ShareAcknowledge.

Kafka's SharePartitionManager as the request path sees it (`kbroker.share.partition`
holds the share-partitions themselves): ShareFetch and ShareAcknowledge are served, per
partition, by the leader of the data partition, NOT_LEADER_OR_FOLLOWER elsewhere (with
the current leader). Before acquiring from a share-partition it first holds, the leader
reads the stored state from the share coordinator (`kbroker.share.persister`); each
change is written back there before an acknowledgement is answered. A ShareFetch that
found nothing is parked until records arrive or come back, as Kafka's delayed share
fetch is.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from collections.abc import Collection
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from kbroker.share.coordinates import STATE_TOPIC, Coordinates, ShareBroker, leader_epoch
from kbroker.share.partition import INVALID_REQUEST, FetchAnswer, PartitionAcks, ShareSession
from kbroker.share.records import StateKey

if TYPE_CHECKING:
    from kbroker.share.state_service import ShareStateService

log = logging.getLogger("kbroker.share")


class ShareFetchPath:
    """ShareFetch and ShareAcknowledge on the data partition's leader: holding each
    share-partition from its stored state, acquiring and acknowledging records, and
    having every change stored by the share coordinator before it is answered."""

    def __init__(self, broker: ShareBroker, state: ShareStateService) -> None:
        self.broker = broker
        self.state = state
        self.coordinator = state.coordinator
        self._holding: dict[StateKey, asyncio.Future[ErrorCode]] = {}

    def _leader_epoch(self, topic: str, partition: int) -> int:
        return leader_epoch(self.broker, topic, partition)

    # -- holding a share-partition --------------------------------------------------------

    async def _hold(
        self, group_id: str, partitions: Collection[tuple[uuid.UUID, int]], wait_s: float
    ) -> dict[tuple[uuid.UUID, int], ErrorCode]:
        """Hold each share-partition led here that is not held yet, from the state its
        share coordinator stored; the partitions whose state could not be read, why."""
        waits: dict[tuple[uuid.UUID, int], asyncio.Future[ErrorCode]] = {}
        for topic_id, partition in partitions:
            key = (group_id, topic_id, partition)
            if key in self.coordinator.leader.partitions:
                continue
            waits[(topic_id, partition)] = self.start_holding(key)
        if not waits:
            return {}
        await asyncio.wait([asyncio.shield(w) for w in waits.values()], timeout=max(wait_s, 0.5))
        return {
            tp: w.result() if w.done() else ErrorCode.coordinator_not_available
            for tp, w in waits.items()
            if not w.done() or w.result() != ErrorCode.none
        }

    def start_holding(self, key: StateKey) -> asyncio.Future[ErrorCode]:
        """Read the share-partition's stored state and hold it, once at a time."""
        pending = self._holding.get(key)
        if pending is None:
            pending = self._holding[key] = asyncio.ensure_future(self._read_and_hold(key))
            pending.add_done_callback(functools.partial(self._holding_done, key))
        return pending

    def _holding_done(self, key: StateKey, future: asyncio.Future[ErrorCode]) -> None:
        if self._holding.get(key) is future:
            del self._holding[key]

    async def _read_and_hold(self, key: StateKey) -> ErrorCode:
        group_id, topic_id, partition = key
        ref = self.coordinator.topics.by_id(topic_id)
        if ref is None:
            return ErrorCode.none  # acquiring answers UNKNOWN_TOPIC_ID
        epoch = self._leader_epoch(ref.name, partition)
        if epoch < 0:
            return ErrorCode.none  # not led here: acquiring answers NOT_LEADER_OR_FOLLOWER
        if STATE_TOPIC not in self.broker.controller.state.topics:
            error = await self.state.ensure_topic()
            if error != ErrorCode.none:
                return error
        try:
            error, stored, state_epoch = await self.state.persister.read(key, epoch)
        except Exception:
            log.exception("reading the share state of %s failed", key)
            return ErrorCode.unknown_server_error
        if error != ErrorCode.none:
            log.info("cannot read share state of %s: %s", key, error.name)
            return error
        committed = self.coordinator.configs.get(group_id, "share.isolation.level")
        bounds = Coordinates(self.broker).bounds(ref.name, partition, committed == "read_committed")
        if (
            bounds is None
            or self._leader_epoch(ref.name, partition) != epoch
            or key in self.coordinator.leader.partitions
        ):
            return ErrorCode.none  # leadership moved on meanwhile, or held already
        now = int(time.time() * 1000)
        self.coordinator.leader.hold(group_id, ref, partition, bounds, now, stored, state_epoch)
        held = self.coordinator.leader.partitions.get(key)
        if held is not None and held.state.pending_dead_letters:
            self.state.dead_letters.forget_copies()  # a former leader may have written some
        return ErrorCode.none

    # -- ShareFetch ----------------------------------------------------------------------

    async def share_fetch(
        self,
        group_id: str,
        member_id: str,
        epoch: int,
        added: list[tuple[uuid.UUID, int]],
        acks: PartitionAcks,
        forgotten: list[tuple[uuid.UUID, int]],
        max_wait_ms: int,
        max_records: int,
        max_bytes: int,
        batch_aligned: bool = True,
        batch_size: int = 0,
    ) -> FetchAnswer:
        coordinator = self.coordinator
        answer = FetchAnswer(lock_ms=coordinator.configs.lock_ms(group_id))
        has_acks = any(batches for _, _, batches in acks)
        now = int(time.time() * 1000)
        session = coordinator.leader.open_session(
            group_id, member_id, epoch, added, forgotten, has_acks, answer, now
        )
        if session is None:
            return answer
        if epoch == 0:
            coordinator.leader.refresh_unshared(group_id, member_id, session.partitions)
        acks = self._led_here(acks, answer)
        wanted = set(session.partitions) | {(t, p) for t, p, _ in acks}
        await self._hold(group_id, wanted, max_wait_ms / 1000)
        now = int(time.time() * 1000)
        coordinator.leader.acknowledge(group_id, member_id, acks, now, answer)
        coordinator.leader.forget(group_id, member_id, forgotten)
        if epoch == -1:
            coordinator.leader.close_session(group_id, member_id)
        elif max_records > 0:
            await self._acquire_or_wait(
                group_id,
                member_id,
                session,
                max_records,
                max_bytes,
                max_wait_ms,
                answer,
                batch_aligned,
                batch_size,
            )
        stored = self.state.persist()
        if answer.acknowledged:
            error = await stored
            if error != ErrorCode.none:
                for part in answer.partitions.values():
                    if not part.ack_error:
                        part.ack_error = int(ErrorCode.kafka_storage_error)
        return answer

    async def _acquire_or_wait(
        self,
        group_id: str,
        member_id: str,
        session: ShareSession,
        max_records: int,
        max_bytes: int,
        max_wait_ms: int,
        answer: FetchAnswer,
        batch_aligned: bool,
        batch_size: int,
    ) -> None:
        """Acquire; when nothing could be, stay parked until something can be or the
        wait runs out, as Kafka's delayed share fetch does. Every acknowledgement wakes
        the parked fetches (the window may have moved), and while one member holds the
        records the window allows, answering the others empty at each wake-up would
        only have them ask again: with many consumers on a partition that was most of
        the requests, the broker's and the clients' time."""
        coordinator = self.coordinator
        deadline = time.monotonic() + max_wait_ms / 1000
        while True:
            now = int(time.time() * 1000)
            coordinator.leader.acquire(
                group_id,
                member_id,
                session,
                max_records,
                max_bytes,
                now,
                answer,
                batch_aligned,
                batch_size,
            )
            if answer.acquired_any or answer.acknowledged or answer.failed_any:
                return
            left = deadline - time.monotonic()
            if left <= 0 or self.broker.stopping:
                return
            await self._wait_for_records(session.partitions, left)
            if coordinator.leader.sessions.get((group_id, member_id)) is not session:
                return

    async def share_acknowledge(
        self, group_id: str, member_id: str, epoch: int, acks: PartitionAcks
    ) -> FetchAnswer:
        coordinator = self.coordinator
        answer = FetchAnswer()
        if not group_id or not member_id:  # as ShareFetch, before the session is looked up
            answer.error, answer.message = INVALID_REQUEST, "GroupId and MemberId must be set."
            return answer
        if epoch == 0:
            answer.error = int(ErrorCode.invalid_share_session_epoch)
            answer.message = "ShareAcknowledge cannot open a share session."
            return answer
        now = int(time.time() * 1000)
        session = coordinator.leader.open_session(
            group_id, member_id, epoch, [], [], False, answer, now
        )
        if session is None:
            return answer
        acks = self._led_here(acks, answer)
        await self._hold(group_id, {(t, p) for t, p, _ in acks}, 5.0)
        now = int(time.time() * 1000)
        coordinator.leader.acknowledge(group_id, member_id, acks, now, answer)
        if epoch == -1:
            coordinator.leader.close_session(group_id, member_id)
        error = await self.state.persist()
        if error != ErrorCode.none:
            for part in answer.partitions.values():
                if not part.ack_error:
                    part.ack_error = int(ErrorCode.kafka_storage_error)
        return answer

    def _led_here(self, acks: PartitionAcks, answer: FetchAnswer) -> PartitionAcks:
        """The acknowledgements for partitions led here; the others are answered
        NOT_LEADER_OR_FOLLOWER (the response names the current leader), and those of a
        topic that is gone (deleted since its records were acquired) UNKNOWN_TOPIC_ID, as
        Kafka answers them, before any share state is looked at."""
        kept: PartitionAcks = []
        for topic_id, partition, batches in acks:
            ref = self.coordinator.topics.by_id(topic_id)
            if ref is None:
                part = answer.part(topic_id, partition)
                part.error = int(ErrorCode.unknown_topic_id)
                if batches:
                    part.ack_error = part.error
                continue
            if self._leader_epoch(ref.name, partition) < 0:
                part = answer.part(topic_id, partition)
                part.error = int(ErrorCode.not_leader_or_follower)
                if batches:
                    part.ack_error = part.error
                continue
            kept.append((topic_id, partition, batches))
        return kept

    async def _wait_for_records(
        self, partitions: Collection[tuple[uuid.UUID, int]], timeout: float
    ) -> None:
        """Until a session partition grows, records come back, or the wait runs out."""
        keys = []
        for topic_id, partition in partitions:
            info = self.broker.controller.state.topics_by_id.get(topic_id)
            if info is not None:
                keys.append((info.name, partition))
        loop = asyncio.get_running_loop()
        data = self.broker.waiters.new_waiter(keys)
        released: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            if not released.done():
                released.set_result(None)

        self.coordinator.leader.on_available.append(wake)
        try:
            await asyncio.wait([data, released], timeout=timeout, return_when="FIRST_COMPLETED")
        finally:
            data.cancel()
            wake()
