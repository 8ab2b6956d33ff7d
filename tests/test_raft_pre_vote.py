"""Elections beside a live leader. A voter whose election timeout passes while the
leader is alive (a restarted or SIGCONTed controller, one cut off from the leader alone)
asks for a pre-vote first, as KRaft does (KIP-996): the others have heard from the
leader, refuse, and the leader keeps its term. Without it, the voter's election at a
higher term deposed the leader. A voter whose term went ahead anyway is taken back."""

import asyncio
import contextlib
from collections.abc import AsyncIterator

from kbroker.controller.raft import _RaftNode
from tests.test_controller_cluster import eventually, three_voters


@contextlib.asynccontextmanager
async def started(tmp_path, election_timeout_s) -> AsyncIterator[list]:
    """Three controllers of one quorum, started; stopped after."""
    nodes = three_voters(tmp_path, election_timeout_s=election_timeout_s)
    await asyncio.gather(*(n.start() for n in nodes))
    try:
        yield nodes
    finally:
        await asyncio.gather(*(n.stop() for n in nodes))


def _on_raft_thread(node, call) -> None:
    """Run `call(raft node)` on the controller's raft thread, between its ticks."""
    with node._raft._calls_lock:
        node._raft._calls.append(call)
    node._raft._wake.notify()


def time_out_now(node: _RaftNode) -> None:
    node._SyncObj__raftElectionDeadline = 0.0


# Election timeouts of seconds, not the usual 0.3-0.6 s, where a test forces time-outs:
# the three voters share one process, and on a loaded machine a pause of it longer than
# the timeout would start a real election that the forced ones did not cause.
SLOW_ELECTIONS = (3.0, 6.0)


def test_a_voter_timing_out_beside_a_live_leader_does_not_depose_it(tmp_path):
    async def main():
        async with started(tmp_path, SLOW_ELECTIONS) as nodes:
            leader = next(n for n in nodes if n.is_leader)
            term = leader._raft.term
            follower = next(n for n in nodes if not n.is_leader)
            for round_ in range(1, 4):
                _on_raft_thread(follower, time_out_now)
                await eventually(
                    lambda wanted=2 * round_: follower._raft._node.pre_votes_refused >= wanted,
                    f"both voters to refuse pre-vote round {round_}",
                )
            assert leader.is_leader
            assert {n._raft.term for n in nodes} == {term}
            await leader.register_broker(1, "127.0.0.1", 9091)
            await eventually(lambda: all(1 in n.state.brokers for n in nodes), "the broker")

    asyncio.run(main())


def test_a_voter_whose_term_went_ahead_unheard_is_taken_back(tmp_path):
    """A voter that raised its term in an election nobody heard (killed right after a
    SIGCONT, its vote requests lost) restarts at a term above the leader's: it ignores
    the leader's appends as stale, and its pre-votes are refused, since the others hear
    from the leader. As etcd and KRaft do, it tells the leader its term when it drops an
    append; the leader steps down, and the election at a higher term takes it back."""

    async def main():
        async with started(tmp_path, (0.5, 1.0)) as nodes:
            leader = next(n for n in nodes if n.is_leader)
            term = leader._raft.term
            ahead = next(n for n in nodes if not n.is_leader)

            def run_unheard_election(node: _RaftNode) -> None:
                node._SyncObj__setCurrentTerm(term + 1, node._SyncObj__selfNode.id)

            _on_raft_thread(ahead, run_unheard_election)
            await eventually(lambda: ahead._raft.term == term + 1, "the voter's term to go ahead")
            await eventually(
                lambda: (
                    len({n._raft.term for n in nodes}) == 1 and sum(n.is_leader for n in nodes) == 1
                ),
                "one term and one leader again",
                timeout=20,
            )
            assert ahead._raft.term > term
            now_leading = next(n for n in nodes if n.is_leader)
            await now_leading.register_broker(7, "127.0.0.1", 9097)
            await eventually(lambda: all(7 in n.state.brokers for n in nodes), "the broker")

    asyncio.run(main())


def test_a_pre_vote_won_before_the_leader_was_heard_does_not_start_a_later_election(tmp_path):
    """A pre-vote round can be won just before the new leader's first append arrives (at
    start, when no voter has heard from a leader yet); the append then averts the
    election. The win is for that moment only: when the same voter times out later, at
    the same term, beside a live leader, it must ask again, not depose the leader."""

    async def main():
        async with started(tmp_path, SLOW_ELECTIONS) as nodes:
            leader = next(n for n in nodes if n.is_leader)
            term = leader._raft.term
            follower = next(n for n in nodes if not n.is_leader)
            raft = follower._raft._node
            won_at: list[float] = []

            def win_a_round(node: _RaftNode) -> None:
                node._pre_vote_won_term = node._SyncObj__raftCurrentTerm
                won_at.append(node._leader_contact)

            _on_raft_thread(follower, win_a_round)
            await eventually(
                lambda: won_at and raft._leader_contact > won_at[0],
                "an append from the leader after the won round",
            )
            refused = raft.pre_votes_refused
            _on_raft_thread(follower, time_out_now)
            await eventually(
                lambda: raft.pre_votes_refused >= refused + 2,
                "both voters to refuse the follower's pre-vote",
            )
            assert leader.is_leader
            assert {n._raft.term for n in nodes} == {term}

    asyncio.run(main())
