"""Every acks setting a producer may choose gets its records delivered and stored."""

from __future__ import annotations

import pytest

from compat_tests.confluent_helpers import consume, create_topic, produce_all, unique_topic

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_produce_with_acks_delivers_every_record(shared_broker, acks):
    topic = unique_topic(f"acks-{acks}")
    create_topic(shared_broker.bootstrap, topic)
    values = [f"acks-{acks}-{i}".encode() for i in range(500)]
    log = produce_all(
        shared_broker.bootstrap,
        topic,
        ({"value": v, "partition": 0} for v in values),
        acks=acks,
    )
    assert len(log.delivered) == len(values)
    if acks != "0":
        # With acks=0 the broker sends no response, so there is no offset to report.
        assert [offset for _, offset, _ in log.delivered] == list(range(len(values)))
    records = consume(shared_broker.bootstrap, topic, len(values))
    assert [r.value for r in records] == values
