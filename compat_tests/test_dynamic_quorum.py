"""A dynamic controller quorum (KIP-853): voters added and removed through the log.

Node 1 (broker and controller) is formatted as the only voter (`kbroker format
--standalone`); controller-only nodes 2, 3 and 4 are formatted
`--no-initial-controllers` and start as observers until AddRaftVoter makes them voters.
The tests run in order on one cluster: bad input first, on the standalone quorum; then
a dead voter is replaced (every step between topic creations that must succeed); then a
voter's metadata directory is wiped while another voter is down, and nothing
acknowledged before is lost. Real processes, kill -9.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compat_tests.broker_process import broker_environment, free_port, kbroker_command
from compat_tests.cluster import (
    CLUSTER_SECRET,
    TEST_TIMINGS,
    ClusterNode,
)
from compat_tests.kafka_reference import kafka_unavailable, run_tool_process
from compat_tests.waiting import eventually
from kbroker.admin.client import BrokerConnection

CLUSTER_ID = "q8VxsVxBQqe3XxZcUWuFzg"
ADD_RAFT_VOTER, REMOVE_RAFT_VOTER, DESCRIBE_QUORUM = 80, 81, 55
DUPLICATE_VOTER, VOTER_NOT_FOUND, REQUEST_TIMED_OUT = 126, 127, 7
# The log line of a controller that cannot get a change committed (no quorum).
NO_QUORUM_LINE = "for a Raft quorum of the voters"


class DynamicQuorum:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.controller_ports = {i: free_port() for i in (1, 2, 3, 4)}
        self.bootstrap_servers = ",".join(
            f"127.0.0.1:{self.controller_ports[i]}" for i in (1, 2, 3)
        )
        self.nodes: dict[int, ClusterNode] = {}

    def node(self, node_id: int) -> ClusterNode:
        if node_id not in self.nodes:
            controller = self.controller_ports[node_id]
            port = free_port()
            settings = {
                "node.id": str(node_id),
                "process.roles": "broker,controller" if node_id == 1 else "controller",
                "listeners": (
                    f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}"
                    if node_id == 1
                    else f"CONTROLLER://127.0.0.1:{controller}"
                ),
                "controller.listener.names": "CONTROLLER",
                "controller.quorum.bootstrap.servers": self.bootstrap_servers,
                "cluster.secret": CLUSTER_SECRET,
                **TEST_TIMINGS,
            }
            if node_id == 1:
                settings["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{port}"
            node = ClusterNode(self.root / f"node{node_id}", settings, port=port)
            node.node_id = node_id
            node.controller_port = controller
            node.controller_only = node_id != 1
            self.nodes[node_id] = node
        return self.nodes[node_id]

    def properties(self, node_id: int) -> Path:
        """The node's settings as a server.properties, as the tools read a controller's."""
        command = self.node(node_id).command()
        pairs = [command[i + 1] for i, word in enumerate(command) if word == "--override"]
        path = self.root / f"controller{node_id}.properties"
        path.write_text("".join(f"{pair}\n" for pair in pairs))
        return path

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`kbroker cluster quorum ...` against the broker."""
        return subprocess.run(
            [*kbroker_command(), "cluster", "quorum", *args, "--bootstrap", self.broker.bootstrap],
            env=broker_environment(),
            capture_output=True,
            text=True,
            timeout=60,
        )

    def format(self, node_id: int, how: str) -> str:
        """`kbroker format` the node's metadata directory; its new directory id."""
        node = self.node(node_id)
        command = node.command()
        command[command.index("serve")] = "format"
        done = subprocess.run(
            [*command, "--cluster-id", CLUSTER_ID, how],
            env=broker_environment(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return directory_id(node)

    @property
    def broker(self) -> ClusterNode:
        return self.nodes[1]

    def call(self, api_key: int, body: dict[str, Any], version: int) -> Any:
        with BrokerConnection("127.0.0.1", self.broker.port, 30.0, "quorum-test") as conn:
            return conn.call(api_key, body, versions=(version, version))

    def add_voter(self, node_id: int, directory: str) -> tuple[int, str | None]:
        answer = self.call(
            ADD_RAFT_VOTER,
            {
                "cluster_id": CLUSTER_ID,
                "timeout": 30_000,
                "voter_id": node_id,
                "voter_directory_id": as_uuid(directory),
                "listeners": [
                    {
                        "name": "CONTROLLER",
                        "host": "127.0.0.1",
                        "port": self.controller_ports[node_id],
                    }
                ],
            },
            0,
        )
        return answer.error_code, answer.error_message

    def remove_voter(self, node_id: int, directory: str) -> tuple[int, str | None]:
        answer = self.call(
            REMOVE_RAFT_VOTER,
            {
                "cluster_id": CLUSTER_ID,
                "voter_id": node_id,
                "voter_directory_id": as_uuid(directory),
            },
            0,
        )
        return answer.error_code, answer.error_message

    def quorum(self) -> Any:
        answer = self.call(
            DESCRIBE_QUORUM,
            {
                "topics": [
                    {"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}
                ]
            },
            2,
        )
        (partition,) = answer.topics[0].partitions
        assert partition.error_code == 0, partition.error_message
        return partition

    def voters(self) -> dict[int, str]:
        return {
            v.replica_id: from_uuid(v.replica_directory_id) for v in self.quorum().current_voters
        }

    def caught_up_observer(self, node_id: int, directory: str) -> bool:
        quorum = self.quorum()
        return any(
            o.replica_id == node_id
            and from_uuid(o.replica_directory_id) == directory
            and o.log_end_offset >= quorum.high_watermark
            for o in quorum.observers
        )

    def create_topic(self, name: str) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.broker.bootstrap})
        admin.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=30)

    def topics(self) -> set[str]:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.broker.bootstrap})
        return set(admin.list_topics(timeout=10).topics)


def directory_id(node: ClusterNode) -> str:
    for line in (node.data_dir / "meta.properties").read_text().splitlines():
        if line.startswith("directory.id="):
            return line.split("=", 1)[1]
    raise AssertionError("no directory.id")


def as_uuid(directory: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(directory + "=" * (-len(directory) % 4)))


def from_uuid(value: uuid.UUID | None) -> str:
    if value is None:
        return ""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


@pytest.fixture(scope="module")
def quorum(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DynamicQuorum]:
    q = DynamicQuorum(tmp_path_factory.mktemp("dynamic-quorum"))
    try:
        q.format(1, "--standalone")
        q.node(1).start()
        yield q
    finally:
        for node in q.nodes.values():
            node.kill()


def _topic() -> str:
    return f"dq-{uuid.uuid4().hex[:8]}"


def test_bad_voter_changes_get_kafkas_errors_and_change_nothing(quorum: DynamicQuorum) -> None:
    own = directory_id(quorum.broker)
    # The last voter cannot go.
    code, message = quorum.remove_voter(1, own)
    assert code == VOTER_NOT_FOUND
    assert message is not None and "Cannot remove voter ReplicaKey(id=1" in message
    # A voter id that is not a voter, and a directory id that does not match.
    assert quorum.remove_voter(9, own)[0] == VOTER_NOT_FOUND
    assert quorum.remove_voter(1, from_uuid(uuid.uuid4()))[0] == VOTER_NOT_FOUND
    # Adding the voter that is one already.
    code, message = quorum.add_voter(1, own)
    assert code == DUPLICATE_VOTER
    assert message is not None and "is already part of the set of voters" in message
    # A node that is not replicating the log (nobody runs node 3 yet).
    code, message = quorum.add_voter(3, from_uuid(uuid.uuid4()))
    assert code == REQUEST_TIMED_OUT
    assert message is not None and "is not ready to receive requests" in message
    assert quorum.voters() == {1: own}
    quorum.create_topic(_topic())
    # The cluster was created with its voters in the log: kraft.version 1.
    described = subprocess.run(
        [*kbroker_command(), "cluster", "features", "-o", "json"]
        + ["--bootstrap", quorum.broker.bootstrap],
        env=broker_environment(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert described.returncode == 0, described.stderr
    features = {f["feature"]: f for f in json.loads(described.stdout)["features"]}
    kraft = features["kraft.version"]
    assert (kraft["finalized"], kraft["supported_min"], kraft["supported_max"]) == (1, 0, 1)


def test_a_dead_controller_is_replaced_while_the_quorum_keeps_committing(
    quorum: DynamicQuorum,
) -> None:
    directories = {1: directory_id(quorum.broker)}
    for node_id in (2, 3):
        directories[node_id] = quorum.format(node_id, "--no-initial-controllers")
        quorum.node(node_id).start()
        eventually(
            lambda n=node_id: quorum.caught_up_observer(n, directories[n]),
            timeout=30.0,
            what=f"controller {node_id} replicating as an observer",
        )
        # An observer whose directory id is not the one asked for is not the new voter.
        assert quorum.add_voter(node_id, from_uuid(uuid.uuid4()))[0] == REQUEST_TIMED_OUT
        if node_id == 2:
            assert quorum.add_voter(node_id, directories[node_id]) == (0, None)
        else:  # the command line reads the controller's own settings and directory
            added = quorum.cli("add-controller", "--controller-config", str(quorum.properties(3)))
            assert added.returncode == 0, added.stderr
            assert f"Added controller 3 with directory id {directories[3]}" in added.stdout
        quorum.create_topic(_topic())
    assert quorum.voters() == directories
    assert quorum.add_voter(2, directories[2])[0] == DUPLICATE_VOTER

    # Controller 3 dies for good: two of three voters still commit.
    quorum.node(3).kill()
    quorum.create_topic(_topic())

    # Its replacement, controller 4, joins as an observer and is added: four voters.
    directories[4] = quorum.format(4, "--no-initial-controllers")
    quorum.node(4).start()
    eventually(
        lambda: quorum.caught_up_observer(4, directories[4]),
        timeout=30.0,
        what="controller 4 replicating as an observer",
    )
    assert quorum.add_voter(4, directories[4]) == (0, None)
    quorum.create_topic(_topic())

    # The dead one is removed: back to three voters, two of them needed.
    assert quorum.remove_voter(3, directories[2])[0] == VOTER_NOT_FOUND  # wrong directory
    removed = quorum.cli(
        "remove-controller", "--controller-id=3", f"--controller-directory-id={directories[3]}"
    )
    assert removed.returncode == 0, removed.stderr
    del directories[3]
    again = quorum.cli(
        "remove-controller", "--controller-id=3", f"--controller-directory-id={directories[2]}"
    )
    assert again.returncode == 1 and "VOTER_NOT_FOUND" in again.stderr
    quorum.create_topic(_topic())
    assert quorum.voters() == directories
    quorum.node(2).kill()  # one of three voters down: the other two commit
    quorum.create_topic(_topic())
    quorum.node(2).start()

    # The active controller itself is removed: it hands its leadership over first, then
    # follows as an observer, and is added back once caught up.
    leader = quorum.quorum().leader_id
    assert quorum.remove_voter(leader, directories[leader]) == (0, None)
    assert set(quorum.voters()) == set(directories) - {leader}
    quorum.create_topic(_topic())
    eventually(
        lambda: quorum.caught_up_observer(leader, directories[leader]),
        timeout=30.0,
        what=f"the removed controller {leader} replicating as an observer",
    )
    assert quorum.add_voter(leader, directories[leader]) == (0, None)
    assert quorum.voters() == directories
    quorum.create_topic(_topic())


def test_a_wiped_voter_comes_back_as_an_observer_and_loses_nothing(
    quorum: DynamicQuorum,
) -> None:
    """Voters 1, 2 and 4. With 4 down, a topic is committed by 1 and 2. Then 1 and 2 stop,
    2's metadata directory is wiped and it comes back (formatted again, a new directory
    id) beside 4, which lacks the topic. A quorum that trusted the empty 2 would elect 4
    and drop the topic; here 2 is an observer, 4 cannot win alone, and once 1 is back
    the topic is there."""
    assert set(quorum.voters()) == {1, 2, 4}
    old_directory = directory_id(quorum.node(2))
    quorum.node(4).kill()
    acknowledged = _topic()
    quorum.create_topic(acknowledged)

    quorum.node(1).kill()
    quorum.node(2).kill()
    shutil.rmtree(quorum.node(2).data_dir)
    quorum.node(2).data_dir.mkdir()
    new_directory = quorum.format(2, "--no-initial-controllers")
    assert new_directory != old_directory
    quorum.node(2).spawn()
    quorum.node(4).spawn()
    # 4 and the wiped 2 run together, and 4 gets nothing committed: 2 does not vote.
    eventually(
        lambda: NO_QUORUM_LINE in quorum.node(4).log_text().rsplit("===== start #", 1)[-1],
        timeout=30.0,
        what="controller 4 to report it has no quorum",
    )
    assert "is no voter of the metadata quorum" not in quorum.node(4).log_text()

    quorum.node(1).start()
    # Their starts finish once node 1 is back (counted from their spawn, long before).
    quorum.node(4).wait_ready(timeout=180.0)
    quorum.node(2).wait_ready(timeout=180.0)
    assert acknowledged in quorum.topics()
    # Restarted, node 1 holds only what its log holds: a node that had to cut its log
    # would still show the topic from the state it applied before the cut.
    quorum.node(1).kill()
    quorum.node(1).start()
    assert acknowledged in quorum.topics()
    # The voter set still names 2 by its old directory; the wiped 2 is an observer.
    assert quorum.voters()[2] == old_directory
    eventually(
        lambda: quorum.caught_up_observer(2, new_directory),
        timeout=30.0,
        what="the wiped controller 2 replicating as an observer",
    )
    # It votes again once its old self is removed and it is added back.
    assert quorum.remove_voter(2, old_directory) == (0, None)
    assert quorum.add_voter(2, new_directory) == (0, None)
    assert quorum.voters()[2] == new_directory
    quorum.create_topic(_topic())
    quorum.node(4).kill()  # 1 and the re-added 2 commit without 4
    quorum.create_topic(_topic())


KAFKA_QUORUM_TOOL = "org.apache.kafka.tools.MetadataQuorumCommand"


@pytest.mark.skipif(kafka_unavailable() is not None, reason=str(kafka_unavailable()))
def test_kafkas_metadata_quorum_tool_removes_and_adds_a_controller(
    quorum: DynamicQuorum,
) -> None:
    """kafka-metadata-quorum.sh of Kafka 4.3: describe (directory ids and endpoints),
    remove-controller, then add-controller reading the controller's own properties."""
    voters = quorum.voters()
    assert set(voters) == {1, 2, 4} and not quorum.node(4).running()
    bootstrap = ("--bootstrap-server", quorum.broker.bootstrap)
    removed = run_tool_process(
        KAFKA_QUORUM_TOOL,
        *bootstrap,
        "remove-controller",
        "--controller-id=4",
        f"--controller-directory-id={voters[4]}",
    )
    removed.check()
    # (Kafka 4.3 prints two spaces after "Removed".)
    assert re.search(f"Removed +KRaft controller 4 with directory id {voters[4]}", removed.out)
    # Back with its old idea that it votes: the voters take it as an observer, it reads its
    # removal, and once caught up Kafka's tool adds it again.
    quorum.node(4).start()
    eventually(
        lambda: quorum.caught_up_observer(4, voters[4]),
        timeout=30.0,
        what="the removed controller 4 replicating as an observer",
    )
    added = run_tool_process(
        KAFKA_QUORUM_TOOL,
        *bootstrap,
        "--command-config",
        str(quorum.properties(4)),
        "add-controller",
    )
    added.check()
    assert f"Added controller 4 with directory id {voters[4]}" in added.out
    described = run_tool_process(KAFKA_QUORUM_TOOL, *bootstrap, "describe", "--status")
    described.check()
    for node_id in (1, 2, 4):
        assert f'"id": {node_id}, "directoryId": "{voters[node_id]}"' in described.out
    assert f"CONTROLLER://127.0.0.1:{quorum.controller_ports[4]}" in described.out
    quorum.create_topic(_topic())
