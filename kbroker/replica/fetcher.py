"""Followers pull from their leaders: one replica fetcher per source broker (Kafka's
`ReplicaFetcherThread`, here an asyncio task).

A fetcher keeps one connection to its leader (a `broker_link.BrokerLink`) and fetches
with the Fetch API as a replica (`replica_state.replica_id` set, its
`current_leader_epoch`, and the `last_fetched_epoch` of its log's last batch), appends
the leader's batches as they are and takes the leader's high watermark. The leader
learns each follower's log end offset from these fetches. They go within an
incremental fetch session (KIP-227, `fetch_session_handler`), as Kafka's followers
fetch: after the first, a Fetch names only the partitions whose position moved and
the answer only those with news, while the leader counts every partition of the
session as fetched again. A follower whose log diverged from the leader's (a tail
written under an epoch the new leader never had) learns it from the Fetch answer
itself, as Kafka's followers do since 2.7: the leader answers `diverging_epoch` (where
that epoch ends on the leader) and the follower truncates there before fetching again.
Only after OFFSET_OUT_OF_RANGE does it ask OffsetForLeaderEpoch where its latest epoch
ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from kbroker.config import BrokerConfig
from kbroker.controller.state import MetadataState
from kbroker.protocol.batch import HEADER_SIZE, InvalidBatchError
from kbroker.protocol.fetch_request import REPLICA_FETCH_VERSION, encode_replica_fetch
from kbroker.protocol.messages import build
from kbroker.replica.broker_link import AuthenticationFailed, BrokerLink
from kbroker.replica.fetch_session_handler import (
    FetchSessionHandler,
    SessionKey,
    SessionPartition,
)
from kbroker.replica.partition import Partition
from kbroker.replica.replication_quota import ReplicationQuota
from kbroker.security.inter_broker import PLAINTEXT, InterBrokerSecurity
from kbroker.storage.errors import LogError
from kbroker.storage.log import PartitionLog
from kbroker.tasks import cancel_and_wait

log = logging.getLogger("kbroker.replica.fetcher")
T = TypeVar("T")
E = TypeVar("E")

FETCH = 1
FETCH_VERSION = REPLICA_FETCH_VERSION  # replica_state (KIP-903) and topic ids
OFFSET_FOR_LEADER_EPOCH = 23
OFFSET_FOR_LEADER_EPOCH_VERSION = 4
_LENGTH = struct.Struct(">i")
_RETRY_LATER = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.unknown_topic_id,
        ErrorCode.offset_not_available,
    }
)


StorageErrors = Callable[[PartitionLog, OSError], object]
"""Told of an I/O error from a log (the log manager's LogDirFailureChannel.report)."""


@dataclass(frozen=True, slots=True)
class FetcherSettings:
    """Kafka's replica.fetch.* settings."""

    max_wait_ms: int = 500
    min_bytes: int = 1
    partition_max_bytes: int = 1048576
    response_max_bytes: int = 10485760
    backoff_ms: int = 1000
    socket_timeout_ms: int = 30000

    @classmethod
    def from_settings(cls, config: BrokerConfig) -> FetcherSettings:
        return cls(
            config.replica_fetch_wait_max_ms,
            config.replica_fetch_min_bytes,
            config.replica_fetch_max_bytes,
            config.replica_fetch_response_max_bytes,
            config.replica_fetch_backoff_ms,
            config.replica_socket_timeout_ms,
        )


@dataclass(slots=True, eq=False)
class FetchState:
    """A partition a fetcher serves: whether it has to truncate by OffsetForLeaderEpoch
    before fetching (after OFFSET_OUT_OF_RANGE), and until when it rests after an error."""

    partition: Partition
    truncating: bool = False
    resting_until: float = 0.0
    # Kafka's FetcherLagMetrics: the leader's high watermark less this log's end, as of
    # the last answer.
    lag: int = 0
    # This partition's session key and entry as the last Fetch named them, kept while
    # they hold: a follower idle on thousands of partitions then builds no new objects
    # for them each round (nor leaves the garbage collector any to walk).
    session_key: SessionKey | None = None
    asked: SessionPartition | None = None


def _by_topic(
    partitions: dict[SessionKey, T], entry: Callable[[int, T], E]
) -> dict[uuid.UUID, list[E]]:
    """Partitions named by (topic id, index) as a Fetch's topics: one `entry` per
    partition under its topic id, topics in the order they first come."""
    topics: dict[uuid.UUID, list[E]] = {}
    for (topic_id, index), data in partitions.items():
        topics.setdefault(topic_id, []).append(entry(index, data))
    return topics


def whole_batches(records: bytes) -> int:
    """How many leading bytes of a records field are whole batches (a leader may send a
    partial batch at the end, which the next fetch asks for again)."""
    pos, end = 0, len(records)
    while pos + HEADER_SIZE <= end:
        (length,) = _LENGTH.unpack_from(records, pos + 8)
        if length <= 0 or pos + 12 + length > end:
            break
        pos += 12 + length
    return pos


class ReplicaFetcher:
    """Pulls every partition this broker follows from one leader broker."""

    def __init__(
        self,
        node_id: int,
        leader_id: int,
        metadata: Callable[[], MetadataState],
        settings: FetcherSettings,
        security: InterBrokerSecurity = PLAINTEXT,
        storage_error: StorageErrors | None = None,
        quota: ReplicationQuota | None = None,
    ) -> None:
        self.node_id = node_id
        self.leader_id = leader_id
        self.metadata = metadata
        self.settings = settings
        self.security = security
        self.storage_error = storage_error
        self.quota = quota
        # The last refusal logged, so that one that repeats every retry is said once.
        self._refusal: str | None = None
        self.partitions: dict[tuple[str, int], FetchState] = {}
        self._changed = asyncio.Event()
        self._link: BrokerLink | None = None
        self._task: asyncio.Task[None] | None = None
        self.session = FetchSessionHandler()

    def add(self, partition: Partition) -> None:
        self.partitions[partition.key] = FetchState(partition)
        self._changed.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def remove(self, key: tuple[str, int]) -> None:
        self.partitions.pop(key, None)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait([task], what=f"replica fetcher for broker {self.leader_id}")
        if self._link is not None:
            self._link.close()

    # -- the loop -----------------------------------------------------------------------

    async def _run(self) -> None:
        backoff = self.settings.backoff_ms / 1000
        while True:
            if not self.partitions:
                self._changed.clear()
                await self._changed.wait()
                continue
            try:
                link = self._connect()
                if link is None:
                    await asyncio.sleep(backoff)
                    continue
                if not link.connected:  # a new connection: the leader may have restarted
                    self.session.handle_error()
                if any(s.truncating for s in self.partitions.values()):
                    await self._truncate(link)
                fetched = await self._fetch(link)
                self._refusal = None
                if not fetched:
                    await asyncio.sleep(backoff / 10)
            except asyncio.CancelledError:
                raise
            except AuthenticationFailed as exc:
                if str(exc) != self._refusal:
                    self._refusal = str(exc)
                    log.error(
                        "cannot replicate from broker %d: %s; retrying every %.1fs",
                        self.leader_id,
                        exc,
                        backoff,
                    )
                self._drop_link()
                await asyncio.sleep(backoff)
            except (OSError, EOFError, asyncio.IncompleteReadError, TimeoutError) as exc:
                log.info("fetching from broker %d: %s; retrying", self.leader_id, exc)
                self._drop_link()
                await asyncio.sleep(backoff)
            except Exception:
                log.exception("replica fetcher for broker %d failed; retrying", self.leader_id)
                self._drop_link()
                await asyncio.sleep(backoff)

    def _connect(self) -> BrokerLink | None:
        broker = self.metadata().brokers.get(self.leader_id)
        address = broker.endpoint(self.security.listener) if broker is not None else None
        if address is None:
            return None
        link = self._link
        if link is not None and (link.host, link.port) != address:
            self._drop_link()
            link = None
        if link is None:
            link = self._link = BrokerLink(*address, f"replica-{self.node_id}", self.security)
        return link

    def _drop_link(self) -> None:
        self.session.handle_error()
        if self._link is not None:
            self._link.close()
            self._link = None

    @property
    def _timeout(self) -> float:
        return (self.settings.socket_timeout_ms + self.settings.max_wait_ms) / 1000

    # -- truncation by leader epoch -----------------------------------------------------

    async def _truncate(self, link: BrokerLink) -> None:
        """Kafka's truncation on becoming follower (KIP-101/279): ask where our latest
        epoch ended on the leader, cut our log there."""
        states = [s for s in self.partitions.values() if s.truncating]
        by_topic: dict[str, list[dict[str, int]]] = {}
        asked: dict[tuple[str, int], tuple[FetchState, int]] = {}
        for s in states:
            p = s.partition
            epoch = p.log.latest_epoch
            if epoch < 0:  # nothing written with an epoch: nothing can diverge
                s.truncating = False
                continue
            asked[p.key] = (s, epoch)
            by_topic.setdefault(p.topic, []).append(
                {
                    "partition": p.index,
                    "current_leader_epoch": p.leader_epoch,
                    "leader_epoch": epoch,
                }
            )
        if not by_topic:
            return
        request = build(
            load_request_schema(OFFSET_FOR_LEADER_EPOCH, OFFSET_FOR_LEADER_EPOCH_VERSION),
            {
                "replica_id": self.node_id,
                "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
            },
        )
        response = await link.call(request, self._timeout)
        for t in response.topics:
            for r in t.partitions:
                entry = asked.get((t.topic, int(r.partition)))
                if entry is None:
                    continue
                s, epoch = entry
                if self.partitions.get(s.partition.key) is not s:
                    continue  # re-added meanwhile: it truncates again
                if r.error_code != ErrorCode.none:
                    s.resting_until = time.monotonic() + self.settings.backoff_ms / 1000
                    continue
                self._truncate_to(s, epoch, int(r.leader_epoch), int(r.end_offset))

    @staticmethod
    def _truncate_to(s: FetchState, epoch: int, leader_epoch: int, end_offset: int) -> None:
        """Cut the log where our `epoch` diverges from the leader's, which says its
        largest epoch <= ours is `leader_epoch` and ends at `end_offset` (an
        OffsetForLeaderEpoch answer, or a Fetch answer's diverging_epoch). An epoch this
        broker began as leader and never wrote to goes even when no record does."""
        p = s.partition
        end = p.log_end_offset
        if leader_epoch < 0 or end_offset < 0:
            target = min(p.high_watermark, end)  # the leader knows no such epoch
        elif leader_epoch == epoch:
            target = min(end_offset, end)
        else:  # the leader's largest epoch below ours: cut where it ended here too
            _, ours = p.end_offset_for_epoch(leader_epoch)
            target = min(end_offset, ours if ours >= 0 else end, end)
        if target < end:
            log.info(
                "%s-%d truncates its divergent tail from %d to %d (leader epoch %d)",
                p.topic,
                p.index,
                end,
                target,
                p.leader_epoch,
            )
        p.truncate_to(target)
        s.truncating = False

    # -- fetching -----------------------------------------------------------------------

    async def _fetch(self, link: BrokerLink) -> bool:
        """One Fetch for every partition ready to fetch, within the fetch session: the
        request names only what changed since the last one; False when none was ready."""
        now = time.monotonic()
        state = self.metadata()
        ready = [s for s in self.partitions.values() if not s.truncating and s.resting_until <= now]
        throttled: set[tuple[str, int]] = set()
        quota = self.quota
        if quota is not None and quota.active:
            throttled = {s.partition.key for s in ready if self._throttled(quota, s.partition)}
            if throttled and quota.exceeded(now):
                # Kafka's shouldFollowerThrottle: left out of this fetch while over the bound.
                ready = [s for s in ready if s.partition.key not in throttled]
        settings = self.settings
        topics = state.topics
        wanted: dict[SessionKey, SessionPartition] = {}
        sent: dict[SessionKey, FetchState] = {}
        for s in ready:
            p = s.partition
            info = topics.get(p.topic)
            if info is None:
                continue
            plog = p.log
            key = s.session_key
            if key is None or key[0] is not info.topic_id:
                key = s.session_key = (info.topic_id, p.index)
            asked = s.asked
            if (
                asked is None
                or asked.fetch_offset != plog.log_end_offset
                or asked.log_start_offset != plog.log_start_offset
                or asked.current_leader_epoch != p.leader_epoch
                or asked.last_fetched_epoch != plog.latest_epoch
                or asked.max_bytes != settings.partition_max_bytes
            ):
                asked = s.asked = SessionPartition(
                    plog.log_end_offset,
                    plog.log_start_offset,
                    p.leader_epoch,
                    plog.latest_epoch,
                    settings.partition_max_bytes,
                )
            wanted[key] = asked
            sent[key] = s
        if not wanted:
            return False
        session = self.session
        ask = session.build(wanted)
        request = encode_replica_fetch(
            self.node_id,
            settings.max_wait_ms,
            settings.min_bytes,
            settings.response_max_bytes,
            ask.session_id,
            ask.epoch,
            _by_topic(
                ask.send,
                lambda index, d: (
                    index,
                    d.current_leader_epoch,
                    d.fetch_offset,
                    d.last_fetched_epoch,
                    d.log_start_offset,
                    d.max_bytes,
                ),
            ),
            _by_topic(dict.fromkeys(ask.forget), lambda index, _: index),
        )
        try:
            response = await link.call_body(FETCH, FETCH_VERSION, request, self._timeout)
        except BaseException:
            session.handle_error()
            raise
        answered = [
            ((t.topic_id, int(r.partition_index)), r)
            for t in response.responses
            for r in t.partitions
        ]
        if not session.handle_response(
            int(response.error_code), int(response.session_id), (key for key, _ in answered)
        ):
            if response.error_code:
                log.info(
                    "fetch session with broker %d ended (%s): fetching in full",
                    self.leader_id,
                    ErrorCode(response.error_code).name,
                )
            return True
        now_ms = int(time.time() * 1000)
        for key, r in answered:
            got = sent[key]
            if self.partitions.get(got.partition.key) is not got:
                continue  # stopped following meanwhile
            if got.partition.log_end_offset != wanted[key].fetch_offset:
                continue  # truncated meanwhile
            if r.records and got.partition.key in throttled:
                self._count_throttled(len(r.records))
            self._apply(got, r, now_ms)
        return True

    def _count_throttled(self, size: int) -> None:
        if self.quota is not None:
            self.quota.record(size)

    def _throttled(self, quota: ReplicationQuota, p: Partition) -> bool:
        """A replica out of the ISR that its topic lists for follower throttling."""
        return self.node_id not in p.isr and quota.is_throttled(p.topic, p.index)

    def _guarded(self, p: Partition, change: Callable[[], None], s: FetchState) -> None:
        """Run a change to the follower's log; an I/O error takes its directory offline,
        any other failure is logged, and either way the partition rests a moment."""
        try:
            change()
        except OSError as exc:
            if self.storage_error is not None:
                self.storage_error(p.log, exc)
            s.resting_until = time.monotonic() + self.settings.backoff_ms / 1000
        except LogError as exc:
            log.error("%s-%d: cannot follow the leader's log start: %s", p.topic, p.index, exc)
            s.resting_until = time.monotonic() + self.settings.backoff_ms / 1000

    def _apply(self, s: FetchState, r: Any, now_ms: int) -> None:
        p = s.partition
        code = ErrorCode(r.error_code)
        if code != ErrorCode.none:
            leader_start = int(r.log_start_offset)
            if code == ErrorCode.offset_out_of_range and leader_start > p.log_end_offset:
                # Kafka's fetchOffsetAndTruncate: what this replica lacks was deleted on
                # the leader, so it starts again, empty, at the leader's log start.
                log.info(
                    "%s-%d log end %d is below leader %d's log start %d: starting again there",
                    p.topic,
                    p.index,
                    p.log_end_offset,
                    self.leader_id,
                    leader_start,
                )
                self._guarded(p, lambda: p.truncate_fully_and_start_at(leader_start), s)
                return
            if code == ErrorCode.offset_out_of_range:
                log.warning(
                    "%s-%d fetch offset %d out of range on leader %d (log start %d)",
                    p.topic,
                    p.index,
                    p.log_end_offset,
                    self.leader_id,
                    r.log_start_offset,
                )
                s.truncating = True
            elif code not in _RETRY_LATER:
                log.warning("%s-%d: leader %d answered %s", p.topic, p.index, self.leader_id, code)
            s.resting_until = time.monotonic() + self.settings.backoff_ms / 1000
            return
        diverging = r.diverging_epoch
        if diverging.epoch >= 0 and diverging.end_offset >= 0:
            # The leader has no record of ours from where our last epoch ends there on.
            self._truncate_to(s, p.log.latest_epoch, diverging.epoch, diverging.end_offset)
            return
        records = r.records
        if records:
            usable = whole_batches(records)
            if usable:
                try:
                    p.append_as_follower(memoryview(records)[:usable], now_ms)
                except (InvalidBatchError, LogError) as exc:
                    log.error(
                        "%s-%d: cannot append the leader's batches: %s", p.topic, p.index, exc
                    )
                    s.resting_until = time.monotonic() + self.settings.backoff_ms / 1000
                    return
                except OSError as exc:  # a disk error: the log directory goes offline
                    if self.storage_error is not None:
                        self.storage_error(p.log, exc)
                    s.resting_until = time.monotonic() + self.settings.backoff_ms / 1000
                    return
        p.update_follower_high_watermark(int(r.high_watermark))
        if r.log_start_offset > p.log.log_start_offset:
            self._guarded(p, lambda: p.follow_log_start(int(r.log_start_offset)), s)
        s.lag = max(0, int(r.high_watermark) - p.log_end_offset)


@dataclass(slots=True)
class ReplicaFetchers:
    """Kafka's ReplicaFetcherManager: which fetcher (by leader) serves each partition."""

    node_id: int
    metadata: Callable[[], MetadataState]
    settings: FetcherSettings = field(default_factory=FetcherSettings)
    security: InterBrokerSecurity = PLAINTEXT
    fetchers: dict[int, ReplicaFetcher] = field(default_factory=dict)
    # Where an I/O error of a follower's append goes (the log directory failure channel).
    storage_error: StorageErrors | None = None
    # Set by stop(): the broker is shutting down and its logs are about to close.
    stopped: bool = False
    # follower.replication.throttled.rate and the replicas it holds (replication_quota).
    quota: ReplicationQuota | None = None

    def follow(self, partition: Partition) -> None:
        """(Re)start fetching `partition` from its leader (from its log end, naming its
        last epoch: the leader's answer says if it must truncate). Once stopped, nothing
        starts again: a role change the controller commits while the broker shuts down
        (its own controlled shutdown makes it a follower) would otherwise start a fetcher
        that outlives the closed logs, failing every second and keeping the process up."""
        self.unfollow(partition.key)
        if self.stopped or partition.leader_id < 0:
            return  # shutting down, or no leader to fetch from until one is elected
        fetcher = self.fetchers.get(partition.leader_id)
        if fetcher is None:
            fetcher = ReplicaFetcher(
                self.node_id,
                partition.leader_id,
                self.metadata,
                self.settings,
                self.security,
                self.storage_error,
                self.quota,
            )
            self.fetchers[partition.leader_id] = fetcher
        fetcher.add(partition)

    def fetching(self, partition: Partition) -> bool:
        """Whether `partition` is fetched from its leader now (no leader: nothing to do)."""
        if partition.leader_id < 0:
            return True
        fetcher = self.fetchers.get(partition.leader_id)
        state = fetcher.partitions.get(partition.key) if fetcher is not None else None
        return state is not None and state.partition is partition

    def lags(self) -> dict[tuple[str, int], int]:
        """Each followed partition's lag behind its leader, in offsets."""
        return {
            key: s.lag
            for fetcher in self.fetchers.values()
            for key, s in fetcher.partitions.items()
        }

    def unfollow(self, key: tuple[str, int]) -> None:
        for fetcher in self.fetchers.values():
            fetcher.remove(key)

    async def stop(self) -> None:
        self.stopped = True
        for fetcher in list(self.fetchers.values()):
            with contextlib.suppress(Exception):
                await fetcher.stop()
        self.fetchers.clear()
