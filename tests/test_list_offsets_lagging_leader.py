"""ListOffsets on a leader elected moments ago, whose high watermark has not yet reached
the start of its epoch: Kafka answers OFFSET_NOT_AVAILABLE (retriable) rather than an
end offset below one clients may already have been given by the previous leader."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from handler_context import handler_context
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode
from test_partition import NOW, batch, replica, replicate

from kbroker.handlers.registry import APIS
from kbroker.protocol.messages import build
from kbroker.replica.partition import Partition

LIST_OFFSETS = 2
LATEST = -1


def list_latest(partition: Partition) -> Any:
    """A consumer's ListOffsets v7 for the latest offset, answered by `partition`'s broker."""
    request = build(
        load_request_schema(LIST_OFFSETS, 7),
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {
                    "name": "t",
                    "partitions": [
                        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": LATEST}
                    ],
                }
            ],
        },
    )
    partitions = SimpleNamespace(leader=lambda *_: (partition, ErrorCode.none))
    controller = SimpleNamespace(state=SimpleNamespace(topics={"t": None}))
    ctx = handler_context(
        LIST_OFFSETS, 7, partitions=partitions, controller=controller, authorizer=None
    )
    return APIS[LIST_OFFSETS].handler(ctx, request)["topics"][0]["partitions"][0]


def test_a_new_leader_gives_no_latest_offset_until_its_high_watermark_reaches_its_epoch(
    tmp_path: Path,
) -> None:
    old, new = replica(tmp_path, 1), replica(tmp_path, 2)
    old.become_leader(1, 0, (1, 2), (1, 2), NOW)
    new.become_follower(1, 1, 0, (1, 2), (1, 2))
    old.append_as_leader(batch(b"a", b"b", b"c"), NOW)
    replicate(old, new)
    replicate(old, new)
    old.append_as_leader(batch(b"d"), NOW)
    replicate(old, new)
    # The next fetch tells the old leader that offset 3 is replicated, but its answer,
    # with the high watermark past it, is lost when that leader dies.
    old.read(new.log_end_offset, 1 << 20, replica_id=2, now_ms=NOW)
    assert list_latest(old)["offset"] == 4

    new.become_leader(2, 1, (1, 2), (1, 2), NOW)
    old.become_follower(2, 2, 1, (1, 2), (1, 2))
    assert new.high_watermark == 3 and new.log_end_offset == 4
    assert list_latest(new)["error_code"] == ErrorCode.offset_not_available
    replicate(new, old)  # the other replica fetches from the new leader
    assert (list_latest(new)["error_code"], list_latest(new)["offset"]) == (ErrorCode.none, 4)
