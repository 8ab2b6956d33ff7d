"""broker.rack is published in Metadata, where rack-aware clients (KIP-392 fetch from
follower, KIP-881 rack-aware assignment) read it."""

from __future__ import annotations

from compat_tests.broker_process import BrokerProcess
from compat_tests.conftest import BrokerFactory
from kbroker.admin.client import cluster
from kbroker.admin.topics import metadata


def test_metadata_reports_the_brokers_rack(broker_factory: BrokerFactory) -> None:
    node = broker_factory.start_with({"broker.rack": "rack-a"})
    with cluster(node.bootstrap) as c:
        (only,) = metadata(c).brokers
    assert only.rack == "rack-a"


def test_metadata_reports_no_rack_when_none_is_set(shared_broker: BrokerProcess) -> None:
    with cluster(shared_broker.bootstrap) as c:
        (only,) = metadata(c).brokers
    assert only.rack is None
