"""meta.properties: the identity file Kafka keeps at the top of every log directory.

A KRaft broker writes one per log directory (`version=1`, `cluster.id`, `node.id` and,
since KIP-858, a `directory.id` of its own) and refuses to start on a directory that
belongs to another cluster or node: mounting the wrong disk must not mix two brokers'
partitions. kbroker formats a directory on first use instead of asking for
`kafka-storage format`, and checks it on every later start.
"""

from __future__ import annotations

import base64
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from kbroker.storage.entry_file import replace_file

META_PROPERTIES = "meta.properties"
# Kafka reserves the first 100 Uuids (ZERO, ONE, ...) as markers that name no directory.
_RESERVED = 100


class MetaPropertiesError(Exception):
    """A log directory's meta.properties names another cluster or node, or is unreadable."""


@dataclass(frozen=True, slots=True)
class MetaProperties:
    cluster_id: str
    node_id: int
    directory_id: str


def new_directory_id() -> str:
    """A random Kafka Uuid in its string form (URL-safe base64 without padding); never
    one starting with "-", which Kafka's Uuid.randomUuid skips too (a command line would
    take it for an option)."""
    while True:
        raw = uuid.uuid4()
        text = base64.urlsafe_b64encode(raw.bytes).decode().rstrip("=")
        if raw.int >= _RESERVED and not text.startswith("-"):
            return text


def _parse(text: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")) or "=" not in line:
            continue
        key, _, value = line.partition("=")
        values[key.strip()] = value.strip()
    return values


def read_meta_properties(directory: Path) -> MetaProperties | None:
    """The directory's identity; None when it has no meta.properties yet."""
    path = directory / META_PROPERTIES
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    values = _parse(text)
    try:
        return MetaProperties(values["cluster.id"], int(values["node.id"]), values["directory.id"])
    except (KeyError, ValueError) as exc:
        raise MetaPropertiesError(f"{path} lacks a valid {exc}") from exc


def write_meta_properties(directory: Path, meta: MetaProperties) -> None:
    stamp = time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime())
    text = (
        f"#\n#{stamp}\n"
        f"cluster.id={meta.cluster_id}\n"
        f"directory.id={meta.directory_id}\n"
        f"node.id={meta.node_id}\n"
        "version=1\n"
    )
    replace_file(str(directory / META_PROPERTIES), text.encode())
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def ensure_meta_properties(directory: Path, cluster_id: str, node_id: int) -> MetaProperties:
    """Check the directory belongs to this cluster and node, writing its meta.properties
    (with a new directory.id) when it has none. Raises MetaPropertiesError on a mismatch,
    OSError when the directory cannot be read or written."""
    directory.mkdir(parents=True, exist_ok=True)
    meta = read_meta_properties(directory)
    if meta is None:
        meta = MetaProperties(cluster_id, node_id, new_directory_id())
        write_meta_properties(directory, meta)
        return meta
    if meta.cluster_id != cluster_id:
        raise MetaPropertiesError(
            f"Invalid cluster.id in: {directory / META_PROPERTIES}. "
            f"Expected {cluster_id}, but read {meta.cluster_id}"
        )
    if meta.node_id != node_id:
        raise MetaPropertiesError(
            f"Stored node id {meta.node_id} in {directory / META_PROPERTIES} doesn't match "
            f"previous node id {node_id}"
        )
    return meta
