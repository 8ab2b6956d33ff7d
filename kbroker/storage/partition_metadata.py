"""partition.metadata: the id of the topic a partition directory belongs to (Kafka's file).

A topic deleted while a broker was down, then created again under the same name, has a
new topic id; the directory the broker kept is named like the new topic's but holds the
old topic's records. Kafka writes the topic id into each partition directory and treats
a directory whose id is not the topic's as a stray of an earlier incarnation, to delete
rather than to serve (KIP-516). The format is Kafka's: ``version: 0`` then
``topic_id: <base64url id>``, one per line.
"""

from __future__ import annotations

import base64
import os
import uuid
from pathlib import Path

FILE_NAME = "partition.metadata"


def _encode(topic_id: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()


def read_topic_id(directory: str | Path) -> uuid.UUID | None:
    """The topic id recorded in `directory`, or None when none is (a directory made
    before ids were recorded, or a file that does not parse: nothing is assumed)."""
    try:
        text = Path(directory, FILE_NAME).read_text()
    except (OSError, UnicodeDecodeError):
        return None
    fields = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
    encoded = fields.get("topic_id", "")
    try:
        return uuid.UUID(bytes=base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)))
    except ValueError:
        return None


def write_topic_id(directory: str | Path, topic_id: uuid.UUID) -> None:
    """Record `topic_id` in `directory`: written aside, then renamed into place."""
    path = Path(directory, FILE_NAME)
    temporary = path.with_name(FILE_NAME + ".tmp")
    temporary.write_text(f"version: 0\ntopic_id: {_encode(topic_id)}\n")
    os.replace(temporary, path)
