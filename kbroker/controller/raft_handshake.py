"""Limits on a Raft connection that has not yet proved it holds the cluster secret.

pysyncobj accepts any TCP connection on a voter's Raft port and buffers whatever it sends
until a whole frame arrives: the frame's 4-byte length prefix is trusted, so a stranger
announcing 2 GiB could fill the voter's memory, and the buffer's growth by copying
starves the Raft thread until the voter loses its leadership. A connection that sends
nothing (or one byte now and then) is never timed out either, so enough of them exhaust
the voter's file descriptors (pysyncobj would then close its listening socket for good;
raft_listener.py keeps it open). So, until a connection has completed pysyncobj's handshake (its first
frame decrypted with the secret, its second naming a voter or an observer):
- a frame longer than `HANDSHAKE_FRAME_LIMIT` (the handshake's frames are ~200 bytes)
  closes it;
- it must finish within the transport's connection timeout, or is closed.
A connection refused for failing to authenticate gets one warning naming its peer
(never the bytes it sent), at most one per `LOG_INTERVAL_S`; the others are counted
into the next line. An authenticated peer holds the secret and is trusted as before.
"""

from __future__ import annotations

import logging
import struct
import time
from dataclasses import dataclass, field

from pysyncobj.monotonic import monotonic as monotonic_time
from pysyncobj.tcp_connection import CONNECTION_STATE, TcpConnection

log = logging.getLogger("kbroker.controller")

HANDSHAKE_FRAME_LIMIT = 64 * 1024
LOG_INTERVAL_S = 10.0


@dataclass
class RefusalLog:
    """One warning per interval about refused Raft connections; the rest are counted."""

    interval_s: float = LOG_INTERVAL_S
    _last: float = field(default=float("-inf"))
    _suppressed: int = 0

    def refused(self, peer: str, reason: str) -> None:
        self.warn("raft connection from %s closed: %s", peer, reason)

    def warn(self, message: str, *args: object) -> None:
        """Log `message` (%-style), unless a line went out within the interval: then it
        is only counted into the next line."""
        now = time.monotonic()
        if now - self._last < self.interval_s:
            self._suppressed += 1
            return
        more = f" ({self._suppressed} more since the last report)" if self._suppressed else ""
        self._last, self._suppressed = now, 0
        log.warning(message + "%s", *args, more)


class HandshakeConnection(TcpConnection):
    """pysyncobj's server-side connection, bounded until its peer has authenticated.

    `in_handshake` is cleared by the transport once the peer is identified."""

    in_handshake: bool
    peer: str
    accepted_at: float
    refusals: RefusalLog

    @classmethod
    def adopt(cls, conn: TcpConnection, refusals: RefusalLog) -> HandshakeConnection:
        """Turn a connection pysyncobj's server just accepted into a bounded one."""
        conn.__class__ = cls
        assert isinstance(conn, HandshakeConnection)
        conn.in_handshake = True
        conn.accepted_at = monotonic_time()
        conn.refusals = refusals
        try:
            host, port = conn._TcpConnection__socket.getpeername()[:2]
            conn.peer = f"{host}:{port}"
        except OSError:
            conn.peer = "an unknown peer"
        return conn

    def refuse(self, reason: str) -> None:
        self.in_handshake = False
        self.refusals.refused(self.peer, reason)
        self.disconnect()

    # pysyncobj calls self.__processParseMessage, which this name overrides.
    def _TcpConnection__processParseMessage(self) -> object:  # noqa: N802
        if self.in_handshake:
            buffered: bytes = self._TcpConnection__readBuffer
            if len(buffered) >= 4:
                (size,) = struct.unpack("i", buffered[:4])
                if not 0 < size <= HANDSHAKE_FRAME_LIMIT:
                    self.refuse(f"a {size}-byte frame before authenticating")
                    return None
        message = super()._TcpConnection__processParseMessage()
        if message is None and self.in_handshake and self.state == CONNECTION_STATE.DISCONNECTED:
            # pysyncobj drops a frame it cannot decrypt (or decode) without a word.
            self.refuse("it did not authenticate with cluster.secret")
        return message

    def overdue(self, timeout_s: float) -> bool:
        return self.in_handshake and monotonic_time() - self.accepted_at > timeout_s
