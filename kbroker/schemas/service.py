"""The schema registry inside a running broker, over the compacted `_schemas` topic.

Every node keeps the registry's state (`RegistryState`) by reading its own replica of
`_schemas` (one partition). The leader of that partition is the registry's writer: on
gaining the leadership it reads its whole log, announces itself (a NOOP record naming
its node and URL, which also carries the highest id given so far) and from then on
serves writes one at a time, each appended with acks=all before it is answered. Other
nodes forward writes to the announced writer. Ids come from the writer's state, which
holds every record of its log: after a failover the new leader's log holds every
acknowledged record (it was in the ISR), so no acknowledged id is given again.

A follower applies only records below its high watermark (never records a new leader
could truncate), and a read waits until it has applied what the replica held when the
read arrived, so a write acknowledged anywhere is seen by a read that follows. Where the
replica holds records above its high watermark (which it learns only with its next
replica fetch), the read fetches them from the leader, below the leader's high
watermark, instead of waiting.

A node that holds no replica (a cluster of more than three nodes), or whose replica is
out of the ISR (still catching up, say after a reassignment added it), reads `_schemas`
from the partition's leader as a consumer does (Fetch over the inter-broker link, which
answers only records below the leader's high watermark), and a read first fetches until
it has applied everything below the high watermark the leader answered when the read
arrived: the same read-your-writes promise. It switches to its own replica once that is
in the ISR; both read the same committed records, so the state carries over.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from kbroker.coordinator_runtime.internal_topics import (
    InternalTopicService,
    KeyValue,
    ServiceBroker,
    TopicLayout,
    append_records,
    read_batches,
)
from kbroker.protocol.batch import HEADER_SIZE, decode_records, read_header
from kbroker.protocol.compression import decompress
from kbroker.protocol.fetch_request import fetch_partition, sessionless_fetch
from kbroker.protocol.messages import build
from kbroker.replica.broker_link import BrokerLinks
from kbroker.schemas import errors as err
from kbroker.schemas.api import BecameWriter, Request, Response
from kbroker.schemas.store import RegistryState, Writer, encode, noop_key
from kbroker.schemas.validation import (
    KEY_STRATEGY,
    KEY_VALIDATION,
    TOPIC_NAME,
    VALUE_STRATEGY,
    VALUE_VALIDATION,
    TopicValidation,
    record_errors,
    strategy_name,
    valid_ids,
)

if TYPE_CHECKING:
    from kbroker.replica.partition import Partition

log = logging.getLogger("kbroker.schemas")

SCHEMAS_TOPIC = "_schemas"
E = ErrorCode
READ_WAIT_S = 5.0  # longest a read waits for this replica to catch up
WRITER_WAIT_S = 15.0  # longest a write waits for a writer to be known
WRITE_TIMEOUT_S = 30.0
FORWARDED = "x-kbroker-forwarded"
OFFSET = "x-kbroker-offset"
FETCH = 1
FETCH_VERSION = 15
REMOTE_FETCH_BYTES = 1 << 20


@dataclass(frozen=True)
class _Config:
    num_partitions: int = 1


class _Writership:
    """The 'coordinator' the internal-topic service hosts: whether this node is the writer."""

    def __init__(self, service: SchemaRegistryService) -> None:
        self.service = service
        self.config = _Config()

    def partition_for(self, key: str) -> int:
        return 0

    def unload_partition(self, partition: int) -> None:
        self.service.lose_writership()

    def shutdown(self) -> None:
        pass


class SchemaRegistryService(InternalTopicService):
    topic = SCHEMAS_TOPIC
    log = log
    coordinator: _Writership

    def __init__(self, broker: ServiceBroker, url: str | None = None) -> None:
        super().__init__(broker)
        self.coordinator = _Writership(self)
        self.url = url  # this node's registry, as other nodes reach it
        self.state = RegistryState()
        self.next_offset = 0  # the next offset of the local replica to apply
        self.write_lock = asyncio.Lock()
        self.writer_epoch: int | None = None  # the leader epoch this node writes at
        self.loading_epoch: int | None = None
        self.ssl_context: ssl.SSLContext | None = None  # for forwarding to https writers
        self.listeners_enabled = url is not None
        self.stopped = False
        # (topic, state object, state version, settings) -> the ids it accepts
        self._validations: dict[str, tuple[tuple[Any, ...], TopicValidation]] = {}
        # Reading the leader's `_schemas` where this node cannot read its own replica.
        self._links = BrokerLinks(broker, "schema-registry", "schema registry read", log)
        self._remote_lock = asyncio.Lock()
        self._remote_synced = False  # caught up with a leader at least once
        self._remote_kick: asyncio.Future[None] | None = None
        self._read_from: int | None = None  # the leader reads last went to, if remote

    # -- the internal-topic service ------------------------------------------------------

    def layout(self) -> TopicLayout:
        config = self.broker.config
        return TopicLayout(
            1,
            config.offsets_topic_replication_factor,
            {"cleanup.policy": "compact", "compression.type": "producer"},
        )

    async def start(self) -> None:
        await super().start()
        if self.listeners_enabled:
            self._tasks.append(asyncio.create_task(self._create_topic()))

    async def _create_topic(self) -> None:
        while self.topic not in self.broker.controller.state.topics:
            if await self.ensure_topic() == E.none:
                return
            await asyncio.sleep(1)

    def held_partitions(self) -> Collection[int]:
        return {0} if self.writer_epoch is not None or self.loading_epoch is not None else set()

    def needs_load(self, partition: int, leader_epoch: int) -> bool:
        return partition == 0 and leader_epoch not in (self.writer_epoch, self.loading_epoch)

    def begin_loading(self, partition: int, leader_epoch: int) -> None:
        self.writer_epoch = None
        self.loading_epoch = leader_epoch

    async def _load(self, partition: int) -> None:
        epoch = self.loading_epoch
        try:
            async with self.write_lock:
                replica = self.broker.replicas.get(self.topic, 0)
                if replica is None or epoch is None:
                    return
                self._reset()
                self._apply_to(replica.log_end_offset)
                writer = Writer(self.broker.node_id, self.url or "", epoch)
                value = {
                    "max_id": self.state.max_id,
                    "writer": writer.node_id,
                    "url": writer.url,
                    "epoch": epoch,
                }
                await self._append([(noop_key(), encode(value))])
                if self.loading_epoch == epoch:
                    self.writer_epoch = epoch
                    self.loading_epoch = None
                    log.info(
                        "schema registry writer at leader epoch %d: %d subjects, highest id %d",
                        epoch,
                        len(self.state.subjects),
                        self.state.max_id,
                    )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("cannot become the schema registry writer (trying again): %s", exc)
            self.lose_writership()
            # Nothing else may happen in the metadata to make the service look again.
            asyncio.get_running_loop().call_later(1.0, self._refresh_unless_stopped)
        finally:
            if self._loads.get(partition) is asyncio.current_task():
                del self._loads[partition]

    def _refresh_unless_stopped(self) -> None:
        if not self.stopped:
            self.refresh()

    async def stop(self) -> None:
        self.stopped = True
        if self._remote_kick is not None:
            self._remote_kick.cancel()
        self._links.close()
        await super().stop()

    def lose_writership(self) -> None:
        if self.writer_epoch is not None or self.loading_epoch is not None:
            log.info("no longer the schema registry writer")
        self.writer_epoch = None
        self.loading_epoch = None
        # What this node applied as leader may be truncated: read again up to the high
        # watermark.
        self._reset()

    def _reset(self) -> None:
        self.state = RegistryState()
        self.next_offset = 0

    # -- reading the local replica ------------------------------------------------------

    def _replica(self) -> Partition | None:
        return self.broker.replicas.get(self.topic, 0)

    def _apply_to(self, limit: int) -> None:
        """Apply the local replica's records below `limit` not applied yet."""
        replica = self._replica()
        if replica is None or self.next_offset >= limit:
            return
        plog = replica.log
        if self.next_offset < plog.log_start_offset:
            self._reset()
        for header, records in read_batches(plog, self.next_offset):
            if header.next_offset > limit:
                break
            for key, value in records:
                if key is not None:
                    self.state.apply(key, value)
            self.next_offset = header.next_offset

    def is_writer(self) -> bool:
        replica = self._replica()
        return (
            self.writer_epoch is not None
            and replica is not None
            and replica.is_leader
            and replica.leader_epoch == self.writer_epoch
        )

    def hosted(self) -> bool:
        return self._replica() is not None

    def _remote_leader(self, follower_too: bool = False) -> int | None:
        """The leader to read `_schemas` from, when this node cannot read its own replica
        (it holds none, or one out of the ISR), or with `follower_too` whenever another
        node leads; None when it reads its own."""
        topic = self.broker.controller.state.topics.get(self.topic)
        if topic is None or not topic.partitions:
            return None
        info = topic.partitions[0]
        me = self.broker.node_id
        if info.leader < 0 or info.leader == me:
            return None
        replica = self._replica()
        if not follower_too and replica is not None and (replica.is_leader or me in info.isr):
            return None
        return info.leader

    async def fresh(self) -> RegistryState | None:
        """The state, caught up with what was acknowledged before the call."""
        leader = self._remote_leader()
        replica = self._replica()
        if leader is not None:
            if self._read_from != leader:
                log.info(
                    "the schema registry reads %s from its leader, node %d", self.topic, leader
                )
                self._read_from = leader
            deadline = time.monotonic() + READ_WAIT_S
            if not await self._remote_catch_up(deadline) and not self._remote_synced:
                raise err.store_timeout(f"Cannot read {self.topic} from its leader; try again")
            return self.state
        if replica is not None and self._read_from is not None:
            log.info("the schema registry reads its own in-sync replica of %s now", self.topic)
            self._read_from = None
        if replica is None:
            if self.topic not in self.broker.controller.state.topics:
                return RegistryState()
            if self._remote_synced:  # no leader now: what was read serves meanwhile
                return self.state
            raise err.unknown_writer(f"{self.topic} has no leader now; try again")
        if self.is_writer():
            self._apply_to(replica.log_end_offset)
            return self.state
        target = replica.log_end_offset
        deadline = time.monotonic() + READ_WAIT_S
        if (
            replica.high_watermark < target
            and self.next_offset < target
            and await self._remote_catch_up(deadline, follower_too=True)
        ):
            # An in-sync follower learns its high watermark only with its next replica
            # fetch (up to replica.fetch.max.wait.ms later): the leader's answers now.
            self._apply_to(replica.high_watermark)
            return self.state
        # (Records read from the leader may have put the state past the local high
        # watermark already: it holds every record of the local log then.)
        while (
            replica.high_watermark < target
            and self.next_offset < target
            and time.monotonic() < deadline
        ):
            await asyncio.sleep(0.005)
            if self._replica() is not replica:
                break
        self._apply_to(replica.high_watermark)
        return self.state

    async def wait_applied(self, offset: int) -> None:
        """Wait (bounded) until this node has applied the records below `offset`.

        A follower too reads the write from the leader: its own high watermark passes the
        write only with its next replica fetch (up to replica.fetch.max.wait.ms later)."""
        deadline = time.monotonic() + READ_WAIT_S
        if (
            not self.is_writer()
            and self.next_offset < offset
            and await self._remote_catch_up(deadline, offset, follower_too=True)
        ):
            return
        # Where the leader did not answer: wait for this node's own replica.
        while time.monotonic() < deadline:
            replica = self._replica()
            if replica is None:
                return
            self._apply_to(replica.log_end_offset if self.is_writer() else replica.high_watermark)
            if self.next_offset >= offset:
                return
            await asyncio.sleep(0.005)

    # -- reading the leader's replica ------------------------------------------------------

    async def _remote_catch_up(
        self, deadline: float, least: int = 0, follower_too: bool = False
    ) -> bool:
        """Fetch from the leader until every record below its high watermark as of the
        first answer (and below `least`) is applied; False when no leader answered so by
        the deadline (or this node reads its own replica now)."""
        async with self._remote_lock:
            target: int | None = None
            while True:
                leader = self._remote_leader(follower_too)
                if leader is None:
                    return False
                answer = await self._remote_fetch(leader, deadline)
                if answer is not None:
                    hwm, progressed = answer
                    if target is None:
                        target = max(hwm, least)
                    if self.next_offset >= target:
                        self._remote_synced = True
                        return True
                    if progressed:
                        continue
                if time.monotonic() >= deadline:
                    return False
                await asyncio.sleep(0.005 if answer is not None else 0.05)

    def _kick_remote_read(self) -> None:
        """Catch up with the leader in the background (one read at a time)."""
        if self._remote_kick is not None and not self._remote_kick.done():
            return
        self._remote_kick = asyncio.ensure_future(self._remote_read_quietly())

    async def _remote_read_quietly(self) -> None:
        await self._remote_catch_up(time.monotonic() + READ_WAIT_S)

    async def _remote_fetch(self, leader: int, deadline: float) -> tuple[int, bool] | None:
        """One Fetch from the leader at the next offset to apply, its records applied:
        (the leader's high watermark, whether anything was applied); None when it did
        not answer."""
        topic = self.broker.controller.state.topics.get(self.topic)
        if topic is None:
            return None
        request = build(
            load_request_schema(FETCH, FETCH_VERSION),
            sessionless_fetch(
                [
                    {
                        "topic_id": topic.topic_id,
                        "partitions": [fetch_partition(0, self.next_offset, REMOTE_FETCH_BYTES)],
                    }
                ],
                max_wait=0,
                min_bytes=0,
                max_bytes=REMOTE_FETCH_BYTES,
                replica_state=True,
            ),
        )
        timeout = max(0.1, min(2.0, deadline - time.monotonic()))
        start = self.next_offset
        response = await self._links.call(leader, request, timeout)
        if response is None or self.next_offset != start:
            return None
        for t in response.responses:
            for r in t.partitions:
                if int(r.partition_index) != 0:
                    continue
                code = ErrorCode(r.error_code)
                if code == ErrorCode.offset_out_of_range:
                    # Below the leader's log start (records deleted there): read it all again.
                    log.info("%s offset %d out of range on leader %d", self.topic, start, leader)
                    self._reset()
                    self.next_offset = max(0, int(r.log_start_offset))
                    return None
                if code != ErrorCode.none:
                    return None
                hwm = int(r.high_watermark)
                if r.records:
                    self._apply_fetched(bytes(r.records), hwm)
                return hwm, self.next_offset > start
        return None

    def _apply_fetched(self, data: bytes, limit: int) -> None:
        """Apply the whole batches of fetched records that end at or below `limit`."""
        pos = 0
        while pos + HEADER_SIZE <= len(data):
            header = read_header(data, pos)
            size = header.total_size
            if pos + size > len(data) or header.next_offset > limit:
                return
            if header.next_offset > self.next_offset:
                if not header.is_control:
                    for r in decode_records(data, pos, decompress):
                        if r.key is not None and (r.offset or 0) >= self.next_offset:
                            self.state.apply(r.key, r.value)
                self.next_offset = header.next_offset
            pos += size

    # -- writing (on the writer) -------------------------------------------------------

    async def write_state(self) -> RegistryState:
        replica = self._replica()
        if replica is None or not self.is_writer():
            raise err.unknown_writer("This node is no longer the schema registry writer")
        self._apply_to(replica.log_end_offset)
        return self.state

    async def write(self, records: list[KeyValue]) -> int:
        if not self.is_writer():
            raise err.unknown_writer("This node is no longer the schema registry writer")
        end = await self._append(records)
        self._apply_to(end)
        return end

    async def _append(self, records: list[KeyValue]) -> int:
        now = int(time.time() * 1000)
        code, ack = append_records(self.broker, self.topic, 0, records, now)
        if code != E.none:
            raise err.store_error(f"Error while writing to _schemas: {code.name}")
        replica = self._replica()
        end = replica.log_end_offset if replica is not None else 0
        if ack is not None:
            try:
                code = await asyncio.wait_for(ack, WRITE_TIMEOUT_S)
            except TimeoutError:
                raise err.store_timeout("Write to _schemas timed out") from None
            except OSError as exc:
                raise err.store_error(f"Error while writing to _schemas: {exc}") from None
            if code != E.none:
                raise err.store_error(f"Error while writing to _schemas: {code.name}")
        return end

    # -- broker-side validation -------------------------------------------------------

    def refuse(
        self, topic: str, records: bytes | bytearray | memoryview
    ) -> tuple[str, list[tuple[int, str]]] | None:
        """Why the records produced to a topic with schema validation are refused (a
        message and the offending records), None when they are accepted or the topic
        does not ask."""
        info = self.broker.controller.state.topics.get(topic)
        if info is None:
            return None
        configs = info.configs
        if KEY_VALIDATION not in configs and VALUE_VALIDATION not in configs:
            return None  # every produce asks: the usual answer in two lookups
        key_on = configs.get(KEY_VALIDATION, "false").lower() == "true"
        value_on = configs.get(VALUE_VALIDATION, "false").lower() == "true"
        if not key_on and not value_on:
            return None
        check = self._validation(topic, key_on, value_on, configs)
        errors = record_errors(records, check)
        if errors:
            # A schema registered a moment ago may be in this replica's log above its
            # high watermark: look there before refusing.
            pending = self._pending_versions()
            if pending:
                check = TopicValidation(
                    None
                    if check.keys is None
                    else check.keys | pending.get(f"{topic}-key", frozenset()),
                    None
                    if check.values is None
                    else check.values | pending.get(f"{topic}-value", frozenset()),
                )
                errors = record_errors(records, check)
        if not errors:
            return None
        if self._remote_leader() is not None:
            self._kick_remote_read()  # read what was registered since the last read
        first = errors[0]
        message = (
            f"{len(errors)} record(s) refused by schema validation, first: record {first[0]}: "
            f"{first[1]}"
        )
        return message, errors

    def _validation(
        self, topic: str, key_on: bool, value_on: bool, configs: dict[str, str]
    ) -> TopicValidation:
        replica = self._replica()
        if replica is not None:
            self._apply_to(replica.log_end_offset if self.is_writer() else replica.high_watermark)
        key_strategy = strategy_name(configs.get(KEY_STRATEGY, TOPIC_NAME))
        value_strategy = strategy_name(configs.get(VALUE_STRATEGY, TOPIC_NAME))
        stamp = (id(self.state), self.state.changes, key_on, value_on, key_strategy, value_strategy)
        cached = self._validations.get(topic)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        check = TopicValidation(
            valid_ids(self.state, topic, key_strategy, "key") if key_on else None,
            valid_ids(self.state, topic, value_strategy, "value") if value_on else None,
        )
        if len(self._validations) > 10_000:
            self._validations.clear()
        self._validations[topic] = (stamp, check)
        return check

    def _pending_versions(self) -> dict[str, frozenset[int]]:
        """Subject -> ids of schema versions in this replica's log not applied yet."""
        replica = self._replica()
        if replica is None or replica.log_end_offset <= self.next_offset:
            return {}
        found: dict[str, set[int]] = {}
        for _, batch in read_batches(replica.log, self.next_offset):
            for key, value in batch:
                if value is None:
                    continue
                try:
                    k, v = json.loads(key), json.loads(value)
                    if k.get("keytype") == "SCHEMA" and not v.get("deleted"):
                        found.setdefault(str(v["subject"]), set()).add(int(v["id"]))
                except (ValueError, KeyError, TypeError, AttributeError):
                    continue
        return {s: frozenset(ids) for s, ids in found.items()}

    # -- forwarding (on the other nodes) -------------------------------------------------

    def _leader_id(self) -> int | None:
        topic = self.broker.controller.state.topics.get(self.topic)
        if topic is None or not topic.partitions:
            return None
        leader = topic.partitions[0].leader
        return leader if leader >= 0 else None

    async def _writer(self) -> Writer:
        if self.topic not in self.broker.controller.state.topics:
            await self.ensure_topic()
        deadline = time.monotonic() + WRITER_WAIT_S
        while True:
            await self.fresh()
            writer = self.state.writer
            leader = self._leader_id()
            if writer is not None and writer.node_id == leader and writer.url:
                replica = self._replica()
                # The announcement must be of the leader's current epoch, when it is known.
                if replica is None or writer.epoch >= replica.leader_epoch:
                    return writer
            if self.is_writer():
                raise BecameWriter()
            if time.monotonic() > deadline:
                raise err.unknown_writer("Schema registry writer not known yet; try again")
            await asyncio.sleep(0.02)

    async def forward(self, request: Request) -> Response:
        if request.headers.get(FORWARDED):
            raise err.unknown_writer(
                "This node is not the schema registry writer (forwarded twice)"
            )
        writer = await self._writer()
        try:
            status, headers, body = await asyncio.wait_for(
                http_request(writer.url, request, self.ssl_context), WRITE_TIMEOUT_S
            )
        except (OSError, TimeoutError, ValueError, asyncio.IncompleteReadError) as exc:
            raise err.forward_error(
                f"Error while forwarding the request to the writer: {exc}"
            ) from None
        offset = headers.get(OFFSET)
        if status == 200 and offset and offset.isdigit():
            await self.wait_applied(int(offset))
        try:
            value = json.loads(body) if body else None
        except ValueError:
            raise err.forward_error("The writer's answer is not JSON") from None
        return Response(status, value)


async def http_request(
    url: str, request: Request, context: ssl.SSLContext | None
) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 request to another node's registry (forwarded from this one)."""
    parts = urlsplit(url)
    host, port = (
        parts.hostname or "127.0.0.1",
        parts.port or (443 if parts.scheme == "https" else 80),
    )
    use_tls = parts.scheme == "https"
    reader, writer = await asyncio.open_connection(
        host, port, ssl=(context or ssl.create_default_context()) if use_tls else None
    )
    try:
        target = request.path + ("?" + urlencode(request.query) if request.query else "")
        lines = [
            f"{request.method} {target} HTTP/1.1",
            f"Host: {host}:{port}",
            "Content-Type: application/vnd.schemaregistry.v1+json",
            f"Content-Length: {len(request.body)}",
            "Connection: close",
            f"{FORWARDED}: 1",
        ]
        auth = request.headers.get("authorization")
        if auth:
            lines.append(f"Authorization: {auth}")
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + request.body)
        await writer.drain()
        status_line = await reader.readline()
        status = int(status_line.split()[1])
        headers: dict[str, str] = {}
        while True:
            line = await reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        body = await reader.readexactly(length) if length else await reader.read()
        return status, headers, body
    finally:
        writer.close()
