"""Three voters in one process on loopback: the same metadata log on every node."""

import asyncio
import errno
import logging
import os
import socket
import struct
import threading
import time

import pytest

from compat_tests.waiting import eventually_async
from kbroker.controller import Controller, ControllerConfig, ControllerStartError
from kbroker.controller.errors import NOT_LEADER_OR_FOLLOWER, ControllerError
from kbroker.controller.raft_handshake import RefusalLog
from kbroker.testing.nodes import free_ports as loopback_ports

pytestmark = pytest.mark.slow  # make test-fast leaves these out


def free_port() -> int:
    """A loopback port free a moment ago, below the kernel's ephemeral range."""
    return loopback_ports(1)[0]


def three_voters(base, secrets=("s", "s", "s"), election_timeout_s=(0.3, 0.6), **config):
    addresses = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    return [
        Controller(
            ControllerConfig(
                i + 1,
                base / f"node{i + 1}",
                raft_bind=address,
                peers=[f"{j + 1}@{a}" for j, a in enumerate(addresses) if a != address],
                election_timeout_s=election_timeout_s,
                secret=secrets[i],
                **config,
            )
        )
        for i, address in enumerate(addresses)
    ]


def an_observer(base, voters):
    """Node 4: a broker-only node following the voters' log."""
    return Controller(
        ControllerConfig(
            4,
            base / "observer",
            peers=[n.raft_address for n in voters],
            observer=True,
            secret="s",
        )
    )


async def eventually(predicate, what, timeout=5.0):
    return await eventually_async(predicate, timeout=timeout, what=what, interval=0.01)


def test_three_voters_share_one_metadata_log(tmp_path):
    async def main():
        nodes = three_voters(tmp_path)
        await asyncio.gather(*(n.start() for n in nodes))
        try:
            leaders = [n for n in nodes if n.is_leader]
            assert len(leaders) == 1
            leader = leaders[0]
            assert {n.state.cluster_id for n in nodes} == {leader.state.cluster_id}
            await eventually(
                lambda: {n.state.controller_id for n in nodes} == {leader.node_id},
                "every node to know the leader",
            )

            for n in nodes:
                await leader.register_broker(n.node_id, "127.0.0.1", 9090 + n.node_id)
            created = await leader.create_topic("replicated", 3, 3, {"retention.ms": "1"})
            await eventually(
                lambda: all(n.state.topics.get("replicated") for n in nodes),
                "the topic on every node",
            )
            assert all(n.state.topics["replicated"] == created for n in nodes)

            # a follower's change is forwarded to the leader and applied everywhere
            follower = next(n for n in nodes if not n.is_leader)
            forwarded = await follower.create_topic("via-follower", 1, 2, {})
            assert follower.state.topics["via-follower"] == forwarded
            await eventually(
                lambda: all("via-follower" in n.state.topics for n in nodes),
                "the forwarded topic on every node",
            )

            # the leader goes away; the other two elect a new one and keep committing
            await leader.stop()
            survivors = [n for n in nodes if n is not leader]
            await eventually(lambda: any(n.is_leader for n in survivors), "a new leader")
            new_leader = next(n for n in survivors if n.is_leader)
            await new_leader.create_topic("after-failover", 1, 1, {})
            await eventually(
                lambda: all("after-failover" in n.state.topics for n in survivors),
                "the new leader's topic on every survivor",
            )
            await eventually(
                lambda: {n.state.controller_id for n in survivors} == {new_leader.node_id},
                "every survivor to know the new leader",
            )
        finally:
            await asyncio.gather(*(n.stop() for n in nodes))

    asyncio.run(main())


def test_a_voter_without_the_cluster_secret_is_not_let_in(tmp_path):
    async def main():
        good1, good2, stranger = three_voters(
            tmp_path, secrets=("right", "right", "wrong"), start_timeout_s=3.0
        )
        await asyncio.gather(good1.start(), good2.start())
        try:
            with pytest.raises(ControllerStartError):
                await stranger.start()
            assert stranger.state.cluster_id is None
            assert good1.state.cluster_id == good2.state.cluster_id is not None
        finally:
            await asyncio.gather(good1.stop(), good2.stop(), stranger.stop())

    asyncio.run(main())


def closed_by_peer(sock: socket.socket, within_s: float) -> bool:
    """Whether the other side closes `sock` within `within_s` (blocking; run in a thread)."""
    sock.settimeout(within_s)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_a_stranger_on_the_raft_port_is_cut_off_before_it_authenticates(tmp_path, monkeypatch):
    refused: dict[str, str] = {}  # peer address -> why, before any rate limiting
    monkeypatch.setattr(RefusalLog, "refused", lambda log, peer, why: refused.setdefault(peer, why))
    strangers: list[str] = []

    async def main():
        nodes = three_voters(tmp_path)
        await asyncio.gather(*(n.start() for n in nodes))
        try:
            leader = next(n for n in nodes if n.is_leader)
            await leader.register_broker(leader.node_id, "127.0.0.1", 9091)
            address = leader.raft_address.rsplit(":", 1)
            raft_port = (address[0], int(address[1]))
            # announces a 2 GiB frame, then keeps sending; another sends nothing at all
            with (
                socket.create_connection(raft_port) as huge,
                socket.create_connection(raft_port) as idle,
            ):
                for sock in (huge, idle):
                    host, port = sock.getsockname()[:2]
                    strangers.append(f"{host}:{port}")
                huge.sendall(struct.pack("i", 2**31 - 1) + bytes(1 << 16))
                await leader.create_topic("while-probed", 1, 1, {})
                assert await asyncio.to_thread(closed_by_peer, huge, 2.0)
                assert await asyncio.to_thread(closed_by_peer, idle, 6.0)
            assert leader.is_leader
            await eventually(
                lambda: all("while-probed" in n.state.topics for n in nodes),
                "the topic on every node",
            )
        finally:
            await asyncio.gather(*(n.stop() for n in nodes))

    asyncio.run(main())
    huge, idle = strangers
    assert refused[huge] == "a 2147483647-byte frame before authenticating"
    assert refused[idle].startswith("it did not authenticate within")


def test_refused_raft_connections_are_logged_once_per_interval_and_counted(caplog):
    refusals = RefusalLog(interval_s=60.0)
    with caplog.at_level(logging.WARNING, logger="kbroker.controller"):
        refusals.refused("10.0.0.1:1", "a 9-byte frame")
        refusals.refused("10.0.0.2:2", "a 9-byte frame")
        refusals.refused("10.0.0.3:3", "a 9-byte frame")
        refusals._last = float("-inf")  # the interval has passed
        refusals.refused("10.0.0.4:4", "a 9-byte frame")
    assert [r.getMessage() for r in caplog.records] == [
        "raft connection from 10.0.0.1:1 closed: a 9-byte frame",
        "raft connection from 10.0.0.4:4 closed: a 9-byte frame (2 more since the last report)",
    ]


def test_a_voter_keeps_its_raft_listener_when_accept_runs_out_of_file_descriptors(
    tmp_path, monkeypatch
):
    warned: list[str] = []  # before rate limiting: another refusal may hold the line back
    monkeypatch.setattr(
        RefusalLog, "warn", lambda log, message, *args: warned.append(message % args)
    )

    async def main():
        nodes = three_voters(tmp_path)
        await asyncio.gather(*(n.start() for n in nodes))
        try:
            host, port = nodes[0].raft_address.rsplit(":", 1)
            raft_port = (host, int(port))
            failed = threading.Event()
            accept = socket.socket.accept

            def accept_failing_once(sock):
                if not failed.is_set() and sock.getsockname()[:2] == raft_port:
                    failed.set()
                    raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
                return accept(sock)

            monkeypatch.setattr(socket.socket, "accept", accept_failing_once)
            with socket.create_connection(raft_port) as first:
                await eventually(
                    lambda: any("could not accept" in w for w in warned),
                    "the Raft thread to handle the failed accept",
                )
                # still listening: a new connection is taken, and the first is accepted
                with socket.create_connection(raft_port, timeout=2.0):
                    assert not await asyncio.to_thread(closed_by_peer, first, 1.0)
        finally:
            await asyncio.gather(*(n.stop() for n in nodes))

    asyncio.run(main())
    assert [w for w in warned if "could not accept" in w] == [
        "raft listener could not accept a connection (Too many open files); it stays open"
    ]


def test_an_observer_follows_the_log_and_its_changes_reach_the_leader(tmp_path):
    async def main():
        voters = three_voters(tmp_path)
        await asyncio.gather(*(n.start() for n in voters))
        observer = an_observer(tmp_path, voters)
        await observer.start()
        try:
            assert not observer.is_leader
            assert observer.state.cluster_id == voters[0].state.cluster_id
            await observer.register_broker(4, "127.0.0.1", 9094)
            await eventually(
                lambda: all(4 in n.state.brokers for n in voters), "the observer's broker"
            )
        finally:
            await observer.stop()
            await asyncio.gather(*(n.stop() for n in voters))

    asyncio.run(main())


def test_every_node_describes_the_quorum_as_its_leader_sees_it(tmp_path):
    async def main():
        voters = three_voters(tmp_path)
        await asyncio.gather(*(n.start() for n in voters))
        observer = an_observer(tmp_path, voters)
        await observer.start()
        nodes = [*voters, observer]
        try:
            leader = next(n for n in voters if n.is_leader)
            registered_ms = time.time() * 1000
            await observer.register_broker(4, "127.0.0.1", 9094)

            async def every_replica_answered():
                answers = await asyncio.gather(*(n.describe_quorum() for n in nodes))
                replicas = [r for a in answers for r in (*a.voters, *a.observers)]
                fetched = all(r.last_fetch_timestamp >= registered_ms for r in replicas)
                return answers if fetched and len(replicas) == 4 * len(nodes) else None

            answers = await eventually(every_replica_answered, "a fetch from every replica")
            now_ms = time.time() * 1000
            for answer in answers:
                assert answer.leader_id == leader.node_id
                assert [v.replica_id for v in answer.voters] == [1, 2, 3]
                assert [o.replica_id for o in answer.observers] == [4]
                for replica in (*answer.voters, *answer.observers):
                    assert answer.high_watermark - 2 <= replica.log_end_offset
                    assert now_ms - 1000 < replica.last_fetch_timestamp <= now_ms
                    assert now_ms - 1000 < replica.last_caught_up_timestamp <= now_ms
            assert len({(a.leader_epoch, a.endpoints) for a in answers}) == 1

            # The new leader's view: the stopped voter has not fetched in its term.
            await leader.stop()
            survivors = [n for n in nodes if n is not leader]
            await eventually(lambda: any(n.is_leader for n in survivors), "a new leader")
            new_leader = next(n for n in survivors if n.is_leader)

            async def the_new_leaders_view():
                answers = await asyncio.gather(*(n.describe_quorum() for n in survivors))
                return answers if {a.leader_id for a in answers} == {new_leader.node_id} else None

            for answer in await eventually(the_new_leaders_view, "every survivor's new leader"):
                assert answer.leader_id == new_leader.node_id
                assert answer.leader_epoch > answers[0].leader_epoch
                gone = next(v for v in answer.voters if v.replica_id == leader.node_id)
                assert (gone.log_end_offset, gone.last_fetch_timestamp) == (-1, -1)
        finally:
            await observer.stop()
            await asyncio.gather(*(n.stop() for n in voters))

    asyncio.run(main())


def test_a_voter_that_cannot_reach_a_leader_answers_not_leader_or_follower(tmp_path):
    async def main():
        voters = three_voters(tmp_path)
        await asyncio.gather(*(n.start() for n in voters))
        try:
            follower = next(n for n in voters if not n.is_leader)
            await asyncio.gather(*(n.stop() for n in voters if n is not follower))
            with pytest.raises(ControllerError) as refused:
                await follower.describe_quorum()
            assert refused.value.error_code == NOT_LEADER_OR_FOLLOWER
        finally:
            await asyncio.gather(*(n.stop() for n in voters))

    asyncio.run(main())
