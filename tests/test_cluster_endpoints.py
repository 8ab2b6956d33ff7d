"""A client is told every broker's address on the listener it came in on."""

from dataclasses import dataclass

from kbroker.controller import commands as cmd
from kbroker.controller.commands import apply_command
from kbroker.controller.state import MetadataState, state_from_plain, state_to_plain
from kbroker.handlers.registry import APIS
from kbroker.protocol.messages import build, load_request_schema
from tests.handler_context import handler_context

METADATA = 3


def registered(*nodes: int) -> MetadataState:
    state = MetadataState(cluster_id="c", controller_id=1)
    for n in nodes:
        state = apply_command(
            state,
            cmd.REGISTER_BROKER,
            {
                "node_id": n,
                "host": f"kb{n}",
                "port": 9092,
                "timestamp_ms": 0,
                "endpoints": [["PLAINTEXT", f"kb{n}", 9092], ["EXTERNAL", "localhost", 19090 + n]],
            },
        ).state
    return state


@dataclass
class StateOnly:
    state: MetadataState


@dataclass
class HealthyDisks:
    failed: frozenset[str] = frozenset()


@dataclass
class NoQuotas:
    active: bool = False


def test_registration_keeps_every_advertised_listener_through_a_snapshot():
    info = state_from_plain(state_to_plain(registered(1))).brokers[1]
    assert info.endpoint("EXTERNAL") == ("localhost", 19091)
    assert info.endpoint("PLAINTEXT") == ("kb1", 9092)
    assert info.endpoint("SSL") is None


def test_metadata_answers_with_the_addresses_of_the_clients_listener():
    ctx = handler_context(
        METADATA,
        12,
        node_id=99,
        controller=StateOnly(registered(1, 2)),
        durability=HealthyDisks(),
        quotas=NoQuotas(),
    )
    ctx.connection.listener_name = "EXTERNAL"
    request = build(load_request_schema(METADATA, 12), {"topics": None})
    response = APIS[METADATA].handler(ctx, request)
    brokers = {b["node_id"]: (b["host"], b["port"]) for b in response["brokers"]}
    assert brokers == {1: ("localhost", 19091), 2: ("localhost", 19092)}


def test_metadata_leaves_out_a_broker_without_the_clients_listener():
    state = registered(1, 2)
    lone = apply_command(
        state,
        cmd.REGISTER_BROKER,
        {
            "node_id": 3,
            "host": "kb3",
            "port": 9092,
            "timestamp_ms": 0,
            "endpoints": [["PLAINTEXT", "kb3", 9092]],
        },
    ).state
    ctx = handler_context(
        METADATA,
        12,
        node_id=99,
        controller=StateOnly(lone),
        durability=HealthyDisks(),
        quotas=NoQuotas(),
    )
    ctx.connection.listener_name = "EXTERNAL"
    request = build(load_request_schema(METADATA, 12), {"topics": None})
    response = APIS[METADATA].handler(ctx, request)
    assert sorted(b["node_id"] for b in response["brokers"]) == [1, 2]
