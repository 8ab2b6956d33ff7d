"""KRaft's quorum settings: which node is a voter or an observer, and where Raft listens."""

import pytest

from kbroker.config import BrokerConfig, ConfigError

VOTERS = "1@127.0.0.1:19091,2@127.0.0.1:19092,3@127.0.0.1:19093"


def kraft(node_id: int, **extra: str) -> BrokerConfig:
    settings = {
        "node.id": str(node_id),
        "process.roles": "broker,controller",
        "listeners": f"PLAINTEXT://127.0.0.1:{9090 + node_id},CONTROLLER://127.0.0.1:{19090 + node_id}",
        "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": VOTERS,
        "cluster.secret": "s3cret",
    }
    settings.update({k.replace("_", "."): v for k, v in extra.items()})
    return BrokerConfig.from_settings({k: v for k, v in settings.items() if v != ""})


def test_no_voters_is_a_socketless_single_node():
    quorum = BrokerConfig.from_settings({}).quorum
    assert quorum.is_voter and not quorum.is_cluster
    assert quorum.bind_address is None and quorum.peer_addresses == ()


def test_kafka_quickstart_single_voter_opens_no_raft_socket():
    cfg = BrokerConfig.from_settings(
        {
            "process.roles": "broker,controller",
            "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
            "controller.listener.names": "CONTROLLER",
            "controller.quorum.voters": "1@localhost:9093",
        }
    )
    assert not cfg.quorum.is_cluster and cfg.quorum.controller_listener_unused


LONE = {
    "process_roles": "controller",
    "listeners": "CONTROLLER://127.0.0.1:19091",
    "controller_quorum_voters": "1@127.0.0.1:19091",
}


def test_a_lone_controller_only_voter_serves_its_raft_socket_for_brokers_to_observe():
    """kafkatest's isolated KRaft with one controller: brokers (process.roles=broker)
    name it in controller.quorum.voters and must reach it."""
    quorum = kraft(1, **LONE).quorum
    assert quorum.is_voter and not quorum.is_broker and quorum.is_cluster
    assert quorum.self_address == quorum.bind_address == "127.0.0.1:19091"
    assert quorum.peer_addresses == ()


def test_a_lone_combined_voter_given_a_cluster_secret_serves_its_raft_socket():
    quorum = kraft(1, controller_quorum_voters="1@127.0.0.1:19091").quorum
    assert quorum.is_cluster and quorum.self_address == "127.0.0.1:19091"
    assert not quorum.controller_listener_unused


def test_without_the_cluster_secret_a_lone_voter_opens_no_raft_socket():
    quorum = kraft(1, cluster_secret="", **LONE).quorum
    assert not quorum.is_cluster and quorum.controller_listener_unused


def test_voter_binds_its_controller_listener_and_dials_the_others():
    quorum = kraft(2).quorum
    assert quorum.is_voter and quorum.is_broker
    assert quorum.self_address == "127.0.0.1:19092"
    assert quorum.bind_address == "127.0.0.1:19092"
    assert quorum.peer_addresses == ("127.0.0.1:19091", "127.0.0.1:19093")
    assert quorum.voter_ids == (1, 2, 3)


def test_wildcard_controller_listener_binds_all_interfaces_under_its_voter_name():
    cfg = kraft(1, listeners="PLAINTEXT://:9092,CONTROLLER://:19091")
    assert cfg.quorum.bind_address == "0.0.0.0:19091"
    assert cfg.quorum.self_address == "127.0.0.1:19091"


def test_broker_only_node_observes_every_voter():
    cfg = kraft(4, process_roles="broker", listeners="PLAINTEXT://127.0.0.1:9094")
    assert not cfg.quorum.is_voter and cfg.quorum.is_cluster
    assert cfg.quorum.self_address is None and cfg.quorum.bind_address is None
    assert len(cfg.quorum.peer_addresses) == 3


def test_broker_only_node_may_name_the_controllers_by_bootstrap_servers():
    cfg = kraft(
        4,
        process_roles="broker",
        listeners="PLAINTEXT://127.0.0.1:9094",
        controller_quorum_voters="",
        controller_quorum_bootstrap_servers="127.0.0.1:19091,127.0.0.1:19092",
    )
    assert cfg.quorum.peer_addresses == ("127.0.0.1:19091", "127.0.0.1:19092")


def test_a_cluster_without_a_secret_is_refused_without_echoing_it():
    with pytest.raises(ConfigError, match="cluster.secret"):
        kraft(1, cluster_secret="")


def test_a_controller_missing_from_the_voters_is_refused():
    with pytest.raises(ConfigError, match="controller.quorum.voters"):
        kraft(5, listeners="PLAINTEXT://127.0.0.1:9095,CONTROLLER://127.0.0.1:19095")


def test_a_voter_without_the_controller_role_is_refused():
    with pytest.raises(ConfigError, match="process.roles lacks controller"):
        kraft(1, process_roles="broker", listeners="PLAINTEXT://127.0.0.1:9091")


def test_a_broker_only_node_may_not_listen_on_a_controller_listener():
    with pytest.raises(ConfigError, match="controller.listener.names"):
        kraft(4, process_roles="broker")


def test_a_controller_only_node_votes_and_serves_no_kafka_listener():
    cfg = kraft(1, process_roles="controller", listeners="CONTROLLER://127.0.0.1:19091")
    assert cfg.quorum.is_voter and not cfg.quorum.is_broker
    assert cfg.quorum.bind_address == "127.0.0.1:19091"
    assert cfg.broker_endpoints == ()


def test_a_controller_only_node_with_a_broker_listener_is_refused():
    with pytest.raises(ConfigError, match="controller-only"):
        kraft(1, process_roles="controller")


def test_cluster_peers_is_an_alias_of_the_voters():
    cfg = kraft(1, controller_quorum_voters="", cluster_peers=VOTERS)
    assert cfg.quorum.voter_ids == (1, 2, 3)
    with pytest.raises(ConfigError, match="cluster.peers"):
        kraft(1, cluster_peers="1@127.0.0.1:19091")


def test_a_cluster_takes_kafkas_internal_topic_replication_defaults():
    assert kraft(1).get("offsets.topic.replication.factor") == 3
    assert kraft(1).get("transaction.state.log.replication.factor") == 3
    assert BrokerConfig.from_settings({}).get("offsets.topic.replication.factor") == 1
    assert (
        kraft(1, offsets_topic_replication_factor="2").get("offsets.topic.replication.factor") == 2
    )


def test_kafka_4_shipped_server_properties_runs_as_a_standalone_single_node():
    cfg = BrokerConfig.from_settings(
        {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": "localhost:9093",
            "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093",
            "advertised.listeners": "PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        }
    )
    assert cfg.quorum.is_voter and not cfg.quorum.is_cluster
    assert cfg.quorum.bind_address is None
    assert [e.name for e in cfg.advertised_endpoints] == ["PLAINTEXT"]


def test_bootstrap_controllers_without_voters_make_a_controller_join_a_dynamic_quorum():
    quorum = kraft(
        1,
        controller_quorum_voters="",
        controller_quorum_bootstrap_servers="127.0.0.1:19091,127.0.0.1:19092",
    ).quorum
    assert quorum.dynamic and quorum.is_voter and quorum.is_cluster
    # Its Raft address is its CONTROLLER listener; the other bootstrap server is a peer.
    assert quorum.self_address == "127.0.0.1:19091"
    assert quorum.peer_addresses == ("127.0.0.1:19092",)


def test_a_controller_only_node_of_a_dynamic_quorum_needs_no_voters():
    quorum = kraft(
        3,
        process_roles="controller",
        listeners="CONTROLLER://127.0.0.1:19093",
        controller_quorum_voters="",
        controller_quorum_bootstrap_servers="127.0.0.1:19091",
    ).quorum
    assert quorum.dynamic and not quorum.is_broker
    assert quorum.peer_addresses == ("127.0.0.1:19091",)


def test_a_dynamic_quorum_needs_the_cluster_secret():
    with pytest.raises(ConfigError, match="cluster.secret"):
        kraft(
            1,
            cluster_secret="",
            controller_quorum_voters="",
            controller_quorum_bootstrap_servers="127.0.0.1:19091,127.0.0.1:19092",
        )


def test_a_heartbeat_interval_longer_than_the_session_is_refused():
    with pytest.raises(ConfigError, match="broker.heartbeat.interval.ms"):
        kraft(1, broker_heartbeat_interval_ms="10000", broker_session_timeout_ms="9000")
