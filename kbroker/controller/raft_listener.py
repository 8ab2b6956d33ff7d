"""A voter's Raft listening socket that outlives a failed accept().

pysyncobj's TcpServer closes its listening socket for good on any accept() error other
than EAGAIN, and its transport never binds again: one moment out of file descriptors
(EMFILE, ENFILE), kernel memory (ENOBUFS, ENOMEM) or a peer resetting a connection still
in the backlog (ECONNABORTED) would cut the voter off from every partner that dials it.
Those errors say nothing about the listener, so it stays open: the pending connection
stays in the backlog and the poller offers it again on the next tick. Each such failure
is reported through the transport's rate-limited RefusalLog (one line per interval).
Any other accept() error, or an error event on the listener, closes it as before.
"""

from __future__ import annotations

import errno
import os
import socket

from pysyncobj.poller import POLL_EVENT_TYPE
from pysyncobj.tcp_connection import TcpConnection
from pysyncobj.tcp_server import TcpServer

from kbroker.controller.raft_handshake import RefusalLog

TRANSIENT_ACCEPT_ERRORS = frozenset(
    {
        errno.EMFILE,
        errno.ENFILE,
        errno.ENOBUFS,
        errno.ENOMEM,
        errno.ECONNABORTED,
        errno.EAGAIN,
        errno.EWOULDBLOCK,
        errno.EINTR,
    }
)
_NOTHING_PENDING = frozenset({errno.EAGAIN, errno.EWOULDBLOCK, errno.EINTR})


class ListeningServer(TcpServer):
    """pysyncobj's TcpServer whose listener survives a transient accept() error."""

    refusals: RefusalLog

    @classmethod
    def adopt(cls, server: TcpServer, refusals: RefusalLog) -> ListeningServer:
        """Turn the server pysyncobj's transport just created (not bound yet) into one."""
        server.__class__ = cls
        assert isinstance(server, ListeningServer)
        server.refusals = refusals
        return server

    # pysyncobj subscribes self.__onNewConnection to the poller, which this name overrides.
    def _TcpServer__onNewConnection(self, descr: int, event: int) -> None:  # noqa: N802
        if event & POLL_EVENT_TYPE.READ:
            try:
                sock, _ = self._TcpServer__socket.accept()
            except OSError as e:
                if e.errno not in TRANSIENT_ACCEPT_ERRORS:
                    self.unbind()
                    return
                if e.errno not in _NOTHING_PENDING:
                    self.refusals.warn(
                        "raft listener could not accept a connection (%s); it stays open",
                        os.strerror(e.errno or 0),
                    )
            else:
                self._serve(sock)
        if event & POLL_EVENT_TYPE.ERROR:
            self.unbind()

    def _serve(self, sock: socket.socket) -> None:
        """What pysyncobj does with an accepted socket; a failure closes only that one."""
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._TcpServer__sendBufferSize)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self._TcpServer__recvBufferSize)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setblocking(False)
        except OSError:
            sock.close()  # its peer is gone already
            return
        conn = TcpConnection(
            poller=self._TcpServer__poller,
            socket=sock,
            timeout=self._TcpServer__connectionTimeout,
            sendBufferSize=self._TcpServer__sendBufferSize,
            recvBufferSize=self._TcpServer__recvBufferSize,
            keepalive=self._TcpServer__keepalive,
        )
        self._TcpServer__onNewConnectionCallback(conn)
