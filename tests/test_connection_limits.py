"""ConnectionLimits: the broker-wide, per-address and per-listener connection caps."""

from __future__ import annotations

from kbroker.server.connection_limits import ConnectionLimits


def test_a_listeners_cap_refuses_only_that_listeners_connections():
    limits = ConnectionLimits(10, 10, per_listener={"CLIENT": 2})
    assert limits.admit("127.0.0.1", "CLIENT") is None
    assert limits.admit("127.0.0.2", "CLIENT") is None
    refused = limits.admit("127.0.0.3", "CLIENT")
    assert refused == "listener CLIENT has 2 connections (listener.name.client.max.connections=2)"
    assert limits.admit("127.0.0.3", "PLAINTEXT") is None
    assert limits.total == 3
    limits.release("127.0.0.1", "CLIENT")
    assert limits.admit("127.0.0.3", "CLIENT") is None


def test_the_protected_listener_is_capped_by_its_own_limit_but_not_the_broker_wide_one():
    limits = ConnectionLimits(
        1, 10, exempt_listeners=frozenset({"PLAINTEXT"}), per_listener={"PLAINTEXT": 2}
    )
    assert limits.admit("127.0.0.1", "CLIENT") is None
    assert limits.admit("127.0.0.1", "CLIENT") is not None
    assert limits.admit("127.0.0.1", "PLAINTEXT") is None
    assert limits.admit("127.0.0.1", "PLAINTEXT") is None
    assert "listener.name.plaintext.max.connections=2" in str(
        limits.admit("127.0.0.1", "PLAINTEXT")
    )
