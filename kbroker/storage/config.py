"""Topic-level log settings, with Kafka's semantics and defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from kbroker.protocol.recompression import TOPIC_CODECS
from kbroker.protocol.record_validation import RecordPolicy

_NEVER = 2**63 - 1
# Space reserved ahead of the active segment's end when it is preallocated.
PREALLOCATE_CHUNK = 1 << 20


@dataclass(slots=True, frozen=True)
class LogConfig:
    """A topic's log settings. Frozen: what an append asks of them on every call
    (the record policy, whether it fsyncs) is worked out once, when they are made."""

    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * 24 * 3600 * 1000
    segment_jitter_ms: int = 0
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    index_interval_bytes: int = 4096
    segment_index_bytes: int = 10 * 1024 * 1024
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"  # or "LogAppendTime"
    flush_interval_messages: int = _NEVER
    flush_interval_ms: int = _NEVER
    cleanup_policy: str = "delete"
    file_delete_delay_ms: int = 60000
    preallocate: bool = False
    # How far a CreateTime timestamp may lie before / after the broker's clock (Kafka 4's
    # defaults: unbounded before, one hour after).
    message_timestamp_before_max_ms: int = _NEVER
    message_timestamp_after_max_ms: int = 3_600_000
    # compression.type: "producer" stores batches as produced; a codec name rewrites
    # every client batch in another codec into it, at its compression.<codec>.level.
    compression_type: str = "producer"
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    # Derived from the settings above in __post_init__ (a change makes a new LogConfig).
    _derived: _Derived = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        flushes_each = self.flush_interval_messages == 1
        append_time = self.message_timestamp_type == "LogAppendTime"
        policies = self.cleanup_policy.split(",")
        compacts = "compact" in policies
        derived = _Derived(
            fsyncs_every_append=flushes_each,
            log_append_time=append_time,
            compacts=compacts,
            deletes="delete" in policies,
            preallocate_bytes=(
                min(PREALLOCATE_CHUNK, self.segment_bytes)
                if self.preallocate or flushes_each
                else 0
            ),
            record_policy=RecordPolicy(
                self.message_timestamp_before_max_ms,
                self.message_timestamp_after_max_ms,
                append_time,
                compacts,
            ),
        )
        object.__setattr__(self, "_derived", derived)

    @property
    def stored_codec(self) -> int | None:
        """The codec id client batches are stored in; None keeps each batch's own."""
        return TOPIC_CODECS.get(self.compression_type)

    @property
    def compression_level(self) -> int | None:
        """The topic's level for its codec (None: the codec has no level)."""
        return {
            "gzip": self.compression_gzip_level,
            "lz4": self.compression_lz4_level,
            "zstd": self.compression_zstd_level,
        }.get(self.compression_type)

    @property
    def log_append_time(self) -> bool:
        return self._derived.log_append_time

    @property
    def fsyncs_every_append(self) -> bool:
        """flush.messages=1: every append is fsynced before it is acknowledged."""
        return self._derived.fsyncs_every_append

    @property
    def preallocate_bytes(self) -> int:
        """How far ahead of its data the active segment's file is allocated (0: not).

        Besides `preallocate`, a log that fsyncs every append reserves ahead: an fsync
        that must also persist a larger file size costs a journal commit more (on this
        machine's ext4, fdatasync of a small append 110-120 us growing the file, 78 us
        inside space already allocated).
        """
        return self._derived.preallocate_bytes

    @property
    def record_policy(self) -> RecordPolicy:
        """What the records of a client append are checked against."""
        return self._derived.record_policy

    @property
    def deletes(self) -> bool:
        """Whether time and size retention apply (cleanup.policy contains delete)."""
        return self._derived.deletes

    @property
    def compacts(self) -> bool:
        return self._derived.compacts

    def with_kafka_overrides(self, props: Mapping[str, str]) -> LogConfig:
        """A copy with Kafka topic-config names applied (`retention.ms` -> retention_ms)."""
        known = {f.name: f for f in fields(self) if f.init}
        changes: dict[str, Any] = {}
        for key, value in props.items():
            name = _KAFKA_NAMES.get(key)
            if name is None or name not in known:
                continue
            current = getattr(self, name)
            if isinstance(current, bool):
                changes[name] = str(value).lower() == "true"
            elif isinstance(current, int):
                changes[name] = int(value)
            else:
                changes[name] = str(value)
        return replace(self, **changes)


@dataclass(slots=True, frozen=True)
class _Derived:
    fsyncs_every_append: bool
    log_append_time: bool
    compacts: bool
    deletes: bool
    preallocate_bytes: int
    record_policy: RecordPolicy


_KAFKA_NAMES = {
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "segment.jitter.ms": "segment_jitter_ms",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "index.interval.bytes": "index_interval_bytes",
    "segment.index.bytes": "segment_index_bytes",
    "max.message.bytes": "max_message_bytes",
    "message.timestamp.type": "message_timestamp_type",
    "flush.messages": "flush_interval_messages",
    "flush.ms": "flush_interval_ms",
    "cleanup.policy": "cleanup_policy",
    "file.delete.delay.ms": "file_delete_delay_ms",
    "preallocate": "preallocate",
    "message.timestamp.before.max.ms": "message_timestamp_before_max_ms",
    "message.timestamp.after.max.ms": "message_timestamp_after_max_ms",
    "compression.type": "compression_type",
    "compression.gzip.level": "compression_gzip_level",
    "compression.lz4.level": "compression_lz4_level",
    "compression.zstd.level": "compression_zstd_level",
}
