"""What a handler hands back: a body already encoded, possibly with file regions in it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


class FileRegion(Protocol):
    """A byte range of an open file (a log segment), sent without copying through Python."""

    file: Any
    position: int
    length: int


@dataclass(slots=True)
class EncodedBody:
    """A response body as bytes and file regions, in wire order.

    Only Fetch uses file regions: its record sets are sent straight from segment
    files, so the body cannot be one bytes object.
    """

    parts: list[bytes | FileRegion]
    size: int
