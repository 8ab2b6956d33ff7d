"""Telling a dead broker from a silent one, so a killed broker is fenced in seconds.

The session timeout (`broker.session.timeout.ms`, 9 s by default) is the only safe rule
for a broker the controller cannot hear: it may be cut off by the network and still
alive, serving whoever can reach it. But a broker killed outright leaves evidence that a
partitioned one cannot: its host's kernel answers a connection to its listener port with
a reset (ECONNREFUSED), because no process listens there any more. So once a broker has
missed a heartbeat, or (a voter) its Raft connection was lost since its last one (a
killed process's kernel closes its connections at once), the active controller tries to
connect to its registered inter-broker listener:
- refused on every address: nothing listens, the incarnation that registered is gone;
  it is fenced at once (a restarted process that already listens is accepted, and its
  own registration ends the old incarnation);
- accepted, timed out, unreachable, or any other error: no conclusion; the session
  timeout decides, as before. A network partition never answers with a reset, so it is
  handled by the session timeout alone, and a live broker never refuses its own port.
The probe opens a TCP connection and closes it at once, sending nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from dataclasses import dataclass, field

# How long one connection attempt may take; a host that does not answer is no evidence.
PROBE_TIMEOUT_S = 1.0
# Least time between two probes of one broker.
PROBE_INTERVAL_S = 0.5


async def listener_refuses(host: str, port: int, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """True only when every address `host` resolves to refused the connection."""
    loop = asyncio.get_running_loop()
    try:
        infos = await asyncio.wait_for(
            loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), timeout
        )
    except (OSError, TimeoutError):
        return False
    if not infos:
        return False
    for family, kind, proto, _name, address in infos:
        sock = socket.socket(family, kind, proto)
        sock.setblocking(False)
        try:
            await asyncio.wait_for(loop.sock_connect(sock, address), timeout)
        except ConnectionRefusedError:
            continue
        except (OSError, TimeoutError):
            return False
        else:
            return False  # something accepts: the broker (or its successor) lives
        finally:
            with contextlib.suppress(OSError):
                sock.close()
    return True


def probe_after(heartbeat_interval: float) -> float:
    """Silence after which a broker is probed: one heartbeat interval and a margin for a
    heartbeat that is merely late (a probe of a live broker costs one connection)."""
    return heartbeat_interval + min(0.5, heartbeat_interval / 2)


@dataclass
class Probes:
    """Which brokers are being probed and when each was last, so one broker gets at most
    one probe in flight and one per PROBE_INTERVAL_S."""

    in_flight: set[int] = field(default_factory=set)
    last: dict[int, float] = field(default_factory=dict)

    def due(self, node_id: int, now: float) -> bool:
        return node_id not in self.in_flight and now - self.last.get(node_id, 0.0) >= (
            PROBE_INTERVAL_S
        )

    def begin(self, node_id: int, now: float) -> None:
        self.in_flight.add(node_id)
        self.last[node_id] = now

    def end(self, node_id: int) -> None:
        self.in_flight.discard(node_id)
