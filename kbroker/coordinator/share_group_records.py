"""Share-group records in `__consumer_offsets`, in Kafka's layout.

Kafka's group coordinator keeps a share group (KIP-932) in the offsets topic like a
KIP-848 consumer group; the record that says the group exists is ShareGroupMetadata
(key version 11: the group id; value version 0: the group epoch, flexible). A tombstone
deletes the group. Members are not written: after a restart or failover they must
heartbeat again, as members of a loaded group must within their session timeout.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable

from kbroker.coordinator.records import Reader, RecordFormatError, Writer
from kbroker.coordinator.store import KeyValue

SHARE_GROUP_METADATA_KEY = 11
VALUE_VERSION = 0


def is_share_group_record(key: bytes) -> bool:
    """Whether a `__consumer_offsets` key is a share group's metadata."""
    return len(key) >= 2 and struct.unpack_from(">h", key)[0] == SHARE_GROUP_METADATA_KEY


def share_group_record(group_id: str, epoch: int | None) -> KeyValue:
    """The group's metadata record; epoch None is its tombstone."""
    key = Writer()
    key.int16(SHARE_GROUP_METADATA_KEY)
    key.string(group_id)
    if epoch is None:
        return bytes(key.out), None
    value = Writer(flexible=True)
    value.int16(VALUE_VERSION)
    value.int32(epoch)
    value.no_tags()
    return bytes(key.out), bytes(value.out)


def fold_share_groups(
    records: Iterable[KeyValue], skip: Callable[[RecordFormatError], None]
) -> dict[str, int | None]:
    """Share group id -> group epoch (None: deleted) among records read oldest first;
    unreadable records go to `skip` and change nothing."""
    groups: dict[str, int | None] = {}
    for key, value in records:
        try:
            group_id = Reader(key, 2).key_string()
            if value is None:
                groups[group_id] = None
                continue
            reader = Reader(value, flexible=True)
            version = reader.int16()
            if version < VALUE_VERSION:
                raise RecordFormatError(f"share group {group_id}: value version {version}")
            groups[group_id] = reader.int32()  # later versions add fields after the epoch
        except RecordFormatError as exc:
            skip(exc)
    return groups
