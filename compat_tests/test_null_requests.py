"""Every served API version, sent valid but with one field null or one length lying.

A null in a field the schema declares non-nullable is a malformed request (closed with
one WARNING line, as Kafka fails it); a null where the schema allows one is an
ordinary request and gets an answer; a length past the end of the request is
malformed. None of them may reach a handler as a None it does not expect: the broker
logs no ERROR line and no traceback, and keeps serving.
"""

from __future__ import annotations

import pytest

from compat_tests.broker_process import BrokerProcess, api_versions_round_trip
from compat_tests.null_requests import variants
from kbroker.admin.client import BrokerConnection, ClientError
from kbroker.protocol import messages

pytestmark = pytest.mark.timeout(300)

ANSWER_WAIT_S = 1.0  # a request that parks (a join waiting for its group) is let go


def test_nulls_and_lying_lengths_get_an_answer_or_a_clean_close(
    shared_broker: BrokerProcess,
) -> None:
    broker = shared_broker
    sent = closed = answered = 0
    for key, (low, high) in sorted(broker.api_versions.items()):
        for version in range(low, high + 1):
            if version not in messages.known_versions(key):
                continue  # Produce v0-2: no schema to build from (decoded by hand)
            for variant in variants(key, version):
                conn = BrokerConnection(broker.host, broker.port, ANSWER_WAIT_S, "nulls")
                try:
                    frame = conn.request_bytes(key, version, variant.data, 7)
                    conn.send(frame)
                    sent += 1
                    try:
                        conn.read_frame()
                        answered += 1
                    except (ClientError, ConnectionError):
                        closed += 1
                    except TimeoutError:
                        pass
                finally:
                    conn.close()
    assert sent > 500 and closed > 0 and answered > 0, (sent, closed, answered)
    assert broker.running(), broker.log_tail(60)
    api_versions_round_trip(broker.host, broker.port, timeout=10.0)
    log = broker.log_text()
    errors = [line for line in log.splitlines() if " ERROR " in line or "Traceback" in line]
    assert not errors, "\n".join(errors[:20])
