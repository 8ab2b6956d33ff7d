"""An asyncio transport that encrypts what the connection writes through a TlsSession.

The connection writes responses exactly as on a plain socket; this adapter turns each
write into TLS records on the underlying transport. File regions cannot go by sendfile
here (the kernel would send them unencrypted), so the connection passes their bytes.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kbroker.security.tls_session import TlsSession

# Writes are encrypted this much at a time. OpenSSL's memory BIO grows by reallocating
# (and wiping) its buffer, so one megabyte of fetched records written at once is copied
# several times over; in slices the buffer keeps one size and is drained after each.
_ENCRYPT_SLICE = 64 * 1024


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
