"""One TLS server session over memory buffers: ciphertext in, plaintext out, and back.

The connection owns the socket; this only transforms bytes, so a failed handshake is an
exception the connection can log and count (asyncio's own TLS layer swallows it), and
a bogus hello can be fuzzed without a network.
"""

from __future__ import annotations

import contextlib
import ssl
from types import ModuleType
from typing import Any, cast

_READ_CHUNK = 64 * 1024  # grows to the largest plaintext one read delivered


def _record_reader() -> ModuleType | None:
    """The C record reader, if built and running on Python's own OpenSSL: it works on
    the SSL objects Python's ssl made, so both must be the same library."""
    try:
        from kbroker.security import _tlsread
    except ImportError:  # built without a compiler or OpenSSL's headers
        return None
    if _tlsread.OPENSSL_VERSION_NUMBER != ssl.OPENSSL_VERSION_NUMBER:
        return None
    return _tlsread


_tlsread = _record_reader()
_RECORD_READER = _tlsread is not None  # tests turn it off to check Python's loop
# A module built before the record writer was added reads only: answers then go out
# through Python's ssl, as where no C module is built.
_RECORD_WRITER = _tlsread is not None and hasattr(_tlsread, "write_records")


class TlsSession:
    def __init__(self, context: ssl.SSLContext, tls13_suites: str | None = None) -> None:
        """``tls13_suites``: OpenSSL's list of the TLS 1.3 suites this session may
        negotiate (None: all); needs the C reader (listener_security checks at start)."""
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._ssl = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self.handshake_done = False
        self.closed_by_peer = False
        self._buffer = bytearray(_READ_CHUNK)
        self._view = memoryview(self._buffer)
        # The `_ssl._SSLSocket` the C reader decrypts from (_tlsread.c says why that
        # matters), or None where it cannot vouch for it and Python's loop reads.
        self._sslsocket: object | None = None
        if _RECORD_READER and _tlsread is not None:
            sslsocket = getattr(self._ssl, "_sslobj", None)
            if sslsocket is not None and _tlsread.ssl_of(sslsocket) is not None:
                self._sslsocket = sslsocket
        if tls13_suites is not None:
            if self._sslsocket is None or _tlsread is None:
                raise RuntimeError("narrowing TLS 1.3's suites needs the C TLS reader")
            _tlsread.set_ciphersuites(self._sslsocket, tls13_suites)

    @property
    def reads_records_in_c(self) -> bool:
        return self._sslsocket is not None

    def receive(self, data: bytes | bytearray | memoryview) -> bytes:
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
        if self._sslsocket is not None:
            return self._read_records_c(self._sslsocket)
        return self._read_records_py()

    def _grow(self, filled: int) -> None:
        """Twice the read buffer, keeping its first ``filled`` bytes."""
        bigger = bytearray(2 * len(self._buffer))
        bigger[:filled] = self._view[:filled]
        self._buffer, self._view = bigger, memoryview(bigger)

    def _read_records_c(self, sslsocket: object) -> bytes:
        """Every complete record, decrypted by one C call into the bytes it returns."""
        assert _tlsread is not None
        plaintext, status, reason = _tlsread.read_records(sslsocket)
        if status == _tlsread.FULL:  # more than its bound said could be there: go on
            parts = [plaintext]
            while status == _tlsread.FULL:
                plaintext, status, reason = _tlsread.read_records(sslsocket)
                parts.append(plaintext)
            plaintext = b"".join(parts)
        if status == _tlsread.FAILED:
            # Raised as Python's ssl raises it: OpenSSL's reason string as a mnemonic.
            mnemonic = (reason or "TLS failure").upper().replace(" ", "_")
            error = ssl.SSLError(1, f"[SSL: {mnemonic}] {reason}")
            error.library, error.reason = "SSL", mnemonic
            raise error
        if status == _tlsread.CLOSED:
            self.closed_by_peer = True
        return plaintext

    def _read_records_py(self) -> bytes:
        """Every complete record through Python's ssl, one call per record, into one
        growing buffer (no object per record)."""
        filled = 0
        while True:
            if filled == len(self._buffer):
                self._grow(filled)
            try:
                # With a buffer, read() answers the count (typeshed knows only bytes).
                count = cast(int, self._ssl.read(len(self._buffer) - filled, self._view[filled:]))
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                self.closed_by_peer = True
                break
            if not count:  # what Python's ssl answers for close_notify
                self.closed_by_peer = True
                break
            filled += count
        return bytes(self._view[:filled])

    @property
    def writes_records_in_c(self) -> bool:
        return self._sslsocket is not None and _RECORD_WRITER

    def encrypt_with_file(self, head: Any, fd: int, position: int, length: int) -> bytes | None:
        """Records carrying ``head`` then ``length`` bytes of file ``fd`` from
        ``position`` (fd -1: head alone), as full 16 KiB records, by one C call that
        reads the file straight into the records (needs ``writes_records_in_c``). None
        if the file ended first: nothing is encrypted then."""
        assert _tlsread is not None and self._sslsocket is not None
        ciphertext, status, reason = _tlsread.write_records(
            self._sslsocket, head, fd, position, length
        )
        if status == _tlsread.CLOSED:
            return None
        if status == _tlsread.FAILED:
            mnemonic = (reason or "TLS failure").upper().replace(" ", "_")
            error = ssl.SSLError(1, f"[SSL: {mnemonic}] {reason}")
            error.library, error.reason = "SSL", mnemonic
            raise error
        return cast(bytes, ciphertext)

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
