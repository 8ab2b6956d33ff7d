"""max.connections, max.connections.per.ip and its overrides, against a real broker.

Connections come from different loopback source addresses (127.0.0.x), so one broker
sees several client IPs. A connection over a limit is closed when accepted: its first
request is never answered. Closing a connection frees its slot. The listener's backlog
is socket.listen.backlog.size. Between two tests the broker's kbroker_connections gauge
shows when it has seen every connection of the last one go.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from compat_tests.broker_process import BrokerProcess, free_port, running_broker
from compat_tests.metrics_scrape import scrape, value
from compat_tests.waiting import eventually
from kbroker.protocol.client_frames import request_frame

API_VERSIONS_V0 = request_frame(18, 0, 7, "limits", b"")


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    settings = {
        "max.connections": "4",
        "max.connections.per.ip": "2",
        "max.connections.per.ip.overrides": "127.0.0.2:3",
        "socket.listen.backlog.size": "7",
        "http.listeners": f"http://127.0.0.1:{free_port()}",
    }
    with running_broker(tmp_path_factory.mktemp("limits"), settings) as node:
        yield node


def connect(broker: BrokerProcess, source_ip: str) -> socket.socket:
    sock = socket.create_connection(
        (broker.host, broker.port), timeout=5, source_address=(source_ip, 0)
    )
    return sock


def answers(sock: socket.socket) -> bool:
    """Whether the broker answers ApiVersions on ``sock`` (False: it closed it)."""
    try:
        sock.sendall(API_VERSIONS_V0)
        return len(sock.recv(4)) == 4
    except (ConnectionResetError, BrokenPipeError):
        return False


def open_connections(broker: BrokerProcess) -> int:
    http = broker.overrides["http.listeners"].removeprefix("http://")
    return int(value(scrape(http), "kbroker_connections"))


def gone(broker: BrokerProcess, left: int = 0) -> None:
    """Wait until the broker has seen every connection but `left` go."""
    eventually(
        lambda: open_connections(broker) == left,
        timeout=15,
        what=f"the broker to see its connections go ({left} left)",
    )


@contextlib.contextmanager
def opened(broker: BrokerProcess, *source_ips: str) -> Iterator[list[socket.socket]]:
    before = open_connections(broker)
    socks = [connect(broker, ip) for ip in source_ips]
    try:
        yield socks
    finally:
        for sock in socks:
            sock.close()
        gone(broker, before)  # before the next test or block counts


def test_a_connection_beyond_max_connections_per_ip_is_closed(limited: BrokerProcess) -> None:
    with opened(limited, "127.0.0.1", "127.0.0.1") as socks:
        assert all(answers(s) for s in socks)
        with opened(limited, "127.0.0.1") as (third,):
            assert not answers(third)
        with opened(limited, "127.0.0.3") as (other_ip,):
            assert answers(other_ip)


def test_an_override_raises_one_addresses_limit(limited: BrokerProcess) -> None:
    with opened(limited, "127.0.0.2", "127.0.0.2", "127.0.0.2") as socks:
        assert all(answers(s) for s in socks)
        with opened(limited, "127.0.0.2") as (fourth,):
            assert not answers(fourth)


def test_a_connection_beyond_max_connections_is_closed(limited: BrokerProcess) -> None:
    with opened(limited, "127.0.0.1", "127.0.0.1", "127.0.0.3", "127.0.0.3") as socks:
        assert all(answers(s) for s in socks)
        with opened(limited, "127.0.0.4") as (fifth,):
            assert not answers(fifth)


def test_a_closed_connection_frees_its_slot(limited: BrokerProcess) -> None:
    with opened(limited, "127.0.0.1", "127.0.0.1") as socks:
        assert all(answers(s) for s in socks)
        socks.pop().close()
        gone(limited, 1)
        with opened(limited, "127.0.0.1") as (again,):
            assert answers(again)


def test_a_refused_connection_is_logged_once_naming_the_setting(limited: BrokerProcess) -> None:
    before = limited.log_text().count("max.connections.per.ip=2")
    with opened(limited, "127.0.0.5", "127.0.0.5", "127.0.0.5") as socks:
        assert [answers(s) for s in socks] == [True, True, False]
    assert limited.log_text().count("max.connections.per.ip=2") == before + 1


def test_the_listener_backlog_is_socket_listen_backlog_size(limited: BrokerProcess) -> None:
    """With the broker stopped (SIGSTOP) nothing is accepted: the kernel queues backlog + 1
    handshakes (Linux) and leaves later ones unanswered."""
    os.kill(limited.pid, signal.SIGSTOP)
    socks: list[socket.socket] = []
    try:
        for _ in range(12):
            try:
                socks.append(socket.create_connection((limited.host, limited.port), timeout=0.3))
            except OSError:
                break
    finally:
        os.kill(limited.pid, signal.SIGCONT)
        for sock in socks:
            sock.close()
        gone(limited)
    assert len(socks) == 7 + 1


@pytest.fixture(scope="module")
def two_listeners(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, int]]:
    """PLAINTEXT (inter-broker) and CLIENT, with CLIENT capped at two connections; yields
    the broker and CLIENT's port."""
    port, client_port = free_port(), free_port()
    listeners = f"PLAINTEXT://127.0.0.1:{port},CLIENT://127.0.0.1:{client_port}"
    settings = {
        "listeners": listeners,
        "advertised.listeners": listeners,
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CLIENT:PLAINTEXT",
        "listener.name.client.max.connections": "2",
        "http.listeners": f"http://127.0.0.1:{free_port()}",
    }
    node = BrokerProcess(tmp_path_factory.mktemp("listener-limits"), settings, port=port)
    try:
        node.start()
        yield node, client_port
    finally:
        node.kill()


def connect_to(broker: BrokerProcess, port: int) -> socket.socket:
    return socket.create_connection((broker.host, port), timeout=5)


def alter_own(broker: BrokerProcess, name: str, value: str) -> None:
    """IncrementalAlterConfigs SET of one setting on the broker's own resource, then wait
    until DescribeConfigs shows it applied."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    node_id = str(next(iter(admin.list_topics(timeout=10).brokers)))
    entry = ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.BROKER, node_id, incremental_configs=[entry])
    admin.incremental_alter_configs([resource])[resource].result(20)

    def applied() -> bool:
        described = admin.describe_configs([ConfigResource(ResourceType.BROKER, node_id)])
        return next(iter(described.values())).result(20)[name].value == value

    eventually(applied, timeout=20, what=f"the broker to apply {name}={value}")


@contextlib.contextmanager
def opened_on(broker: BrokerProcess, port: int, count: int) -> Iterator[list[socket.socket]]:
    before = open_connections(broker)
    socks = [connect_to(broker, port) for _ in range(count)]
    try:
        yield socks
    finally:
        for sock in socks:
            sock.close()
        gone(broker, before)


def test_a_listeners_max_connections_closes_the_extra_connection_on_that_listener_only(
    two_listeners: tuple[BrokerProcess, int],
) -> None:
    broker, client_port = two_listeners
    with opened_on(broker, client_port, 3) as socks:
        assert [answers(s) for s in socks] == [True, True, False]
        with opened_on(broker, broker.port, 3) as others:
            assert all(answers(s) for s in others)
    assert "listener.name.client.max.connections=2" in broker.log_text()


def test_a_listeners_max_connections_changes_dynamically(
    two_listeners: tuple[BrokerProcess, int],
) -> None:
    broker, client_port = two_listeners
    alter_own(broker, "listener.name.client.max.connections", "3")
    try:
        with opened_on(broker, client_port, 4) as socks:
            assert [answers(s) for s in socks] == [True, True, True, False]
        alter_own(broker, "listener.name.client.max.connections", "1")
        with opened_on(broker, client_port, 2) as socks:
            assert [answers(s) for s in socks] == [True, False]
    finally:
        alter_own(broker, "listener.name.client.max.connections", "2")
