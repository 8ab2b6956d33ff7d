"""One TLS server session over memory buffers: ciphertext in, plaintext out, and back.

The connection owns the socket; this only transforms bytes, so a failed handshake is an
exception the connection can log and count (asyncio's own TLS layer swallows it), and
a bogus hello can be fuzzed without a network.
"""

from __future__ import annotations

import contextlib
import ssl
from typing import Any

_READ_CHUNK = 256 * 1024


class TlsSession:
    def __init__(self, context: ssl.SSLContext) -> None:
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._ssl = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self.handshake_done = False
        self.closed_by_peer = False

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
        chunks = []
        while True:
            try:
                chunk = self._ssl.read(_READ_CHUNK)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                self.closed_by_peer = True
                break
            if not chunk:
                break
            chunks.append(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

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
