"""fetch.max.bytes bounds every Fetch response, whatever max_bytes the request asks for
(Kafka's min(request max_bytes, fetch.max.bytes)); the first batch still comes whole."""

from __future__ import annotations

from compat_tests.confluent_helpers import create_topic, produce_all, unique_topic
from compat_tests.conftest import BrokerFactory
from kbroker.admin.client import cluster, fetch_fields

FETCH = 1
LIMIT = 1024


def fetch_records(bootstrap: str, topic: str, max_bytes: int) -> bytes:
    with cluster(bootstrap) as c:
        response = c.any().call(
            FETCH,
            fetch_fields(topic, max_wait=0, min_bytes=1, max_bytes=max_bytes),
            versions=(4, 12),
        )
    answer = response.responses[0].partitions[0]
    assert answer.error_code == 0
    return bytes(answer.records or b"")


def test_a_fetch_returns_no_more_than_fetch_max_bytes(broker_factory: BrokerFactory) -> None:
    node = broker_factory.start_with({"fetch.max.bytes": str(LIMIT)})
    topic = unique_topic("fetch-max")
    create_topic(node.bootstrap, topic)
    produce_all(
        node.bootstrap,
        topic,
        ({"value": b"%03d" % i * 100} for i in range(20)),
        **{"batch.num.messages": 1, "linger.ms": 0},
    )
    data = fetch_records(node.bootstrap, topic, 1 << 20)
    assert 0 < len(data) <= LIMIT

    # a batch larger than the bound still comes, alone, so the consumer can progress
    big = unique_topic("fetch-max-big")
    create_topic(node.bootstrap, big)
    produce_all(node.bootstrap, big, [{"value": b"x" * (3 * LIMIT)}])
    assert len(fetch_records(node.bootstrap, big, 1 << 20)) > LIMIT
