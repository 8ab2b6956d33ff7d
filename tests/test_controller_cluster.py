"""Three voters in one process on loopback: the same metadata log on every node."""

import asyncio
import socket
import time

import pytest

from kbroker.controller import Controller, ControllerConfig, ControllerStartError


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def three_voters(base, secrets=("s", "s", "s"), **config):
    addresses = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    return [
        Controller(
            ControllerConfig(
                i + 1,
                base / f"node{i + 1}",
                raft_bind=address,
                peers=[f"{j + 1}@{a}" for j, a in enumerate(addresses) if a != address],
                election_timeout_s=(0.3, 0.6),
                secret=secrets[i],
                **config,
            )
        )
        for i, address in enumerate(addresses)
    ]


async def eventually(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


def test_three_voters_share_one_metadata_log(tmp_path):
    async def main():
        nodes = three_voters(tmp_path)
        await asyncio.gather(*(n.start() for n in nodes))
        try:
            leaders = [n for n in nodes if n.is_leader]
            assert len(leaders) == 1
            leader = leaders[0]
            assert {n.state.cluster_id for n in nodes} == {leader.state.cluster_id}
            await eventually(lambda: {n.state.controller_id for n in nodes} == {leader.node_id})

            for n in nodes:
                await leader.register_broker(n.node_id, "127.0.0.1", 9090 + n.node_id)
            created = await leader.create_topic("replicated", 3, 3, {"retention.ms": "1"})
            await eventually(lambda: all(n.state.topics.get("replicated") for n in nodes))
            assert all(n.state.topics["replicated"] == created for n in nodes)

            # a follower's change is forwarded to the leader and applied everywhere
            follower = next(n for n in nodes if not n.is_leader)
            forwarded = await follower.create_topic("via-follower", 1, 2, {})
            assert follower.state.topics["via-follower"] == forwarded
            await eventually(lambda: all("via-follower" in n.state.topics for n in nodes))

            # the leader goes away; the other two elect a new one and keep committing
            await leader.stop()
            survivors = [n for n in nodes if n is not leader]
            await eventually(lambda: any(n.is_leader for n in survivors))
            new_leader = next(n for n in survivors if n.is_leader)
            await new_leader.create_topic("after-failover", 1, 1, {})
            await eventually(lambda: all("after-failover" in n.state.topics for n in survivors))
            await eventually(
                lambda: {n.state.controller_id for n in survivors} == {new_leader.node_id}
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


def test_an_observer_follows_the_log_and_its_changes_reach_the_leader(tmp_path):
    async def main():
        voters = three_voters(tmp_path)
        await asyncio.gather(*(n.start() for n in voters))
        observer = Controller(
            ControllerConfig(
                4,
                tmp_path / "observer",
                peers=[n.raft_address for n in voters],
                observer=True,
                secret="s",
            )
        )
        await observer.start()
        try:
            assert not observer.is_leader
            assert observer.state.cluster_id == voters[0].state.cluster_id
            await observer.register_broker(4, "127.0.0.1", 9094)
            await eventually(lambda: all(4 in n.state.brokers for n in voters))
        finally:
            await observer.stop()
            await asyncio.gather(*(n.stop() for n in voters))

    asyncio.run(main())
