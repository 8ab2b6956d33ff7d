"""Admin API handlers against small fakes of the controller and the replica manager.

Every call goes through kio: the request is built as the client's version would carry
it, and the handler's answer is encoded and decoded again, so a field a version lacks
or a wrong type fails here rather than on a client.
"""

from __future__ import annotations

import asyncio
import inspect
import io
import logging
import sys
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from handler_context import handler_context
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from kbroker.config import BrokerConfig, ConfigSource
from kbroker.controller import ControllerError
from kbroker.controller import commands as cmd
from kbroker.controller.commands import apply_command
from kbroker.controller.errors import UNKNOWN_TOPIC_ID
from kbroker.controller.state import BrokerInfo, MetadataState, PartitionInfo, TopicInfo
from kbroker.handlers.configs import BROKER, BROKER_LOGGER, GROUP, TOPIC, apply_incremental
from kbroker.handlers.registry import APIS
from kbroker.protocol.batch import encode_batch
from kbroker.protocol.messages import build, build_response, encode, response_type
from kbroker.storage.config import LogConfig
from kbroker.storage.log_move import LogMove
from kbroker.storage.manager import LogManager

CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37
DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 33, 44
DESCRIBE_CLUSTER, DESCRIBE_LOG_DIRS, DESCRIBE_TOPIC_PARTITIONS = 60, 35, 75
ALTER_REPLICA_LOG_DIRS = 34
DELETE_RECORDS = 21
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


# -- fakes ---------------------------------------------------------------------------------


class FakeController:
    """Just enough of kbroker.controller.Controller: state snapshots and recorded calls."""

    def __init__(self, brokers: tuple[int, ...] = (1,)) -> None:
        self.state = MetadataState(
            cluster_id="test-cluster",
            controller_id=brokers[0],
            brokers={b: BrokerInfo(b, "localhost", 9091 + b) for b in brokers},
        )
        self.calls: list[tuple[Any, ...]] = []
        self.catch_ups = 0
        self.delay = 0.0
        self.fail_with: Exception | None = None
        self.fail_topic: dict[str, Exception] = {}

    def add_topic(
        self, name: str, partitions: int = 1, configs: dict[str, str] | None = None, **kw: Any
    ) -> TopicInfo:
        replicas = kw.get("replicas", (1,))
        parts = tuple(
            PartitionInfo(p, replicas[0], tuple(replicas), tuple(replicas), kw.get("epoch", 0))
            for p in range(partitions)
        )
        return self._publish(TopicInfo(name, uuid.uuid4(), parts, dict(configs or {})))

    def _publish(self, info: TopicInfo) -> TopicInfo:
        topics = {**self.state.topics, info.name: info}
        self.state = replace(
            self.state, topics=topics, topics_by_id={t.topic_id: t for t in topics.values()}
        )
        return info

    def _drop(self, name: str) -> None:
        topics = {n: t for n, t in self.state.topics.items() if n != name}
        self.state = replace(
            self.state, topics=topics, topics_by_id={t.topic_id: t for t in topics.values()}
        )

    async def _work(self, *call: Any) -> None:
        self.calls.append(call)
        if self.delay:
            await asyncio.sleep(self.delay)  # a slow controller, on purpose
        if self.fail_with is not None:
            raise self.fail_with

    async def create_topic(
        self, name, num_partitions, replication_factor, configs, assignments=None,
        validate_only=False,
    ):  # fmt: skip
        await self._work(
            "create_topic", name, num_partitions, replication_factor, configs, assignments,
            validate_only,
        )  # fmt: skip
        if name in self.fail_topic:
            raise self.fail_topic[name]
        if assignments:
            parts = tuple(
                PartitionInfo(p, r[0], tuple(r), tuple(r)) for p, r in sorted(assignments.items())
            )
        else:
            parts = tuple(
                PartitionInfo(p, 1, (1,) * replication_factor, (1,) * replication_factor)
                for p in range(num_partitions)
            )
        info = TopicInfo(name, uuid.uuid4(), parts, dict(configs))
        return info if validate_only else self._publish(info)

    async def set_group_configs(self, group_id, configs):
        """The real ALTER_GROUP_CONFIGS command applied to this fake's state."""
        await self._work("set_group_configs", group_id, dict(configs))
        body = {
            "group": group_id,
            "set": {k: v for k, v in configs.items() if v is not None},
            "delete": [k for k, v in configs.items() if v is None],
        }
        self.state = apply_command(self.state, cmd.ALTER_GROUP_CONFIGS, body).state

    async def elect_leaders(self, election_type, partitions):
        """The real ELECT_LEADERS command applied to this fake's state."""
        await self._work("elect_leaders", election_type, partitions)
        every = partitions is None
        if every:
            partitions = [(t.name, p.partition) for t in self.state.topics.values()
                          for p in t.partitions]  # fmt: skip
        applied = apply_command(
            self.state,
            cmd.ELECT_LEADERS,
            {"election_type": election_type, "partitions": [list(p) for p in partitions]},
        )
        self.state = applied.state
        return [tuple(r) for r in applied.outcome if not every or r[2] != 84]

    async def catch_up(self) -> None:
        """A read barrier, not a change: counted apart from the changes in `calls`."""
        self.catch_ups += 1

    async def alter_partition_reassignments(self, partitions, allow_replication_factor_change=True):
        """The real ALTER_PARTITION_REASSIGNMENTS command applied to this fake's state."""
        await self._work("alter_partition_reassignments", partitions)
        applied = apply_command(
            self.state,
            cmd.ALTER_PARTITION_REASSIGNMENTS,
            {
                "partitions": [[t, i, r] for t, i, r in partitions],
                "allow_replication_factor_change": allow_replication_factor_change,
            },
        )
        self.state = applied.state
        return [tuple(r) for r in applied.outcome]

    async def delete_topic_by_id(self, topic_id: uuid.UUID) -> str:
        await self._work("delete_topic_by_id", topic_id)
        info = self.state.topics_by_id.get(topic_id)
        if info is None:
            raise ControllerError(UNKNOWN_TOPIC_ID, "unknown")
        self._drop(info.name)
        return info.name

    async def create_partitions(self, name, new_total, assignments=None, validate_only=False):
        await self._work("create_partitions", name, new_total, assignments, validate_only)
        info = self.state.topics[name]
        added = tuple(
            PartitionInfo(p, 1, (1,), (1,)) for p in range(len(info.partitions), new_total)
        )
        if not validate_only:
            self._publish(replace(info, partitions=info.partitions + added))

    async def set_topic_configs(self, name, configs, validate_only=False):
        await self._work("set_topic_configs", name, dict(configs), validate_only)
        if not validate_only:
            info = self.state.topics[name]
            merged = {**info.configs, **{k: v for k, v in configs.items() if v is not None}}
            merged = {k: v for k, v in merged.items() if configs.get(k, "") is not None}
            self._publish(replace(info, configs=merged))

    async def replace_topic_configs(self, name, configs, validate_only=False):
        await self._work("replace_topic_configs", name, dict(configs), validate_only)
        if not validate_only:
            self._publish(replace(self.state.topics[name], configs=dict(configs)))


@dataclass
class FakeLog:
    directory: Path
    high_watermark: int = 0
    log_start_offset: int = 0
    log_end_offset: int = 0
    size: int = 0
    config: LogConfig = field(default_factory=LogConfig)

    def size_bytes(self) -> int:
        return self.size

    def delete_records_before(self, offset: int) -> int:
        self.log_start_offset = max(self.log_start_offset, offset)
        return self.log_start_offset


@dataclass
class FakeReplica:
    topic: str
    index: int
    log: FakeLog
    leader_epoch: int = 0
    is_leader: bool = True

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    def await_log_start(self, offset: int, live: Any, callback: Any) -> int:
        return self.log.log_start_offset  # no followers: the low watermark is its own


class FakeReplicas:
    def __init__(self) -> None:
        self.hosted: dict[tuple[str, int], FakeReplica] = {}

    def get(self, topic: str, partition: int) -> FakeReplica | None:
        return self.hosted.get((topic, partition))


class FakeBroker:
    def __init__(self, tmp_path: Path, settings: dict[str, str] | None = None, **kw: Any):
        self.node_id = 1
        self.config = BrokerConfig.from_settings({"node.id": "1", **(settings or {})})
        self.controller = FakeController(**kw)
        self.replicas = FakeReplicas()
        self.log_dirs = [tmp_path / "logs-a", tmp_path / "logs-b"]
        for d in self.log_dirs:
            d.mkdir()
        self.storage = LogManager(self.log_dirs)

    stopping = False

    def dynamic_config_for(self, cluster_default: dict[str, Any], own: dict[str, Any]) -> Any:
        return self.config.with_dynamic(cluster_default, own)

    async def partitions_opened(self, topic: str) -> dict[int, str]:
        return {}  # the fake controller's topics need no logs

    def add_replica(self, topic: str, partition: int, dir_index: int = 0, **log: Any) -> FakeLog:
        plog = FakeLog(self.log_dirs[dir_index] / f"{topic}-{partition}", **log)
        plog.directory.mkdir()
        self.replicas.hosted[(topic, partition)] = FakeReplica(topic, partition, plog)
        return plog


def call(broker: FakeBroker, key: int, version: int, **request: Any) -> Any:
    """Run the handler for API `key` and return the response as a client would decode it."""
    req = build(load_request_schema(key, version), request)
    result = APIS[key].handler(
        handler_context(
            key,
            version,
            node_id=broker.node_id,
            config=broker.config,
            log_dirs=broker.log_dirs,
            storage=broker.storage,
            controller=broker.controller,
            security=broker.controller,
            partitions=broker.replicas,
            lifecycle=broker,
        ),
        req,
    )
    if inspect.isawaitable(result):

        async def wait() -> Any:
            return await result

        result = asyncio.run(wait())
    body = encode(build_response(key, version, result))
    decoded, size = entity_reader(response_type(key, version))(body, 0)
    assert size == len(body)
    return decoded


def request_entity(key: int, version: int, name: str, **fields: Any) -> Any:
    """A nested request struct of API `key`, for fields `build` leaves as given (nullable
    arrays of structs)."""
    module = sys.modules[load_request_schema(key, version).__module__]
    return build(getattr(module, name), fields)


@pytest.fixture
def broker(tmp_path: Path) -> FakeBroker:
    return FakeBroker(tmp_path, {"num.partitions": "3"})


def topic_req(name: str, partitions: int = -1, rf: int = -1, **kw: Any) -> dict[str, Any]:
    return {"name": name, "num_partitions": partitions, "replication_factor": rf, **kw}


# -- CreateTopics --------------------------------------------------------------------------


def test_create_topics_uses_broker_defaults_for_minus_one(broker):
    resp = call(broker, CREATE_TOPICS, 7, topics=[topic_req("t")])
    (result,) = resp.topics
    assert result.error_code == ErrorCode.none
    assert broker.controller.calls[0][1:4] == ("t", 3, 1)
    assert len(broker.controller.state.topics["t"].partitions) == 3


def test_create_topics_v5_returns_id_counts_and_configs(broker):
    configs = [{"name": "retention.ms", "value": "1000"}]
    resp = call(broker, CREATE_TOPICS, 5, topics=[topic_req("t", 2, 1, configs=configs)])
    (result,) = resp.topics
    assert result.num_partitions == 2 and result.replication_factor == 1
    by_name = {c.name: c for c in result.configs}
    assert by_name["retention.ms"].value == "1000"
    assert by_name["retention.ms"].config_source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert by_name["cleanup.policy"].config_source == ConfigSource.DEFAULT_CONFIG
    resp7 = call(broker, CREATE_TOPICS, 7, topics=[topic_req("u", 1, 1)])
    assert resp7.topics[0].topic_id == broker.controller.state.topics["u"].topic_id


def test_create_topics_old_version_encodes_without_v5_fields(broker):
    resp = call(broker, CREATE_TOPICS, 2, topics=[topic_req("t", 1, 1)])
    assert resp.topics[0].error_code == ErrorCode.none
    assert not hasattr(resp.topics[0], "configs")


def test_create_topics_refuses_duplicate_names_in_one_request(broker):
    resp = call(broker, CREATE_TOPICS, 7, topics=[topic_req("t"), topic_req("t"), topic_req("u")])
    codes = {(r.name, r.error_code) for r in resp.topics}
    assert codes == {("t", ErrorCode.invalid_request), ("u", ErrorCode.none)}
    assert "t" not in broker.controller.state.topics


def test_create_topics_refuses_assignment_with_partition_count(broker):
    assignments = [{"partition_index": 0, "broker_ids": [1]}]
    resp = call(broker, CREATE_TOPICS, 7, topics=[topic_req("t", 1, -1, assignments=assignments)])
    assert resp.topics[0].error_code == ErrorCode.invalid_request
    assert broker.controller.calls == []


def test_create_topics_passes_manual_assignment_to_controller(broker):
    assignments = [
        {"partition_index": 0, "broker_ids": [1]},
        {"partition_index": 1, "broker_ids": [1]},
    ]
    resp = call(broker, CREATE_TOPICS, 7, topics=[topic_req("t", assignments=assignments)])
    assert resp.topics[0].error_code == ErrorCode.none
    assert resp.topics[0].num_partitions == 2
    _, _, partitions, rf, _, given, _ = broker.controller.calls[0]
    assert (partitions, rf, given) == (-1, -1, {0: [1], 1: [1]})


def test_create_topics_refuses_invalid_config_value(broker):
    configs = [{"name": "retention.ms", "value": "soon"}]
    resp = call(broker, CREATE_TOPICS, 7, topics=[topic_req("t", configs=configs)])
    assert resp.topics[0].error_code == ErrorCode.invalid_config
    assert "retention.ms" in resp.topics[0].error_message
    assert "t" not in broker.controller.state.topics


def test_create_topics_refuses_unknown_config_name(broker):
    configs = [{"name": "no.such.config", "value": "1"}]
    resp = call(broker, CREATE_TOPICS, 7, topics=[topic_req("t", configs=configs)])
    assert resp.topics[0].error_code == ErrorCode.invalid_config


def test_create_topics_refuses_null_config_value(broker):
    configs = [{"name": "retention.ms", "value": None}]
    resp = call(broker, CREATE_TOPICS, 7, topics=[topic_req("t", configs=configs)])
    assert resp.topics[0].error_code == ErrorCode.invalid_config


def test_create_topics_validate_only_creates_nothing(broker):
    resp = call(broker, CREATE_TOPICS, 7, topics=[topic_req("t")], validate_only=True)
    assert resp.topics[0].error_code == ErrorCode.none
    assert resp.topics[0].num_partitions == 3
    assert broker.controller.calls[0][-1] is True
    assert "t" not in broker.controller.state.topics


def test_create_topics_reports_existing_topic(broker):
    broker.controller.add_topic("t")
    resp = call(broker, CREATE_TOPICS, 7, topics=[topic_req("t", 0, 0)])
    assert resp.topics[0].error_code == ErrorCode.topic_already_exists


def test_create_topics_reports_illegal_name(broker):
    resp = call(broker, CREATE_TOPICS, 7, topics=[topic_req("bad name!")])
    assert resp.topics[0].error_code == ErrorCode.invalid_topic_exception


def test_create_topics_refuses_zero_replication_factor(broker):
    resp = call(broker, CREATE_TOPICS, 7, topics=[topic_req("t", 1, 0)])
    assert resp.topics[0].error_code == ErrorCode.invalid_replication_factor


def test_create_topics_passes_controller_refusal_through(broker):
    broker.controller.fail_with = ControllerError(38, "only 1 broker")
    resp = call(broker, CREATE_TOPICS, 7, topics=[topic_req("t", 1, 3)])
    assert resp.topics[0].error_code == ErrorCode.invalid_replication_factor
    assert resp.topics[0].error_message == "only 1 broker"
    assert resp.topics[0].num_partitions == -1


def test_create_topics_unexpected_failure_is_confined_to_its_topic(broker):
    broker.controller.fail_topic["bad"] = RuntimeError("boom")
    resp = call(broker, CREATE_TOPICS, 7, topics=[topic_req("bad"), topic_req("good")])
    codes = {r.name: r.error_code for r in resp.topics}
    assert codes == {"bad": ErrorCode.unknown_server_error, "good": ErrorCode.none}


def test_create_topics_times_out_on_slow_controller(broker):
    broker.controller.delay = 0.5
    resp = call(broker, CREATE_TOPICS, 7, topics=[topic_req("t")], timeout=20)
    assert resp.topics[0].error_code == ErrorCode.request_timed_out


# -- DeleteTopics --------------------------------------------------------------------------


def test_delete_topics_by_name(broker):
    info = broker.controller.add_topic("t")
    resp = call(broker, DELETE_TOPICS, 5, topic_names=["t"], timeout=1000)
    (result,) = resp.responses
    assert (result.name, result.error_code) == ("t", ErrorCode.none)
    assert broker.controller.calls == [("delete_topic_by_id", info.topic_id)]


def test_delete_topics_unknown_name(broker):
    resp = call(broker, DELETE_TOPICS, 1, topic_names=["nope"], timeout=1000)
    assert resp.responses[0].error_code == ErrorCode.unknown_topic_or_partition


def test_delete_topics_by_id_returns_name(broker):
    info = broker.controller.add_topic("t")
    resp = call(broker, DELETE_TOPICS, 6, topics=[{"topic_id": info.topic_id}], timeout=1000)
    (result,) = resp.responses
    assert (result.name, result.topic_id, result.error_code) == ("t", info.topic_id, 0)
    assert "t" not in broker.controller.state.topics


def test_delete_topics_unknown_id(broker):
    resp = call(broker, DELETE_TOPICS, 6, topics=[{"topic_id": uuid.uuid4()}], timeout=1000)
    assert resp.responses[0].error_code == ErrorCode.unknown_topic_id


def test_delete_topics_refuses_duplicate_names(broker):
    broker.controller.add_topic("t")
    resp = call(broker, DELETE_TOPICS, 5, topic_names=["t", "t"], timeout=1000)
    assert [r.error_code for r in resp.responses] == [ErrorCode.invalid_request]
    assert "t" in broker.controller.state.topics


def test_delete_topics_refuses_name_and_id_of_one_topic(broker):
    info = broker.controller.add_topic("t")
    topics = [{"name": "t", "topic_id": None}, {"topic_id": info.topic_id}]
    resp = call(broker, DELETE_TOPICS, 6, topics=topics, timeout=1000)
    assert [r.error_code for r in resp.responses] == [ErrorCode.invalid_request] * 2
    assert "t" in broker.controller.state.topics


def test_delete_topics_disabled_by_config(tmp_path):
    broker = FakeBroker(tmp_path, {"delete.topic.enable": "false"})
    broker.controller.add_topic("t")
    resp = call(broker, DELETE_TOPICS, 5, topic_names=["t"], timeout=1000)
    assert resp.responses[0].error_code == ErrorCode.topic_deletion_disabled


# -- CreatePartitions ----------------------------------------------------------------------


def test_create_partitions_grows_topic(broker):
    broker.controller.add_topic("t", 2)
    resp = call(
        broker, CREATE_PARTITIONS, 3, topics=[{"name": "t", "count": 5, "assignments": None}]
    )
    assert resp.results[0].error_code == ErrorCode.none
    assert len(broker.controller.state.topics["t"].partitions) == 5


def test_create_partitions_refuses_count_that_does_not_grow(broker):
    broker.controller.add_topic("t", 2)
    for count in (1, 2):
        topics = [{"name": "t", "count": count, "assignments": None}]
        resp = call(broker, CREATE_PARTITIONS, 3, topics=topics)
        assert resp.results[0].error_code == ErrorCode.invalid_partitions
    assert broker.controller.calls == []


def test_create_partitions_numbers_assignments_from_current_count(broker):
    broker.controller.add_topic("t", 2)
    assignment = request_entity(CREATE_PARTITIONS, 3, "CreatePartitionsAssignment", broker_ids=[1])
    topics = [{"name": "t", "count": 4, "assignments": (assignment, assignment)}]
    call(broker, CREATE_PARTITIONS, 3, topics=topics, validate_only=True)
    assert broker.controller.calls == [("create_partitions", "t", 4, {2: [1], 3: [1]}, True)]


def test_create_partitions_refuses_wrong_number_of_assignments(broker):
    broker.controller.add_topic("t", 2)
    assignment = request_entity(CREATE_PARTITIONS, 3, "CreatePartitionsAssignment", broker_ids=[1])
    topics = [{"name": "t", "count": 4, "assignments": (assignment,)}]
    resp = call(broker, CREATE_PARTITIONS, 3, topics=topics)
    assert resp.results[0].error_code == ErrorCode.invalid_replica_assignment


def test_create_partitions_unknown_topic(broker):
    topics = [{"name": "nope", "count": 4, "assignments": None}]
    resp = call(broker, CREATE_PARTITIONS, 0, topics=topics)
    assert resp.results[0].error_code == ErrorCode.unknown_topic_or_partition


# -- DescribeConfigs -----------------------------------------------------------------------


def describe(broker, kind, name, keys=None, version=4, **kw):
    resources = [{"resource_type": kind, "resource_name": name, "configuration_keys": keys}]
    (result,) = call(broker, DESCRIBE_CONFIGS, version, resources=resources, **kw).results
    return result


def test_describe_topic_configs_shows_override_and_defaults(broker):
    broker.controller.add_topic("t", configs={"retention.ms": "1000"})
    result = describe(broker, TOPIC, "t")
    by_name = {c.name: c for c in result.configs}
    assert by_name["retention.ms"].value == "1000"
    assert by_name["retention.ms"].config_source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert by_name["segment.bytes"].config_source == ConfigSource.DEFAULT_CONFIG
    assert by_name["cleanup.policy"].config_type == 7  # LIST


def test_describe_topic_configs_filters_by_keys(broker):
    broker.controller.add_topic("t")
    result = describe(broker, TOPIC, "t", keys=["retention.ms", "no.such.key"])
    assert [c.name for c in result.configs] == ["retention.ms"]


def test_describe_configs_synonyms_only_when_asked(broker):
    broker.controller.add_topic("t", configs={"retention.ms": "1000"})
    plain = describe(broker, TOPIC, "t", keys=["retention.ms"])
    assert plain.configs[0].synonyms == ()
    rich = describe(broker, TOPIC, "t", keys=["retention.ms"], include_synonyms=True)
    assert rich.configs[0].synonyms[0].source == ConfigSource.DYNAMIC_TOPIC_CONFIG


def test_describe_configs_documentation_only_when_asked(broker):
    broker.controller.add_topic("t")
    plain = describe(broker, TOPIC, "t", keys=["retention.ms"])
    assert plain.configs[0].documentation is None
    docs = describe(broker, TOPIC, "t", keys=["retention.ms"], include_documentation=True)
    assert docs.configs[0].documentation


def test_describe_configs_unknown_topic(broker):
    assert describe(broker, TOPIC, "nope").error_code == ErrorCode.unknown_topic_or_partition


def test_describe_broker_configs_of_this_node(broker):
    result = describe(broker, BROKER, "1", keys=["num.partitions"], version=1)
    (entry,) = result.configs
    assert (entry.value, entry.config_source) == ("3", ConfigSource.STATIC_BROKER_CONFIG)


def test_describe_broker_configs_refuses_other_node(broker):
    assert describe(broker, BROKER, "2").error_code == ErrorCode.invalid_request
    assert describe(broker, BROKER, "x").error_code == ErrorCode.invalid_request


def test_describe_cluster_default_broker_configs_are_empty(broker):
    result = describe(broker, BROKER, "")
    assert (result.error_code, result.configs) == (ErrorCode.none, ())


def test_describe_broker_loggers_lists_root(broker):
    result = describe(broker, BROKER_LOGGER, "1")
    names = {c.name for c in result.configs}
    assert "root" in names


def test_describe_configs_refuses_unsupported_resource_type(broker):
    assert describe(broker, 99, "x").error_code == ErrorCode.invalid_request


# -- AlterConfigs --------------------------------------------------------------------------


def alter(broker, resources, key=ALTER_CONFIGS, version=2, validate_only=False):
    resp = call(broker, key, version, resources=resources, validate_only=validate_only)
    return resp.responses


def test_alter_configs_replaces_topic_overrides(broker):
    broker.controller.add_topic("t", configs={"retention.ms": "1000"})
    configs = [{"name": "segment.bytes", "value": "1048576"}]
    (result,) = alter(broker, [{"resource_type": TOPIC, "resource_name": "t", "configs": configs}])
    assert result.error_code == ErrorCode.none
    assert broker.controller.state.topics["t"].configs == {"segment.bytes": "1048576"}


def test_alter_configs_validate_only_changes_nothing(broker):
    broker.controller.add_topic("t", configs={"retention.ms": "1000"})
    configs = [{"name": "segment.bytes", "value": "1048576"}]
    resource = {"resource_type": TOPIC, "resource_name": "t", "configs": configs}
    alter(broker, [resource], validate_only=True)
    assert broker.controller.state.topics["t"].configs == {"retention.ms": "1000"}


def test_alter_configs_refuses_invalid_value(broker):
    broker.controller.add_topic("t")
    configs = [{"name": "segment.bytes", "value": "big"}]
    (result,) = alter(broker, [{"resource_type": TOPIC, "resource_name": "t", "configs": configs}])
    assert result.error_code == ErrorCode.invalid_config
    assert broker.controller.calls == []


def test_alter_configs_refuses_repeated_resource(broker):
    broker.controller.add_topic("t")
    resource = {"resource_type": TOPIC, "resource_name": "t", "configs": []}
    results = alter(broker, [resource, resource])
    assert [r.error_code for r in results] == [ErrorCode.invalid_request] * 2


def test_alter_configs_refuses_null_value(broker):
    broker.controller.add_topic("t")
    configs = [{"name": "segment.bytes", "value": None}]
    (result,) = alter(broker, [{"resource_type": TOPIC, "resource_name": "t", "configs": configs}])
    assert result.error_code == ErrorCode.invalid_request


def test_alter_configs_unknown_topic(broker):
    (result,) = alter(broker, [{"resource_type": TOPIC, "resource_name": "nope", "configs": []}])
    assert result.error_code == ErrorCode.unknown_topic_or_partition


def test_alter_configs_refuses_broker_config_change(broker):
    configs = [{"name": "num.partitions", "value": "5"}]
    (result,) = alter(broker, [{"resource_type": BROKER, "resource_name": "1", "configs": configs}])
    assert result.error_code == ErrorCode.invalid_request


def elr_broker(tmp_path: Path, cluster_default: dict[str, str]) -> FakeBroker:
    """A broker whose cluster keeps ELRs, with a cluster default already stored; the
    controller records a broker config change as it would apply it."""
    fake = FakeBroker(tmp_path)
    fake.controller.state = replace(
        fake.controller.state,
        features={"eligible.leader.replicas.version": 1},
        broker_configs={"": dict(cluster_default)},
    )

    async def set_broker_configs(name: str, changes: dict[str, str | None]) -> None:
        fake.controller.calls.append(("set_broker_configs", name, changes))

    fake.controller.set_broker_configs = set_broker_configs  # type: ignore[attr-defined]
    return fake


@pytest.mark.parametrize("validate_only", [False, True])
def test_with_elr_the_cluster_default_min_insync_replicas_cannot_be_removed(
    tmp_path: Path, validate_only: bool
) -> None:
    fake = elr_broker(tmp_path, {"min.insync.replicas": "2", "log.retention.ms": "1000"})
    configs = [{"name": "log.retention.ms", "value": "2000"}]
    resource = {"resource_type": BROKER, "resource_name": "", "configs": configs}
    (result,) = alter(fake, [resource], validate_only=validate_only)
    assert result.error_code == ErrorCode.invalid_config
    assert result.error_message == (
        "Cluster-level min.insync.replicas cannot be removed while ELR is enabled."
    )
    delete = [{"name": "min.insync.replicas", "config_operation": DELETE, "value": None}]
    resource = {"resource_type": BROKER, "resource_name": "", "configs": delete}
    (result,) = alter(fake, [resource], key=INCREMENTAL_ALTER_CONFIGS, version=1)
    assert result.error_code == ErrorCode.invalid_config
    assert fake.controller.calls == []
    # Changing it is allowed, and so is the legacy request that keeps it.
    configs = [{"name": "min.insync.replicas", "value": "1"}]
    resource = {"resource_type": BROKER, "resource_name": "", "configs": configs}
    (result,) = alter(fake, [resource], validate_only=validate_only)
    assert result.error_code == ErrorCode.none
    expected = (
        []
        if validate_only
        else [("set_broker_configs", "", {"min.insync.replicas": "1", "log.retention.ms": None})]
    )
    assert fake.controller.calls == expected


def test_with_elr_a_brokers_own_min_insync_replicas_cannot_be_set(tmp_path: Path) -> None:
    fake = elr_broker(tmp_path, {})
    set_ = [{"name": "min.insync.replicas", "config_operation": SET, "value": "2"}]
    resource = {"resource_type": BROKER, "resource_name": "1", "configs": set_}
    (result,) = alter(fake, [resource], key=INCREMENTAL_ALTER_CONFIGS, version=1)
    assert result.error_code == ErrorCode.invalid_config
    assert result.error_message == (
        "Broker-level min.insync.replicas cannot be altered while ELR is enabled."
    )
    # The cluster default may be set; without ELR so may a broker's own.
    resource = {"resource_type": BROKER, "resource_name": "", "configs": set_}
    (result,) = alter(fake, [resource], key=INCREMENTAL_ALTER_CONFIGS, version=1)
    assert result.error_code == ErrorCode.none
    fake.controller.state = replace(fake.controller.state, features={})
    resource = {"resource_type": BROKER, "resource_name": "1", "configs": set_}
    (result,) = alter(fake, [resource], key=INCREMENTAL_ALTER_CONFIGS, version=1)
    assert result.error_code == ErrorCode.none
    assert [c[1] for c in fake.controller.calls] == ["", "1"]


# -- IncrementalAlterConfigs ---------------------------------------------------------------


@dataclass
class Op:
    name: str
    config_operation: int
    value: str | None


def entries(broker: FakeBroker, overrides: dict[str, str]) -> dict[str, Any]:
    from kbroker.config import describe_topic_config

    return {e.name: e for e in describe_topic_config(overrides, broker.config)}


def test_incremental_set_and_delete(broker):
    current = {"retention.ms": "1", "segment.bytes": "2000000"}
    ops = [Op("retention.ms", SET, "5"), Op("segment.bytes", DELETE, None)]
    assert apply_incremental(current, ops, entries(broker, current)) == {"retention.ms": "5"}


def test_incremental_append_starts_from_default_value(broker):
    ops = [Op("cleanup.policy", APPEND, "compact")]
    result = apply_incremental({}, ops, entries(broker, {}))
    assert result == {"cleanup.policy": "delete,compact"}


def test_incremental_subtract_removes_list_items(broker):
    current = {"cleanup.policy": "delete,compact"}
    ops = [Op("cleanup.policy", SUBTRACT, "delete")]
    assert apply_incremental(current, ops, entries(broker, current)) == {
        "cleanup.policy": "compact"
    }


def test_incremental_append_refuses_non_list_config(broker):
    from kbroker.handlers.configs import ResourceError

    with pytest.raises(ResourceError) as caught:
        apply_incremental({}, [Op("retention.ms", APPEND, "1")], entries(broker, {}))
    assert caught.value.code == ErrorCode.invalid_config


def test_incremental_alter_sends_only_changed_keys(broker):
    broker.controller.add_topic("t", configs={"retention.ms": "1", "segment.bytes": "2000000"})
    configs = [
        {"name": "retention.ms", "config_operation": SET, "value": "1"},
        {"name": "segment.bytes", "config_operation": DELETE, "value": None},
        {"name": "cleanup.policy", "config_operation": APPEND, "value": "compact"},
    ]
    resource = {"resource_type": TOPIC, "resource_name": "t", "configs": configs}
    (result,) = alter(broker, [resource], key=INCREMENTAL_ALTER_CONFIGS, version=1)
    assert result.error_code == ErrorCode.none
    assert broker.controller.calls == [
        (
            "set_topic_configs",
            "t",
            {"segment.bytes": None, "cleanup.policy": "delete,compact"},
            False,
        )
    ]


def test_incremental_alter_refuses_invalid_result(broker):
    broker.controller.add_topic("t")
    configs = [{"name": "cleanup.policy", "config_operation": APPEND, "value": "shred"}]
    resource = {"resource_type": TOPIC, "resource_name": "t", "configs": configs}
    (result,) = alter(broker, [resource], key=INCREMENTAL_ALTER_CONFIGS, version=1)
    assert result.error_code == ErrorCode.invalid_config


def test_incremental_alter_sets_logger_level(broker):
    logger = logging.getLogger("kbroker.test_admin_logger")
    logger.setLevel(logging.INFO)
    configs = [{"name": logger.name, "config_operation": SET, "value": "DEBUG"}]
    resource = {"resource_type": BROKER_LOGGER, "resource_name": "1", "configs": configs}
    (result,) = alter(broker, [resource], key=INCREMENTAL_ALTER_CONFIGS, version=1)
    assert result.error_code == ErrorCode.none
    assert logger.level == logging.DEBUG


def test_incremental_alter_logger_validate_only_keeps_level(broker):
    logger = logging.getLogger("kbroker.test_admin_logger")
    logger.setLevel(logging.INFO)
    configs = [{"name": logger.name, "config_operation": SET, "value": "DEBUG"}]
    resource = {"resource_type": BROKER_LOGGER, "resource_name": "1", "configs": configs}
    alter(broker, [resource], key=INCREMENTAL_ALTER_CONFIGS, version=1, validate_only=True)
    assert logger.level == logging.INFO


@pytest.mark.parametrize(
    ("op", "name", "value", "code"),
    [
        (SET, "kbroker.test_admin_logger", "LOUD", ErrorCode.invalid_config),
        (SET, "no.such.logger.anywhere", "INFO", ErrorCode.invalid_config),
        (APPEND, "kbroker.test_admin_logger", "INFO", ErrorCode.invalid_request),
        (DELETE, "root", None, ErrorCode.invalid_request),
    ],
)
def test_incremental_alter_logger_refusals(broker, op, name, value, code):
    logging.getLogger("kbroker.test_admin_logger")
    configs = [{"name": name, "config_operation": op, "value": value}]
    resource = {"resource_type": BROKER_LOGGER, "resource_name": "1", "configs": configs}
    (result,) = alter(broker, [resource], key=INCREMENTAL_ALTER_CONFIGS, version=1)
    assert result.error_code == code


# -- DescribeCluster -----------------------------------------------------------------------


def test_describe_cluster_lists_unfenced_brokers(tmp_path):
    broker = FakeBroker(tmp_path, brokers=(1, 2))
    state = broker.controller.state
    fenced = replace(state.brokers[2], fenced=True)
    broker.controller.state = replace(state, brokers={1: state.brokers[1], 2: fenced})
    resp = call(broker, DESCRIBE_CLUSTER, 1, include_cluster_authorized_operations=False)
    assert [b.broker_id for b in resp.brokers] == [1]
    assert (resp.cluster_id, resp.controller_id) == ("test-cluster", 1)
    with_fenced = call(
        broker, DESCRIBE_CLUSTER, 2, include_cluster_authorized_operations=False,
        include_fenced_brokers=True,
    )  # fmt: skip
    assert [(b.broker_id, b.is_fenced) for b in with_fenced.brokers] == [(1, False), (2, True)]


def test_describe_cluster_refuses_controller_endpoint(broker):
    resp = call(
        broker, DESCRIBE_CLUSTER, 1, include_cluster_authorized_operations=False, endpoint_type=2
    )
    assert resp.error_code == ErrorCode.mismatched_endpoint_type


def test_describe_cluster_reports_authorized_operations_when_asked(broker):
    resp = call(broker, DESCRIBE_CLUSTER, 0, include_cluster_authorized_operations=True)
    assert resp.cluster_authorized_operations & (1 << 8)  # DESCRIBE


# -- DescribeLogDirs -----------------------------------------------------------------------


def test_describe_log_dirs_groups_partitions_by_directory(broker):
    broker.add_replica("t", 0, 0, size=100)
    broker.add_replica("t", 1, 1, size=200)
    resp = call(broker, DESCRIBE_LOG_DIRS, 4, topics=None)
    layout = {
        Path(r.log_dir).name: [(t.name, p.partition_index, p.partition_size) for t in r.topics
                               for p in t.partitions]
        for r in resp.results
    }  # fmt: skip
    assert layout == {"logs-a": [("t", 0, 100)], "logs-b": [("t", 1, 200)]}
    assert all(r.total_bytes > 0 and r.usable_bytes >= 0 for r in resp.results)


def test_describe_log_dirs_filters_partitions(broker):
    broker.add_replica("t", 0)
    broker.add_replica("t", 1)
    wanted = request_entity(
        DESCRIBE_LOG_DIRS, 1, "DescribableLogDirTopic", topic="t", partitions=[1]
    )
    resp = call(broker, DESCRIBE_LOG_DIRS, 1, topics=(wanted,))
    found = [
        (t.name, p.partition_index) for r in resp.results for t in r.topics for p in t.partitions
    ]
    assert found == [("t", 1)]


def test_describe_log_dirs_reports_an_offline_directory_with_kafka_storage_error(broker):
    broker.add_replica("t", 0, 0)
    broker.storage.offline_dirs[str(broker.log_dirs[1])] = "OSError: [Errno 5] EIO"
    resp = call(broker, DESCRIBE_LOG_DIRS, 4, topics=None)
    by_name = {Path(r.log_dir).name: r for r in resp.results}
    assert by_name["logs-b"].error_code == ErrorCode.kafka_storage_error
    assert by_name["logs-b"].topics == () and by_name["logs-b"].total_bytes == -1
    assert by_name["logs-a"].error_code == ErrorCode.none


def test_describe_log_dirs_shows_a_replica_being_moved_as_the_future_one(broker):
    plog = broker.storage.create("t", 0, LogConfig(segment_bytes=1024), 0)
    for _ in range(20):
        plog.append(encode_batch([b"x" * 200], 0), 0, 0)
    plog.high_watermark = plog.log_end_offset
    broker.replicas.hosted[("t", 0)] = FakeReplica("t", 0, plog)
    move = LogMove(plog, broker.log_dirs[1])
    steps = move.plan()
    move.copy(steps[:-1])  # every sealed segment, not the active one yet
    broker.storage.moves[("t", 0)] = move
    resp = call(broker, DESCRIBE_LOG_DIRS, 4, topics=None)
    seen = {
        Path(r.log_dir).name: [(p.partition_index, p.is_future_key, p.partition_size, p.offset_lag)
                               for t in r.topics for p in t.partitions]
        for r in resp.results
    }  # fmt: skip
    active = plog.segments[-1]
    assert seen["logs-a"] == [(0, False, plog.size_bytes(), 0)]
    assert seen["logs-b"] == [
        (0, True, plog.size_bytes() - active.size, plog.log_end_offset - active.base_offset)
    ]


def alter_dirs(broker, path, topic="t", partitions=(0,)):
    resp = call(
        broker, ALTER_REPLICA_LOG_DIRS, 2,
        dirs=[{"path": str(path), "topics": [{"name": topic, "partitions": list(partitions)}]}],
    )  # fmt: skip
    return [p.error_code for t in resp.results for p in t.partitions]


def test_alter_replica_log_dirs_refuses_a_path_that_is_no_log_directory(broker):
    broker.add_replica("t", 0, 0)
    assert alter_dirs(broker, "/nowhere") == [ErrorCode.log_dir_not_found]


def test_alter_replica_log_dirs_remembers_the_directory_of_a_replica_not_here_yet(broker):
    assert alter_dirs(broker, broker.log_dirs[1], "later") == [ErrorCode.replica_not_available]
    assert broker.storage.preferred_dirs[("later", 0)] == broker.log_dirs[1]


def test_alter_replica_log_dirs_refuses_an_offline_destination(broker):
    broker.add_replica("t", 0, 0)
    broker.storage.offline_dirs[str(broker.log_dirs[1])] = "gone"
    assert alter_dirs(broker, broker.log_dirs[1]) == [ErrorCode.kafka_storage_error]


# -- DescribeTopicPartitions ---------------------------------------------------------------


def dtp(broker, names, limit=2000, cursor=None):
    return call(
        broker, DESCRIBE_TOPIC_PARTITIONS, 0, topics=[{"name": n} for n in names],
        response_partition_limit=limit, cursor=cursor,
    )  # fmt: skip


def test_describe_topic_partitions_describes_leaders_and_replicas(broker):
    info = broker.controller.add_topic("t", 2, epoch=4)
    (topic,) = dtp(broker, ["t"]).topics
    assert (topic.name, topic.topic_id, topic.error_code) == ("t", info.topic_id, 0)
    p = topic.partitions[0]
    assert (p.leader_id, p.leader_epoch, p.replica_nodes, p.isr_nodes) == (1, 4, (1,), (1,))
    assert p.eligible_leader_replicas == () and p.offline_replicas == ()


def test_describe_topic_partitions_pages_with_cursor(broker):
    broker.controller.add_topic("a", 3)
    broker.controller.add_topic("b", 2)
    first = dtp(broker, ["a", "b"], limit=4)
    assert [(t.name, len(t.partitions)) for t in first.topics] == [("a", 3), ("b", 1)]
    cursor = first.next_cursor
    assert (cursor.topic_name, cursor.partition_index) == ("b", 1)
    second = dtp(broker, ["a", "b"], limit=4, cursor={"topic_name": "b", "partition_index": 1})
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in second.topics] == [
        ("b", [1])
    ]
    assert second.next_cursor is None


def test_describe_topic_partitions_all_topics_when_none_named(broker):
    broker.controller.add_topic("b")
    broker.controller.add_topic("a")
    assert [t.name for t in dtp(broker, []).topics] == ["a", "b"]


def test_describe_topic_partitions_unknown_topic(broker):
    (topic,) = dtp(broker, ["nope"]).topics
    assert topic.error_code == ErrorCode.unknown_topic_or_partition


def test_describe_topic_partitions_refuses_cursor_outside_list(broker):
    broker.controller.add_topic("a")
    resp = dtp(broker, ["a"], cursor={"topic_name": "b", "partition_index": 0})
    assert [t.error_code for t in resp.topics] == [ErrorCode.invalid_request]


def test_describe_topic_partitions_shows_no_leader_on_fenced_broker(tmp_path):
    broker = FakeBroker(tmp_path, brokers=(1, 2))
    broker.controller.add_topic("t", replicas=(2, 1))
    state = broker.controller.state
    fenced = replace(state.brokers[2], fenced=True)
    broker.controller.state = replace(state, brokers={**state.brokers, 2: fenced})
    p = dtp(broker, ["t"]).topics[0].partitions[0]
    assert (p.leader_id, p.offline_replicas) == (-1, (2,))


# -- DeleteRecords -------------------------------------------------------------------------


def delete_records(broker, name, partition, offset):
    topics = [{"name": name, "partitions": [{"partition_index": partition, "offset": offset}]}]
    return call(broker, DELETE_RECORDS, 2, topics=topics, timeout=1000).topics[0].partitions[0]


def test_delete_records_moves_log_start_offset(broker):
    broker.controller.add_topic("t")
    plog = broker.add_replica("t", 0, high_watermark=10, log_end_offset=10)
    result = delete_records(broker, "t", 0, 4)
    assert (result.error_code, result.low_watermark) == (ErrorCode.none, 4)
    assert plog.log_start_offset == 4


def test_delete_records_minus_one_means_high_watermark(broker):
    broker.controller.add_topic("t")
    broker.add_replica("t", 0, high_watermark=7, log_end_offset=9)
    assert delete_records(broker, "t", 0, -1).low_watermark == 7


def test_delete_records_beyond_high_watermark_is_out_of_range(broker):
    broker.controller.add_topic("t")
    plog = broker.add_replica("t", 0, high_watermark=7, log_end_offset=9)
    assert delete_records(broker, "t", 0, 8).error_code == ErrorCode.offset_out_of_range
    assert plog.log_start_offset == 0


def test_delete_records_refused_on_compacted_topic(broker):
    broker.controller.add_topic("t")
    broker.add_replica("t", 0, high_watermark=7, config=LogConfig(cleanup_policy="compact"))
    assert delete_records(broker, "t", 0, 1).error_code == ErrorCode.policy_violation


def test_delete_records_unknown_topic_and_partition(broker):
    broker.controller.add_topic("t")
    assert delete_records(broker, "nope", 0, 1).error_code == ErrorCode.unknown_topic_or_partition
    assert delete_records(broker, "t", 5, 1).error_code == ErrorCode.unknown_topic_or_partition


def test_delete_records_on_follower_is_refused(broker):
    broker.controller.add_topic("t")
    broker.add_replica("t", 0, high_watermark=7)
    broker.replicas.hosted[("t", 0)].is_leader = False
    assert delete_records(broker, "t", 0, 1).error_code == ErrorCode.not_leader_or_follower


# -- building a request in the test itself must not hide decode problems --------------------


def test_requests_built_here_decode_as_sent():
    """The helper builds kio entities directly; make sure such an entity survives a real
    encode/decode, so the tests exercise what a client would send."""
    from kio.serial import entity_writer

    cls = load_request_schema(CREATE_TOPICS, 7)
    req = build(cls, {"topics": [topic_req("t", 1, 1)], "timeout": 1000})
    buffer = io.BytesIO()
    entity_writer(cls)(buffer, req)
    decoded, _ = entity_reader(cls)(buffer.getvalue(), 0)
    assert decoded == req


# -- ACLs and reassignments ----------------------------------------------------------------

DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS = 45, 46
ANY, LITERAL, TOPIC_RESOURCE, READ, ALLOW = 1, 3, 2, 3, 3


def acl_filter() -> dict[str, Any]:
    return {
        "resource_type_filter": ANY,
        "resource_name_filter": None,
        "pattern_type_filter": ANY,
        "principal_filter": None,
        "host_filter": None,
        "operation": ANY,
        "permission_type": ANY,
    }


@pytest.mark.parametrize("version", [1, 3])
def test_describe_acls_says_security_is_disabled(broker, version):
    resp = call(broker, DESCRIBE_ACLS, version, **acl_filter())
    assert resp.error_code == ErrorCode.security_disabled
    assert resp.error_message
    assert resp.resources == ()


def test_create_acls_refuses_each_creation_as_security_disabled(broker):
    creation = {
        "resource_type": TOPIC_RESOURCE,
        "resource_name": "t",
        "resource_pattern_type": LITERAL,
        "principal": "User:alice",
        "host": "*",
        "operation": READ,
        "permission_type": ALLOW,
    }
    resp = call(broker, CREATE_ACLS, 3, creations=[creation, creation])
    assert [r.error_code for r in resp.results] == [ErrorCode.security_disabled] * 2


def test_delete_acls_refuses_each_filter_as_security_disabled(broker):
    resp = call(broker, DELETE_ACLS, 3, filters=[acl_filter()])
    (result,) = resp.filter_results
    assert result.error_code == ErrorCode.security_disabled
    assert result.matching_acls == ()


@pytest.mark.parametrize("topics", [None, [{"name": "t", "partition_indexes": [0]}]])
def test_no_partition_reassignment_is_listed_while_none_is_in_progress(broker, topics):
    broker.controller.add_topic("t", 1)
    resp = call(broker, LIST_PARTITION_REASSIGNMENTS, 0, timeout=1000, topics=topics)
    assert resp.error_code == ErrorCode.none
    assert resp.topics == ()


@pytest.fixture
def four_brokers(tmp_path: Path) -> FakeBroker:
    fake = FakeBroker(tmp_path, brokers=(1, 2, 3, 4))
    fake.controller.add_topic("t", 2, replicas=(1, 2, 3))
    return fake


def reassign(broker: FakeBroker, version: int = 1, **partitions: Any) -> Any:
    """AlterPartitionReassignments for topic "t": partition index (as "p0") -> replicas."""
    return call(
        broker,
        ALTER_PARTITION_REASSIGNMENTS,
        version,
        timeout=1000,
        topics=[
            {
                "name": "t",
                "partitions": [
                    {"partition_index": int(k[1:]), "replicas": v} for k, v in partitions.items()
                ],
            }
        ],
    )


@pytest.mark.parametrize("version", [0, 1])
def test_a_reassignment_in_flight_is_listed_with_its_adding_and_removing_replicas(
    four_brokers, version
):
    resp = reassign(four_brokers, version, p1=[1, 2, 4])
    assert [(p.partition_index, p.error_code) for p in resp.responses[0].partitions] == [
        (1, ErrorCode.none)
    ]
    for topics in (None, [{"name": "t", "partition_indexes": [0, 1, 7]}, {"name": "gone",
                                                                         "partition_indexes": [0]}]):  # fmt: skip
        listed = call(four_brokers, LIST_PARTITION_REASSIGNMENTS, 0, timeout=1000, topics=topics)
        (topic,) = listed.topics
        (p,) = topic.partitions
        assert (topic.name, p.partition_index) == ("t", 1)
        assert (p.replicas, p.adding_replicas, p.removing_replicas) == ((1, 2, 4, 3), (4,), (3,))


def test_reassignment_errors_are_kafkas_per_partition(four_brokers):
    resp = reassign(four_brokers, p0=None, p1=[1, 1, 2])
    assert resp.error_code == ErrorCode.none
    assert [p.error_code for p in resp.responses[0].partitions] == [
        ErrorCode.no_reassignment_in_progress,
        ErrorCode.invalid_replica_assignment,
    ]
    assert all(p.error_message for p in resp.responses[0].partitions)


def test_a_cancelled_reassignment_is_no_longer_listed(four_brokers):
    reassign(four_brokers, p0=[4, 2, 3])
    resp = reassign(four_brokers, p0=None)
    assert resp.responses[0].partitions[0].error_code == ErrorCode.none
    # Kafka's revert: the full set (4, 2, 3, 1) without the adding replica 4.
    assert four_brokers.controller.state.topics["t"].partitions[0].replicas == (2, 3, 1)
    listed = call(four_brokers, LIST_PARTITION_REASSIGNMENTS, 0, timeout=1000, topics=None)
    assert listed.topics == ()


# -- ElectLeaders --------------------------------------------------------------------------

ELECT_LEADERS, PREFERRED = 43, 0


@pytest.mark.parametrize("version", [0, 2])
def test_elect_leaders_is_not_needed_where_the_preferred_replica_leads(broker, version):
    broker.controller.add_topic("t", 2)
    resp = call(
        broker,
        ELECT_LEADERS,
        version,
        election_type=PREFERRED,
        topic_partitions=[
            {"topic": "t", "partitions": [0, 1, 2]},
            {"topic": "gone", "partitions": [0]},
        ],
        timeout=1000,
    )
    by_partition = {
        (r.topic, p.partition_id): p.error_code
        for r in resp.replica_election_results
        for p in r.partition_result
    }
    assert by_partition == {
        ("t", 0): ErrorCode.election_not_needed,
        ("t", 1): ErrorCode.election_not_needed,
        ("t", 2): ErrorCode.unknown_topic_or_partition,
        ("gone", 0): ErrorCode.unknown_topic_or_partition,
    }


def test_preferred_election_gives_a_partition_back_to_its_first_replica(broker):
    broker.controller.state = replace(
        broker.controller.state,
        brokers={b: BrokerInfo(b, "localhost", 9091 + b) for b in (1, 2)},
    )
    info = broker.controller.add_topic("t", 1, replicas=(1, 2))
    moved = replace(info.partitions[0], leader=2, leader_epoch=3)
    broker.controller._publish(replace(info, partitions=(moved,)))
    resp = call(
        broker,
        ELECT_LEADERS,
        2,
        election_type=PREFERRED,
        topic_partitions=[{"topic": "t", "partitions": [0]}],
        timeout=1000,
    )
    assert resp.replica_election_results[0].partition_result[0].error_code == ErrorCode.none
    partition = broker.controller.state.topics["t"].partitions[0]
    assert (partition.leader, partition.leader_epoch) == (1, 4)


def test_unclean_election_is_not_needed_where_a_leader_exists(broker):
    broker.controller.add_topic("t", 1)
    resp = call(
        broker,
        ELECT_LEADERS,
        2,
        election_type=1,
        topic_partitions=[{"topic": "t", "partitions": [0]}],
        timeout=1000,
    )
    result = resp.replica_election_results[0].partition_result[0]
    assert result.error_code == ErrorCode.election_not_needed


def test_electing_for_all_partitions_lists_none(broker):
    broker.controller.add_topic("t", 2)
    resp = call(
        broker, ELECT_LEADERS, 2, election_type=PREFERRED, topic_partitions=None, timeout=1000
    )
    assert resp.error_code == ErrorCode.none
    assert resp.replica_election_results == ()


# -- DescribeClientQuotas ------------------------------------------------------------------

DESCRIBE_CLIENT_QUOTAS, MATCH_EXACT, MATCH_ANY = 48, 0, 2


def test_no_client_quotas_match_any_filter(broker):
    resp = call(
        broker,
        DESCRIBE_CLIENT_QUOTAS,
        1,
        components=[
            {"entity_type": "user", "match_type": MATCH_EXACT, "match": "alice"},
            {"entity_type": "client-id", "match_type": MATCH_ANY, "match": None},
        ],
        strict=False,
    )
    assert resp.error_code == ErrorCode.none
    assert resp.entries == ()


@pytest.mark.parametrize(
    "components",
    [
        [{"entity_type": "tenant", "match_type": MATCH_ANY, "match": None}],
        [
            {"entity_type": "user", "match_type": MATCH_ANY, "match": None},
            {"entity_type": "user", "match_type": MATCH_ANY, "match": None},
        ],
        [{"entity_type": "user", "match_type": MATCH_EXACT, "match": None}],
    ],
)
def test_a_malformed_quota_filter_is_an_invalid_request(broker, components):
    resp = call(broker, DESCRIBE_CLIENT_QUOTAS, 1, components=components, strict=True)
    assert resp.error_code == ErrorCode.invalid_request
    assert resp.error_message
    assert resp.entries is None


# -- GROUP configs -------------------------------------------------------------------------

LIST_CONFIG_RESOURCES = 74


def test_streams_group_configs_are_served_with_share_groups_off(tmp_path):
    """A streams group's configs do not depend on `group.share.enable`, as in Kafka 4.3;
    a share group's config still needs share groups on."""
    broker = FakeBroker(tmp_path, {"group.share.enable": "false"})

    def set_group(name: str, value: str) -> Any:
        configs = [{"name": name, "config_operation": SET, "value": value}]
        resource = {"resource_type": GROUP, "resource_name": "app", "configs": configs}
        (result,) = alter(broker, [resource], key=INCREMENTAL_ALTER_CONFIGS, version=1)
        return result

    assert set_group("streams.session.timeout.ms", "50000").error_code == ErrorCode.none
    assert set_group("streams.num.standby.replicas", "9").error_code == ErrorCode.invalid_config
    share = set_group("share.record.lock.duration.ms", "20000")
    assert share.error_code == ErrorCode.invalid_request
    assert broker.controller.state.group_configs == {"app": {"streams.session.timeout.ms": "50000"}}

    result = describe(broker, GROUP, "app")
    assert result.error_code == ErrorCode.none
    by_name = {c.name: c.value for c in result.configs}
    assert by_name["streams.session.timeout.ms"] == "50000"
    assert by_name["streams.num.standby.replicas"] == "0"
    assert not any(name.startswith("share.") for name in by_name)

    listed = call(broker, LIST_CONFIG_RESOURCES, 1, resource_types=[GROUP])
    assert [(r.resource_name, r.resource_type) for r in listed.config_resources] == [("app", GROUP)]


def test_consumer_group_configs_are_served_and_checked_as_kafka_checks_them(tmp_path):
    """librdkafka's 0081_admin sets consumer.session.timeout.ms on a GROUP resource;
    Kafka takes a consumer group's two configs within the broker's group.consumer.*
    bounds, the session timeout above the heartbeat interval, share groups on or off."""
    broker = FakeBroker(tmp_path, {"group.share.enable": "false"})

    def change(*ops: tuple[str, str | None]) -> Any:
        configs = [
            {"name": n, "config_operation": SET if v is not None else DELETE, "value": v}
            for n, v in ops
        ]
        resource = {"resource_type": GROUP, "resource_name": "orders", "configs": configs}
        (result,) = alter(broker, [resource], key=INCREMENTAL_ALTER_CONFIGS, version=1)
        return result

    assert change(("consumer.session.timeout.ms", "50000")).error_code == ErrorCode.none
    assert change(("consumer.heartbeat.interval.ms", "6000")).error_code == ErrorCode.none
    refusals = {
        ("consumer.session.timeout.ms", "10000"): "must be greater than or equal to "
        "group.consumer.min.session.timeout.ms",
        ("consumer.session.timeout.ms", "70000"): "must be less than or equal to "
        "group.consumer.max.session.timeout.ms",
        ("consumer.heartbeat.interval.ms", "1000"): "must be greater than or equal to "
        "group.consumer.min.heartbeat.interval.ms",
        ("consumer.heartbeat.interval.ms", "ten"): "Not a number of type INT",
    }
    for op, why in refusals.items():
        refused = change(op)
        assert refused.error_code == ErrorCode.invalid_config, op
        assert why in refused.error_message, (op, refused.error_message)
    assert broker.controller.state.group_configs == {
        "orders": {"consumer.session.timeout.ms": "50000", "consumer.heartbeat.interval.ms": "6000"}
    }

    result = describe(broker, GROUP, "orders")
    by_name = {c.name: (c.value, c.config_source) for c in result.configs}
    assert by_name["consumer.session.timeout.ms"] == ("50000", 8)  # DYNAMIC_GROUP_CONFIG
    assert change(("consumer.heartbeat.interval.ms", None)).error_code == ErrorCode.none
    result = describe(broker, GROUP, "orders")
    by_name = {c.name: (c.value, c.config_source) for c in result.configs}
    assert by_name["consumer.heartbeat.interval.ms"] == ("5000", 5)  # the broker's, DEFAULT
