"""One TLS server session over memory buffers: ciphertext in, plaintext out, and back.

The connection owns the socket; this only transforms bytes, so a failed handshake is an
exception the connection can log and count (asyncio's own TLS layer swallows it), and
a bogus hello can be fuzzed without a network.
"""

from __future__ import annotations

import contextlib
import ssl
from typing import Any, cast

_READ_CHUNK = 64 * 1024  # grows to the largest plaintext one read delivered


class TlsSession:
    def __init__(self, context: ssl.SSLContext) -> None:
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._ssl = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self.handshake_done = False
        self.closed_by_peer = False
        self._buffer = bytearray(_READ_CHUNK)
        self._view = memoryview(self._buffer)

    def receive(self, data: bytes) -> bytes:
        """Feed ciphertext; return the plaintext it completes (maybe none). Raises
        ssl.SSLError for a failed handshake or a corrupt record. Call ``outgoing()``
        afterwards: the handshake has answers to send."""
        self._incoming.write(data)
        if not self.handshake_done:
            try:
                self._ssl.do_handshake()
            except ssl.SSLWantReadError:
                return b""
            self.handshake_done = True
        # Records decrypt into one growing buffer: no object per 16 KiB TLS record.
        buffer = self._buffer
        view = self._view
        filled = 0
        while True:
            if filled == len(buffer):  # full: continue in one twice the size
                bigger = bytearray(2 * len(buffer))
                bigger[:filled] = view[:filled]
                buffer, view = self._buffer, self._view = bigger, memoryview(bigger)
            try:
                # With a buffer, read() answers the count (typeshed knows only bytes).
                count = cast(int, self._ssl.read(len(buffer) - filled, view[filled:]))
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                self.closed_by_peer = True
                break
            if not count:
                break
            filled += count
        return bytes(view[:filled])

    def encrypt(self, data: Any) -> bytes:
        """Records carrying ``data`` (bytes-like), ready for the socket."""
        self._ssl.write(data)
        return self._outgoing.read()

    def outgoing(self) -> bytes:
        return self._outgoing.read()

    def close_notify(self) -> bytes:
        """The alert that ends the session cleanly (best effort)."""
        with contextlib.suppress(ssl.SSLError, OSError):
            self._ssl.unwrap()
        return self._outgoing.read()

    def peercert(self) -> dict[str, Any] | None:
        return self._ssl.getpeercert() or None

    @property
    def version(self) -> str | None:
        return self._ssl.version()
