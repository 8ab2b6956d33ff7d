"""An asyncio transport that encrypts what the connection writes through a TlsSession.

The connection writes responses exactly as on a plain socket; this adapter turns each
write into TLS records on the underlying transport. File regions cannot go by sendfile
here (the kernel would send them unencrypted): where the C record writer runs, an
answer's parts and file ranges are encrypted together as full 16 KiB records, the files
read straight into the records (``write_parts``); elsewhere the connection passes their
bytes to ``write``.
"""

from __future__ import annotations

import asyncio
import os
import ssl
from typing import Any

from kbroker.security.tls_session import TlsSession

# Writes are encrypted this much at a time. OpenSSL's memory BIO grows by reallocating
# (and wiping) its buffer, so one megabyte of fetched records written at once is copied
# several times over; in slices the buffer keeps one size and is drained after each.
_ENCRYPT_SLICE = 64 * 1024
_RECORD = 16 * 1024  # a TLS record's most plaintext: write_parts fills every one


class TlsTransport:
    def __init__(self, raw: asyncio.Transport, session: TlsSession) -> None:
        self.raw = raw
        self.session = session

    def write(self, data: Any) -> None:
        if len(data) <= _ENCRYPT_SLICE:
            self.raw.write(self.session.encrypt(data))
            return
        # Each slice goes to the socket as soon as it is encrypted: the client decrypts
        # the first while the broker encrypts the next.
        view = memoryview(data)
        encrypt, send = self.session.encrypt, self.raw.write
        for at in range(0, len(view), _ENCRYPT_SLICE):
            send(encrypt(view[at : at + _ENCRYPT_SLICE]))

    def write_parts(self, parts: list[Any]) -> str | None:
        """One answer: bytes-likes and file regions (``file``, ``position``, ``length``),
        in order, as few full TLS records, sent a slice at a time. Answers why the
        connection must close (a region's file ended early, or OpenSSL refused), else
        None."""
        encrypt, send = self.session.encrypt_with_file, self.raw.write
        pending: list[Any] = []
        try:
            for part in parts:
                if isinstance(part, bytes | bytearray | memoryview):
                    pending.append(part)
                    continue
                head = pending[0] if len(pending) == 1 else b"".join(pending)
                fd, position, remaining = part.file.fileno(), part.position, part.length
                # Whole records only; the rest of the range heads what follows it, so a
                # fetch's partitions share records instead of each ending in a short one.
                while len(head) + remaining >= _RECORD:
                    whole = (len(head) + remaining) // _RECORD * _RECORD
                    size = min(whole, max(_ENCRYPT_SLICE, (len(head) // _RECORD + 1) * _RECORD))
                    take = size - len(head)
                    if take <= 0:
                        send(encrypt(head[:size], -1, 0, 0) or b"")
                        head = head[size:]
                        continue
                    ciphertext = encrypt(head, fd, position, take)
                    if ciphertext is None:
                        return f"segment file shorter than the region being sent ({part!r})"
                    send(ciphertext)
                    head, position, remaining = b"", position + take, remaining - take
                if remaining:
                    rest = os.pread(fd, remaining, position)
                    if len(rest) < remaining:
                        return f"segment file shorter than the region being sent ({part!r})"
                    head += rest
                pending = [head] if head else []
            if pending:
                # What is left, in one write: an answer's parts as one record, not one each.
                self.write(pending[0] if len(pending) == 1 else b"".join(pending))
        except ssl.SSLError as exc:
            return f"TLS error: {exc.reason or exc}"
        except OSError as exc:
            return f"reading a segment file failed: {exc}"
        return None

    def writelines(self, parts: Any) -> None:
        for part in parts:
            self.write(part)

    def get_write_buffer_size(self) -> int:
        return self.raw.get_write_buffer_size()

    def pause_reading(self) -> None:
        self.raw.pause_reading()

    def resume_reading(self) -> None:
        self.raw.resume_reading()

    def is_closing(self) -> bool:
        return self.raw.is_closing()

    def close(self) -> None:
        if not self.raw.is_closing():
            alert = self.session.close_notify()
            if alert:
                self.raw.write(alert)
            self.raw.close()

    def abort(self) -> None:
        self.raw.abort()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peercert":
            return self.session.peercert()
        if name == "socket":
            return None  # nothing may write to the socket past the encryption
        return self.raw.get_extra_info(name, default)
