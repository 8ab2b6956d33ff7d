"""A voter whose election timeout passes while the leader is alive (a restarted or
SIGCONTed controller, one cut off from the leader alone) asks for a pre-vote first, as
KRaft does (KIP-996): the others have heard from the leader, refuse, and the leader
keeps its term. Without it, the voter's election at a higher term deposed the leader."""

import asyncio

from kbroker.controller.raft import _RaftNode
from tests.test_controller_cluster import eventually, three_voters


def test_a_voter_timing_out_beside_a_live_leader_does_not_depose_it(tmp_path):
    async def main():
        # Election timeouts of seconds, not the usual 0.3-0.6 s: the three voters share
        # one process, and on a loaded machine a pause of it longer than the timeout
        # would start a real election that the forced time-outs below did not cause.
        nodes = three_voters(tmp_path, election_timeout_s=(3.0, 6.0))
        await asyncio.gather(*(n.start() for n in nodes))
        try:
            leader = next(n for n in nodes if n.is_leader)
            term = leader._raft.term
            follower = next(n for n in nodes if not n.is_leader)

            def time_out_now(node: _RaftNode) -> None:
                node._SyncObj__raftElectionDeadline = 0.0

            for round_ in range(1, 4):
                with follower._raft._calls_lock:
                    follower._raft._calls.append(time_out_now)
                follower._raft._wake.notify()
                await eventually(
                    lambda wanted=2 * round_: follower._raft._node.pre_votes_refused >= wanted,
                    f"both voters to refuse pre-vote round {round_}",
                )
            assert leader.is_leader
            assert {n._raft.term for n in nodes} == {term}
            await leader.register_broker(1, "127.0.0.1", 9091)
            await eventually(lambda: all(1 in n.state.brokers for n in nodes), "the broker")
        finally:
            await asyncio.gather(*(n.stop() for n in nodes))

    asyncio.run(main())
