"""The active controller fences a silent broker at once when nothing listens on its port
any more, and leaves a silent broker whose port still accepts to the session timeout."""

import asyncio
import socket
import time

from compat_tests.waiting import eventually_async
from kbroker.controller import Controller, ControllerConfig
from kbroker.controller.liveness import PROBE_INTERVAL_S, listener_refuses

SESSION_TIMEOUT_S = 30.0
HEARTBEAT_INTERVAL_S = 0.2


def closed_port() -> int:
    """A loopback port nobody listens on (bound once, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def watching_controller(tmp_path) -> Controller:
    return Controller(
        ControllerConfig(
            1,
            tmp_path,
            broker_session_timeout_s=SESSION_TIMEOUT_S,
            broker_heartbeat_interval_s=HEARTBEAT_INTERVAL_S,
        )
    )


async def fenced_within(controller: Controller, node_id: int, timeout: float) -> bool:
    try:
        await eventually_async(
            lambda: controller.state.brokers[node_id].fenced,
            timeout=timeout,
            what=f"broker {node_id} fenced",
        )
    except AssertionError:
        return False
    return True


def test_a_silent_broker_whose_listener_refuses_is_fenced_long_before_its_session_ends(
    tmp_path,
):
    async def main():
        controller = watching_controller(tmp_path)
        await controller.start()
        try:
            await controller.register_broker(7, "127.0.0.1", closed_port())
            began = time.monotonic()
            assert await fenced_within(controller, 7, 5.0)
            assert time.monotonic() - began < SESSION_TIMEOUT_S / 5
        finally:
            await controller.stop()

    asyncio.run(main())


def test_a_silent_broker_whose_listener_accepts_waits_for_the_session_timeout(tmp_path):
    async def main():
        listener = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        controller = watching_controller(tmp_path)
        await controller.start()
        try:
            await controller.register_broker(8, "127.0.0.1", port)
            # Several probe rounds pass (each broker is probed every 0.5 s once silent).
            assert not await fenced_within(controller, 8, 2.0)
        finally:
            await controller.stop()
            listener.close()

    asyncio.run(main())


def test_a_voter_whose_raft_connection_is_lost_is_probed_without_waiting_for_a_heartbeat(
    tmp_path,
):
    async def main():
        addresses = {i: f"127.0.0.1:{closed_port()}" for i in (1, 2, 3)}
        nodes = [
            Controller(
                ControllerConfig(
                    i,
                    tmp_path / f"node{i}",
                    raft_bind=address,
                    peers=[f"{j}@{a}" for j, a in addresses.items() if j != i],
                    election_timeout_s=(0.3, 0.6),
                    secret="s",
                    voters=addresses,
                    broker_session_timeout_s=SESSION_TIMEOUT_S,
                    # Silence alone would make nobody suspect for 10.5 s.
                    broker_heartbeat_interval_s=10.0,
                )
            )
            for i, address in addresses.items()
        ]
        await asyncio.gather(*(n.start() for n in nodes))
        try:
            leader = next(n for n in nodes if n.is_leader)
            gone = next(n for n in nodes if not n.is_leader)
            # The voter's broker side: registered on a port nobody listens on.
            await leader.register_broker(gone.node_id, "127.0.0.1", closed_port())
            # Absence: a probe of a live voter would come within its interval (0.5 s).
            assert not await fenced_within(leader, gone.node_id, PROBE_INTERVAL_S)
            await gone.stop()
            assert await fenced_within(leader, gone.node_id, 5.0)
        finally:
            await asyncio.gather(*(n.stop() for n in nodes))

    asyncio.run(main())


def test_the_probe_concludes_only_from_a_refused_connection():
    async def main():
        listener = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        try:
            assert not await listener_refuses("127.0.0.1", port)
            assert await listener_refuses("127.0.0.1", closed_port())
        finally:
            listener.close()

    asyncio.run(main())
