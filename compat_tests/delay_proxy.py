"""A TCP proxy on loopback that hands on every byte a fixed time after it arrived, in both
directions and in order: a slow link for one connection path without touching the kernel's
queueing (netem is not on every machine).

A node that dials through it (a broker-only node's controller.quorum.voters naming the
proxy) learns every metadata change `delay_s` late, and its own changes reach the
controller as late: the metadata image of that node lags the cluster's.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
import time

from compat_tests.broker_process import free_port


class DelayProxy:
    def __init__(self, target: tuple[str, int], delay_s: float) -> None:
        self.target = target
        self.delay_s = delay_s
        self.port = free_port()
        self._server = socket.create_server(("127.0.0.1", self.port))
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True, name="delay-proxy").start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self._closed.set()
        for s in [self._server, *self._sockets]:
            with contextlib.suppress(OSError):
                s.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            self._sockets += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                pending: queue.Queue[tuple[float, bytes]] = queue.Queue()
                threading.Thread(target=self._read, args=(src, pending), daemon=True).start()
                threading.Thread(target=self._write, args=(dst, pending), daemon=True).start()

    def _read(self, src: socket.socket, pending: queue.Queue[tuple[float, bytes]]) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            pending.put((time.monotonic() + self.delay_s, data))
            if not data:
                return

    def _write(self, dst: socket.socket, pending: queue.Queue[tuple[float, bytes]]) -> None:
        while True:
            due, data = pending.get()
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)  # the delay this proxy exists to add
            try:
                if not data:
                    dst.shutdown(socket.SHUT_WR)
                    return
                dst.sendall(data)
            except OSError:
                return
