"""A transport for a KafkaConnection run in process, with no socket under it: what a
benchmark or a test of the request path feeds frames to and reads answers from."""

from __future__ import annotations

import asyncio
from typing import Any


class CollectingTransport:
    """What a KafkaConnection needs of a transport. It counts the bytes written
    (`written`), keeps each write in `frames` when asked to (`keep`, a copy a write),
    and wakes `waiter` at each write."""

    def __init__(self, keep: bool = False) -> None:
        self.keep = keep
        self.written = 0
        self.frames: list[bytes] = []
        self.waiter: asyncio.Future[None] | None = None

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def write(self, data: bytes) -> None:
        self.written += len(data)
        if self.keep:
            self.frames.append(bytes(data))
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0
