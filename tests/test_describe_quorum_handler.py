"""DescribeQuorum's answers when it cannot describe the quorum: Kafka's error codes at
the level Kafka puts them (kbroker.handlers.quorum)."""

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest

from kbroker.controller.errors import NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT, ControllerError
from kbroker.handlers.registry import APIS
from kbroker.protocol.messages import build, load_request_schema
from kbroker.security.acl import StandardAuthorizer
from tests.handler_context import handler_context

DESCRIBE_QUORUM = 55
METADATA_PARTITION = [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]


@dataclass
class RefusingController:
    error: ControllerError
    asked: int = 0

    async def describe_quorum(self, timeout: float = 5.0) -> Any:
        self.asked += 1
        raise self.error


def describe(topics: list[dict[str, Any]], **parts: Any) -> dict[str, Any]:
    ctx = handler_context(DESCRIBE_QUORUM, 2, **parts)
    request = build(load_request_schema(DESCRIBE_QUORUM, 2), {"topics": topics})
    return asyncio.run(APIS[DESCRIBE_QUORUM].handler(ctx, request))


def test_no_reachable_leader_is_not_leader_or_follower_on_the_partition():
    controller = RefusingController(ControllerError(NOT_LEADER_OR_FOLLOWER, "no leader"))
    response = describe(METADATA_PARTITION, controller=controller)
    assert response["error_code"] == 0
    (topic,) = response["topics"]
    (partition,) = topic["partitions"]
    assert (topic["topic_name"], partition["error_code"]) == ("__cluster_metadata", 6)
    assert partition["leader_id"] == -1


def test_a_leader_that_does_not_answer_in_time_is_request_timed_out():
    controller = RefusingController(ControllerError(REQUEST_TIMED_OUT, "slow"))
    response = describe(METADATA_PARTITION, controller=controller)
    assert (response["error_code"], response["topics"]) == (7, [])


@pytest.mark.parametrize(
    "topics",
    [
        [{"topic_name": "orders", "partitions": [{"partition_index": 0}]}],
        [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 1}]}],
    ],
)
def test_any_partition_but_the_metadata_one_is_unknown(topics):
    controller = RefusingController(ControllerError(NOT_LEADER_OR_FOLLOWER, "unused"))
    response = describe(topics, controller=controller)
    assert response["error_code"] == 0
    assert [
        (t["topic_name"], [p["error_code"] for p in t["partitions"]]) for t in response["topics"]
    ] == [(topics[0]["topic_name"], [3])]
    assert controller.asked == 0


def test_describing_the_quorum_needs_describe_on_the_cluster():
    controller = RefusingController(ControllerError(NOT_LEADER_OR_FOLLOWER, "unused"))
    deny_all = StandardAuthorizer((), False, lambda: ())
    response = describe(METADATA_PARTITION, controller=controller, authorizer=deny_all)
    assert (response["error_code"], response["topics"], controller.asked) == (31, [], 0)
