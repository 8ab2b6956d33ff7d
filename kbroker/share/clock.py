"""What the share-partition leader does on the share coordinator's clock.

Every tick (Kafka runs these as timer tasks: the acquisition lock timeouts of each
share-partition, the session and member expiry of the group coordinator) the clock
forgets share-partitions whose data partition is no longer led here, lets locks and
members expire, and has every change stored. It also catches up on dead letters: a
share-partition whose stored state has copies still to write to its group's dead-letter
topic (its former leader died first) is held on becoming the data partition's leader,
or on its `__share_group_state` partition being loaded, without waiting for a consumer
to fetch there.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from kbroker.share.coordinates import STATE_TOPIC, ShareBroker, leader_epoch
from kbroker.share.records import StateKey

if TYPE_CHECKING:
    from kbroker.share.fetch_path import ShareFetchPath
    from kbroker.share.state_service import ShareStateService

log = logging.getLogger("kbroker.share")

TICK_S = 0.1


class ShareClock:
    """The periodic work of the share-partition leader: dropping share-partitions
    whose leadership moved on, expiry, storing changes, and the dead-letter catch-up.

    It ticks every `TICK_S` (a loop timer, no task) only while there is something to
    tick for (`busy`): share groups, share sessions or share-partitions held here,
    changes not stored yet, dead letters to catch up on, or groups naming a dead-letter
    topic (whose leadership changes it watches). Otherwise it sets no timer at all until
    `wake` (a change to store, share groups or stored states loaded, a group config
    changed)."""

    def __init__(
        self, broker: ShareBroker, state: ShareStateService, fetch_path: ShareFetchPath
    ) -> None:
        self.broker = broker
        self.state = state
        self.fetch_path = fetch_path
        self.coordinator = state.coordinator
        self._unheld_dead_letters: set[StateKey] = set()
        self._led: dict[tuple[str, int], int] = {}  # data partitions led here: epochs
        self._peeking: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # between `start` and `stop`
        self._ticking = False
        self._rested = False  # has ticked, then stopped for want of work
        self.ticks = 0

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.wake()

    def wake(self) -> None:
        """Tick within `TICK_S` (and on while `busy`)."""
        if self._timer is not None or self._ticking or self._loop is None:
            return
        if self._rested:
            # Leadership gained while resting was not looked at, as no group named a
            # dead-letter topic: it is not news to a group that names one from now on.
            self._rested = False
            self._led = self._led_now()
        self._timer = self._loop.call_later(TICK_S, self._run)

    def _run(self) -> None:
        self._timer = None
        self._ticking = True
        try:
            self.tick()
        except Exception:
            log.exception("share group clock failed")
        finally:
            self._ticking = False
        if self.busy():
            self.wake()
        else:
            self._rested = True

    def busy(self) -> bool:
        """Whether the clock has something to do on its next tick."""
        coordinator = self.coordinator
        leader = coordinator.leader
        membership = coordinator.membership
        return bool(
            leader.partitions
            or leader.sessions
            or leader.dirty
            or membership.groups
            or membership.changed_groups
            or self._unheld_dead_letters
            or (self._peeking is not None and not self._peeking.done())
            or any(coordinator.configs.dead_letter_topic(g) for g in coordinator.configs.values)
        )

    def loaded(self, partition: int) -> None:
        """A `__share_group_state` partition was loaded here: its share-partitions with
        dead letters still to write are held where their data partition is led here."""
        self._unheld_dead_letters.update(self.coordinator.store.with_dead_letters(partition))
        self.wake()

    def stop(self) -> None:
        self._loop = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._peeking is not None:
            self._peeking.cancel()

    def _leader_epoch(self, topic: str, partition: int) -> int:
        return leader_epoch(self.broker, topic, partition)

    def tick(self) -> None:
        self.ticks += 1
        self._drop_lost()
        self._peek_for_dead_letters()
        self._hold_dead_letters()
        self.coordinator.tick(int(time.time() * 1000))
        self.state.persist()

    def _led_now(self) -> dict[tuple[str, int], int]:
        """The data partitions (not internal topics) led here, with their leader epochs."""
        return {
            p.key: p.leader_epoch
            for p in self.broker.replicas.hosted.values()
            if p.is_leader and not p.topic.startswith("__")
        }

    def _drop_lost(self) -> None:
        """Forget share-partitions whose data partition this node no longer leads (or
        leads at a newer epoch: another broker led it in between)."""
        for key, held in list(self.coordinator.leader.partitions.items()):
            if self._leader_epoch(held.topic, key[2]) != held.leader_epoch:
                log.info(
                    "no longer leading share-partition %s of %s-%d", key[0], held.topic, key[2]
                )
                self.coordinator.leader.drop(key)

    def _peek_for_dead_letters(self) -> None:
        """On becoming a data partition's leader, read the stored states of the groups
        that name a dead-letter topic: one with dead letters still to write (its former
        leader died before writing them) is then held and written, as after a restart,
        without waiting for a consumer to fetch here. A group without a stored state
        for the partition is left alone (nothing is created)."""
        led = self._led_now()
        gained = [(k, e) for k, e in led.items() if self._led.get(k) != e]
        self._led = led
        groups = [
            g
            for g in self.coordinator.configs.values
            if self.coordinator.configs.dead_letter_topic(g)
        ]
        if not gained or not groups or STATE_TOPIC not in self.broker.controller.state.topics:
            return
        keys: list[tuple[StateKey, int]] = []
        for (topic, partition), epoch in gained:
            ref = self.coordinator.topics.by_name(topic)
            if ref is not None:
                keys += [((g, ref.topic_id, partition), epoch) for g in groups]
        previous = self._peeking
        self._peeking = asyncio.ensure_future(self._peek(keys, previous))

    async def _peek(
        self, keys: list[tuple[StateKey, int]], previous: asyncio.Task[None] | None
    ) -> None:
        if previous is not None:
            await asyncio.wait([previous])
        for key, epoch in keys:
            if key in self.coordinator.leader.partitions:
                continue
            try:
                error, stored, _ = await self.state.persister.read(key, epoch)
            except Exception:  # noqa: BLE001 - left to a consumer's fetch
                log.exception("reading the share state of %s failed", key)
                continue
            if error == ErrorCode.none and stored is not None and json.loads(stored).get("dlq"):
                await self.fetch_path.start_holding(key)

    def _hold_dead_letters(self) -> None:
        """Hold the share-partitions led here whose stored state (loaded at start or on
        becoming their share coordinator) has dead letters still to write: they are
        written without waiting for a consumer to fetch there. The writer searches the
        dead-letter topic before its first copy, so one made before a crash is not
        made again."""
        for key in list(self._unheld_dead_letters):
            ref = self.coordinator.topics.by_id(key[1])
            if (
                ref is None
                or key in self.coordinator.leader.partitions
                or key not in self.coordinator.store.entries
            ):
                self._unheld_dead_letters.discard(key)  # held (the writer takes them) or gone
            elif self._leader_epoch(ref.name, key[2]) >= 0:
                self.fetch_path.start_holding(key)
