"""What a handler hands back: a body already encoded, possibly with file regions in it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


class FileRegion(Protocol):
    """A byte range of an open file (a log segment), sent without copying through Python."""

    file: Any
    position: int
    length: int

    def read(self) -> bytes: ...

    def release(self) -> None: ...


# A records field's content: bytes, a file region sent without copying, or None (empty).
RecordsField = bytes | bytearray | FileRegion | None


def records_length(records: RecordsField) -> int:
    """The bytes a records field holds on the wire."""
    if records is None:
        return 0
    return len(records) if isinstance(records, bytes | bytearray) else records.length


@dataclass(slots=True)
class EncodedBody:
    """A response body as bytes and file regions, in wire order.

    Only Fetch uses file regions: its record sets are sent straight from segment
    files, so the body cannot be one bytes object.
    """

    parts: list[bytes | FileRegion]
    size: int
