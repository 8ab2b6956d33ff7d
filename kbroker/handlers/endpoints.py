"""The address a client is told for a broker: the one of the listener it came in on.

A broker with several listeners (PLAINTEXT inside, SASL_SSL outside) publishes each
under its own name; as on Kafka, Metadata, FindCoordinator and DescribeCluster answer a
client with the endpoints of the listener its connection uses, so a client never gets
sent to a port whose security protocol it does not speak.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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
