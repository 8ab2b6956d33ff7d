"""The address a client is told for a broker: the one of the listener it came in on.

A broker with several listeners (PLAINTEXT inside, SASL_SSL outside) publishes each
under its own name; as on Kafka, Metadata, FindCoordinator and DescribeCluster answer a
client with the endpoints of the listener its connection uses, so a client never gets
sent to a port whose security protocol it does not speak.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kbroker.protocol.fetch_response import NodeEndpoint

if TYPE_CHECKING:
    from kbroker.controller.state import BrokerInfo
    from kbroker.handlers.context import RequestContext


def node_address(ctx: RequestContext, node: BrokerInfo) -> tuple[str, int]:
    """(host, port) of ``node`` (a BrokerInfo) for the client behind ``ctx``."""
    broker = ctx.broker
    if node.node_id == broker.node_id:
        endpoint = broker.config.advertised_endpoint(ctx.listener_name)
        if endpoint is not None:
            return endpoint.host, endpoint.port
    # Every broker registers all its advertised listeners with the controller.
    address = node.endpoint(ctx.listener_name)
    return address if address is not None else (node.host, node.port)


def current_leader(ctx: RequestContext, topic: str, index: int) -> tuple[int, int] | None:
    """(leader id, leader epoch) of a partition as the metadata says, for the
    NOT_LEADER_OR_FOLLOWER answers that carry it (KIP-951); None while it has none."""
    info = ctx.broker.controller.state.partition(topic, index)
    if info is None or info.leader < 0:
        return None
    return info.leader, info.leader_epoch


def leader_endpoints(ctx: RequestContext, leaders: set[int]) -> list[NodeEndpoint]:
    """The NodeEndpoints of the brokers an answer names as current leaders."""
    brokers = ctx.broker.controller.state.brokers
    return [
        NodeEndpoint(node.node_id, *node_address(ctx, node), node.rack)
        for node_id in sorted(leaders)
        if (node := brokers.get(node_id)) is not None
    ]
