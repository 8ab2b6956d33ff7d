"""Which topic may take a share group's dead-letter records (KIP-1191), checked in Kafka's
order with Kafka's messages."""

from __future__ import annotations

import pytest

from kbroker.share.dead_letters import GROUP_ENABLE, topic_problem

OPTED_IN = {GROUP_ENABLE: "true"}


def test_an_existing_topic_that_opted_in_under_the_prefix_takes_them() -> None:
    assert topic_problem("g", "dlq.orders", OPTED_IN, "dlq.", auto_create=False) is None


def test_a_missing_topic_is_fine_only_when_the_broker_may_create_it() -> None:
    assert topic_problem("g", "dlq.orders", None, "dlq.", auto_create=True) is None
    assert topic_problem("g", "dlq.orders", None, "dlq.", auto_create=False) == (
        "DLQ topic does not exist and auto create is disabled on cluster for share group: g, "
        "topic: dlq.orders."
    )


@pytest.mark.parametrize("configs", [{}, {GROUP_ENABLE: "false"}])
def test_an_existing_topic_without_the_opt_in_is_refused(configs: dict[str, str]) -> None:
    assert topic_problem("g", "dlq.orders", configs, "dlq.", auto_create=True) == (
        "DLQ is not enabled on configured DLQ topic for share group: g, topic: dlq.orders"
    )


def test_a_name_without_the_prefix_is_refused_unless_the_prefix_is_empty() -> None:
    assert topic_problem("g", "orders.dead", OPTED_IN, "dlq.", auto_create=True) == (
        "Configured DLQ topic name does not comply with the DLQ topic prefix in share group: "
        "g, topic: orders.dead, prefix: dlq."
    )
    assert topic_problem("g", "orders.dead", OPTED_IN, "", auto_create=False) is None


def test_an_internal_name_is_refused_before_the_prefix_is_looked_at() -> None:
    assert topic_problem("g", "__consumer_offsets", OPTED_IN, "", auto_create=True) == (
        "Configured DLQ topic name in share group: g cannot start with __, "
        "topic: __consumer_offsets."
    )
    assert topic_problem("g", "__x", None, "dlq.", auto_create=False).startswith(  # type: ignore[union-attr]
        "Configured DLQ topic name in share group: g cannot start with __"
    )


def test_the_opt_in_is_checked_before_the_prefix() -> None:
    problem = topic_problem("g", "orders.dead", {}, "dlq.", auto_create=False)
    assert problem is not None and problem.startswith("DLQ is not enabled")
