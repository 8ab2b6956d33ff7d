"""Copying dead-lettered records to a share group's dead-letter topic (KIP-1191).

A record a consumer rejects, or that runs out of deliveries, is ARCHIVED and, when the
group names a topic in `errors.deadletterqueue.topic.name`, a dead-letter record goes
there: headers saying where it came from and why, and the original key, value and
headers too when the group sets `errors.deadletterqueue.copy.record.enable`. It goes to
the partition numbered as the source's, modulo the topic's partition count.

As in Kafka, a topic is only written when it is allowed to take the group's records,
checked at each write (`topic_problem`): its name starts with the broker's
`errors.deadletterqueue.topic.name.prefix` ("dlq." by default) and not with "__", and
it has the topic config `errors.deadletterqueue.group.enable=true`, or it does not exist
and `errors.deadletterqueue.auto.create.topics.enable` lets the broker create it (with
that config set). Records for a topic that is not allowed are only archived, with one
log line saying why.

The copy is written by the data partition's leader (which holds the share-partition) to
the dead-letter partition's leader wherever that is: appended here when this broker
leads it, else sent as a Produce with acks=all over the inter-broker listener; a letter
leaves the pending list only once its copy is acknowledged.

The pending copies are part of the share-partition's persisted state, so a restart still
writes them (the broker holds a share-partition whose loaded state has some, without
waiting for a consumer to fetch there); and before the first copy after a start, or
after taking a share-partition over, the topic is searched (at its partitions' leaders)
for copies already made, so a crash or a failover between writing a copy and recording
it cannot make a second.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from kbroker.coordinator_runtime.internal_topics import ServiceBroker, append_batch
from kbroker.protocol.batch import HEADER_SIZE, Record, decode_records, encode_batch, read_header
from kbroker.protocol.compression import decompress
from kbroker.protocol.messages import build
from kbroker.protocol.one_shot import fetch_fields, produce_fields
from kbroker.replica.broker_link import BrokerLinks
from kbroker.share.partition_state import DeadLetter
from kbroker.storage.log import PartitionLog

if TYPE_CHECKING:
    from kbroker.share.group_configs import ShareGroupConfigs
    from kbroker.share.partition import SharePartitionManager

log = logging.getLogger("kbroker.share.dlq")

PRODUCE, PRODUCE_VERSION = 0, 9  # the last to name the topic
FETCH, FETCH_VERSION = 1, 12
CALL_TIMEOUT_S = 10.0
RETRY_BACKOFF_S = 0.5

H_GROUP = "__dlq.errors.group.id"
H_TOPIC = "__dlq.errors.topic"
H_PARTITION = "__dlq.errors.partition"
H_OFFSET = "__dlq.errors.offset"
H_DELIVERY_COUNT = "__dlq.errors.delivery.count"
H_REASON = "__dlq.errors.reason"

Identity = tuple[str, str, int, int]  # group, topic, partition, offset

GROUP_ENABLE = "errors.deadletterqueue.group.enable"  # topic config: may take DLQ records


def topic_problem(
    group_id: str,
    topic: str,
    topic_configs: dict[str, str] | None,
    prefix: str,
    auto_create: bool,
) -> str | None:
    """Why `topic` cannot take `group_id`'s dead letters, in Kafka's words and order of
    checks, or None when it can. `topic_configs` are the topic's overrides, None when it
    does not exist."""
    if not topic:
        return f"Configured DLQ topic name in share group: {group_id} is empty."
    if topic.startswith("__"):
        return (
            f"Configured DLQ topic name in share group: {group_id} cannot start with __, "
            f"topic: {topic}."
        )
    if topic_configs is not None and topic_configs.get(GROUP_ENABLE, "").lower() != "true":
        return f"DLQ is not enabled on configured DLQ topic for share group: {group_id}, topic: {topic}"
    prefix = prefix.strip()
    if prefix and not topic.startswith(prefix):
        return (
            "Configured DLQ topic name does not comply with the DLQ topic prefix in share "
            f"group: {group_id}, topic: {topic}, prefix: {prefix}"
        )
    if topic_configs is None and not auto_create:
        return (
            "DLQ topic does not exist and auto create is disabled on cluster for share "
            f"group: {group_id}, topic: {topic}."
        )
    return None


class DeadLetterWriter:
    def __init__(
        self,
        broker: ServiceBroker,
        leader: SharePartitionManager,
        configs: ShareGroupConfigs,
        persist: Callable[[], Awaitable[ErrorCode]],
    ) -> None:
        """Copies the dead letters of the share-partitions `leader` holds to the topics the
        groups' `configs` name; `persist` stores that they were written."""
        self._broker = broker
        self._leader = leader
        self._configs = configs
        self._persist = persist
        self._task: asyncio.Task[None] | None = None
        self._again = False
        self._written: dict[str, set[Identity]] = {}  # copies found in DLQ topics at start
        self._refused: set[str] = set()  # problems already logged
        self._links = BrokerLinks(broker, "share-dlq", "dead-letter", log)

    def forget_copies(self) -> None:
        """Search the dead-letter topics again before the next copy: another broker
        may have written copies since (it led a share-partition held here now)."""
        self._written.clear()

    def kick(self) -> None:
        """Write whatever is pending, now or after the run under way."""
        if self._task is not None and not self._task.done():
            self._again = True
            return
        self._task = asyncio.ensure_future(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self._links.close()

    async def _run(self) -> None:
        try:
            while True:
                self._again = False
                if not await self._write_pending():
                    # A copy not written (its leader unreachable or refusing): try again
                    # after a pause, not in a tight loop with each persisted change.
                    await asyncio.sleep(RETRY_BACKOFF_S)
                if not self._again:
                    return
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("writing dead letters failed; retrying on the next change")

    async def _write_pending(self) -> bool:
        """Write the pending copies; whether all were written (or given up)."""
        leader, configs = self._leader, self._configs
        complete = True
        for key, topic, letters in leader.pending_dead_letters():
            group_id, _, partition = key
            target = configs.dead_letter_topic(group_id)
            if target is None or not self._allowed(group_id, target):
                leader.dead_letters_written(key, {d.offset for d in letters})
                continue
            if not await self._ensure_topic(target):
                complete = False
                continue
            written = self._written.get(target)
            if written is None:
                written = await self._existing_copies(target)
                if written is None:
                    complete = False
                    continue  # not searched: no copy yet, tried again
                self._written[target] = written
            copy_record = configs.dead_letters_copy_records(group_id)
            held = leader.partitions.get(key)
            done: set[int] = set()
            for letter in letters:
                if leader.partitions.get(key) is not held:
                    break  # its leadership moved on: the next leader writes the rest
                # `written` is this search's: the copies may be forgotten (another
                # share-partition held here) while a copy is under way.
                identity = (group_id, topic, partition, letter.offset)
                if identity not in written and not await self._copy(
                    target, group_id, topic, partition, letter, copy_record
                ):
                    # It may have been stored all the same: search again before the
                    # next attempt, rather than copy it twice.
                    self._written.pop(target, None)
                    complete = False
                    break
                written.add(identity)
                done.add(letter.offset)
            leader.dead_letters_written(key, done)
        await self._persist()
        return complete

    def _allowed(self, group_id: str, target: str) -> bool:
        """KIP-1191's rules for the topic, checked now: the operator may change them."""
        config = self._broker.config
        info = self._broker.controller.state.topics.get(target)
        problem = topic_problem(
            group_id,
            target,
            None if info is None else info.configs,
            config.errors_deadletterqueue_topic_name_prefix,
            config.errors_deadletterqueue_auto_create_topics_enable,
        )
        if problem is None:
            return True
        if problem not in self._refused:
            self._refused.add(problem)
            log.warning("dead letters archived without a copy: %s", problem)
        return False

    async def _ensure_topic(self, name: str) -> bool:
        controller = self._broker.controller
        if name not in controller.state.topics:
            try:
                await controller.create_topic(
                    name,
                    self._broker.config.num_partitions,
                    self._broker.config.default_replication_factor,
                    {GROUP_ENABLE: "true"},
                )
            except Exception as exc:  # noqa: BLE001 - created concurrently or refused: look again
                if name not in controller.state.topics:
                    log.warning("cannot create dead-letter topic %s: %s", name, exc)
                    return False
        for _ in range(50):  # its partitions get leaders once the controller elects them
            info = controller.state.topics.get(name)
            if info is not None and all(p.has_leader for p in info.partitions):
                return True
            await asyncio.sleep(0.02)
        return False

    def _leader_of(self, topic: str, partition: int) -> int | None:
        info = self._broker.controller.state.topics.get(topic)
        if info is None or not 0 <= partition < len(info.partitions):
            return None
        leader = info.partitions[partition].leader
        return leader if leader >= 0 else None

    def _original(self, topic: str, partition: int, offset: int) -> Record | None:
        replica = self._broker.replicas.get(topic, partition)
        if replica is None:
            return None
        plog = replica.log
        try:
            region = plog.read(offset, 1 << 20, replica.high_watermark)
        except Exception:  # noqa: BLE001 - deleted by retention: the copy says only where from
            return None
        if region is None:
            return None
        with region:
            data = region.read()
        pos = 0
        while pos + HEADER_SIZE <= len(data):
            header = read_header(data, pos)
            if pos + header.total_size > len(data):
                break
            if header.base_offset <= offset <= header.last_offset and not header.is_control:
                for record in decode_records(data, pos, plog.decompressor or decompress):
                    if record.offset == offset:
                        return record
            pos += header.total_size
        return None

    async def _copy(
        self,
        target: str,
        group_id: str,
        topic: str,
        partition: int,
        letter: DeadLetter,
        copy_record: bool,
    ) -> bool:
        original = self._original(topic, partition, letter.offset) if copy_record else None
        now = int(time.time() * 1000)
        headers: list[tuple[str, bytes | None]] = list(original.headers) if original else []
        headers += [
            (H_GROUP, group_id.encode()),
            (H_TOPIC, topic.encode()),
            (H_PARTITION, str(partition).encode()),
            (H_OFFSET, str(letter.offset).encode()),
            (H_DELIVERY_COUNT, str(letter.delivery_count).encode()),
            (H_REASON, letter.reason.encode()),
        ]
        record = Record(
            original.key if original else None,
            original.value if original else None,
            now,
            headers,
        )
        info = self._broker.controller.state.topics.get(target)
        if info is None:
            return False
        index = partition % len(info.partitions)
        leader = self._leader_of(target, index)
        if leader is None:
            return False
        batch = encode_batch([record], now)
        if leader != self._broker.node_id:
            return await self._produce_at(leader, target, index, batch)
        replica, _ = self._broker.replicas.leader(target, index)
        if replica is None:
            return False
        result, waiting = append_batch(self._broker, target, index, batch, now)
        if result.base_offset < 0:  # not appended
            why = result.error_message or ErrorCode(result.error_code).name
            log.error("cannot write to dead-letter topic %s: %s", target, why)
            return False
        if waiting is not None:
            try:
                code = await waiting
            except OSError as exc:
                log.error("cannot flush dead-letter topic %s: %s", target, exc)
                return False
            if code != ErrorCode.none:
                log.info("dead-letter copy to %s-%d not replicated: %s", target, index, code.name)
                return False
        return True

    async def _produce_at(
        self, leader: int, topic: str, partition: int, batch: bytes | bytearray
    ) -> bool:
        """Produce the copy with acks=all at the broker leading its partition."""
        request = build(
            load_request_schema(PRODUCE, PRODUCE_VERSION),
            produce_fields(topic, batch, partition=partition, acks=-1, timeout_ms=30_000),
        )
        response = await self._links.call(leader, request, CALL_TIMEOUT_S)
        if response is None:
            return False
        answer = response.responses[0].partition_responses[0]
        if answer.error_code != ErrorCode.none:
            log.info(
                "dead-letter copy to %s-%d refused by broker %d: %s",
                topic,
                partition,
                leader,
                ErrorCode(answer.error_code).name,
            )
            return False
        return True

    async def _existing_copies(self, target: str) -> set[Identity] | None:
        """Identities of the copies a dead-letter topic already holds, read at each
        partition's leader; None when a partition cannot be read now."""
        found: set[Identity] = set()
        info = self._broker.controller.state.topics.get(target)
        for partition in range(len(info.partitions) if info is not None else 0):
            leader = self._leader_of(target, partition)
            if leader is None:
                return None
            if leader == self._broker.node_id:
                replica, _ = self._broker.replicas.leader(target, partition)
                if replica is None:
                    return None
                self._copies_in(replica.log, found)
            elif not await self._copies_at(leader, target, partition, found):
                return None
        return found

    async def _copies_at(
        self, leader: int, topic: str, partition: int, found: set[Identity]
    ) -> bool:
        """Read a partition at its leader with Fetch, from its start to its high
        watermark, adding the copies' identities to `found`."""
        offset, end = 0, None
        schema = load_request_schema(FETCH, FETCH_VERSION)
        while end is None or offset < end:
            request = build(
                schema,
                fetch_fields(topic, partition=partition, offset=offset, max_wait=0, min_bytes=0),
            )
            response = await self._links.call(leader, request, CALL_TIMEOUT_S)
            if response is None:
                return False
            answer = response.responses[0].partitions[0]
            if answer.error_code == ErrorCode.offset_out_of_range and offset == 0:
                offset = int(answer.log_start_offset)
                continue
            if answer.error_code != ErrorCode.none:
                return False
            end = int(answer.high_watermark)
            data = bytes(answer.records or b"")
            after = _identities(data, decompress, found)
            if after is None:
                return offset >= end
            offset = after
        return True

    @staticmethod
    def _copies_in(plog: PartitionLog, found: set[Identity]) -> None:
        offset = plog.log_start_offset
        end = plog.log_end_offset
        while offset < end:
            region = plog.read(offset, 1 << 20, end)
            if region is None or region.length == 0:
                break
            with region:
                data = region.read()
            after = _identities(data, plog.decompressor or decompress, found)
            if after is None:
                break
            offset = after


def _identities(
    data: bytes, decompressor: Callable[[int, bytes], bytes], found: set[Identity]
) -> int | None:
    """Add the identities of the copies in `data`'s whole batches to `found`; the offset
    after the last whole batch, None when there is none."""
    after = None
    pos = 0
    while pos + HEADER_SIZE <= len(data):
        header = read_header(data, pos)
        if pos + header.total_size > len(data):
            break
        for record in decode_records(data, pos, decompressor):
            h = dict(record.headers)
            try:
                found.add(
                    (
                        (h.get(H_GROUP) or b"").decode(),
                        (h.get(H_TOPIC) or b"").decode(),
                        int(h.get(H_PARTITION) or -1),
                        int(h.get(H_OFFSET) or -1),
                    )
                )
            except ValueError:
                continue
        after = header.next_offset
        pos += header.total_size
    return after
