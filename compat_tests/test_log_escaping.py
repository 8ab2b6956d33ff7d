"""Client-chosen text cannot forge broker log lines.

A client id and a group id holding a newline followed by something shaped like a log
line are sent in a JoinGroup (a classic group, which the broker logs by id as it forms
and as its member leaves). The broker's log shows them escaped inside its own lines; no
line of the log starts with the forged text.
"""

from __future__ import annotations

from typing import Any

from compat_tests.broker_process import BrokerProcess
from compat_tests.conftest import BrokerFactory
from compat_tests.waiting import eventually
from kbroker.admin.client import BrokerConnection

FIND_COORDINATOR, JOIN_GROUP, LEAVE_GROUP = 10, 11, 13
FORGED = "2026-01-01 00:00:00,000 ERROR kbroker.fake: FORGED LOG LINE"


def join_and_leave(broker: BrokerProcess, group: str, client_id: str) -> None:
    with BrokerConnection(broker.host, broker.port, 10.0, client_id) as conn:

        def join() -> Any:  # the offsets topic is created and loaded on the first lookup
            conn.request(FIND_COORDINATOR, 3, key=group, key_type=0)
            joined = conn.request(
                JOIN_GROUP,
                3,
                group_id=group,
                session_timeout=10000,
                rebalance_timeout=10000,
                member_id="",
                protocol_type="consumer",
                protocols=[{"name": "range", "metadata": b""}],
            )
            assert joined.error_code == 0, joined  # the failure shows the last answer
            return joined

        joined = eventually(join, timeout=20, what="the group joined")
        left = conn.request(LEAVE_GROUP, 2, group_id=group, member_id=joined.member_id)
        assert left.error_code == 0, left


def test_a_forged_newline_in_client_and_group_ids_never_starts_a_log_line(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory.start(group_initial_rebalance_delay_ms=0)
    join_and_leave(broker, f"group\n{FORGED}\x1b[2J", f"client\r\n{FORGED}\x00")
    eventually(lambda: "member" in broker.log_text(), timeout=5, what="the member logged")
    lines = broker.log_text().splitlines()
    mentioning = [line for line in lines if "FORGED" in line]
    assert mentioning, broker.log_tail(30)  # the ids were logged, escaped
    assert not [line for line in lines if line.startswith(FORGED[:24])], broker.log_tail(30)
    assert all("\\x0a" in line for line in mentioning)
    assert not any("\x1b" in line or "\x00" in line or "\r" in line for line in lines)
