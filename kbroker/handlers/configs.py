"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs: topic, broker and logger configs.

Topic configs are overrides the controller replicates; describing one merges them with
the broker's settings the way Kafka does (`kbroker.config.describe_topic_config`).
BROKER resources are Kafka's dynamic broker configs (KIP-226): ``""`` the cluster-wide
default, ``"<id>"`` one broker; changes are validated here, recorded in the metadata log
and applied by every broker (`Broker.apply_dynamic_config`).
BROKER_LOGGER resources are this process's Python loggers, read and set at run time
with log4j's level names, as Kafka's KIP-412 does for its log4j loggers.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from kio.schema.errors import ErrorCode

from kbroker.config import (
    ConfigEntry,
    ConfigError,
    ConfigSynonym,
    describe_broker_config,
    describe_dynamic_default_config,
    describe_topic_config,
    refuse_unapplied_kafka_names,
    validate_dynamic_broker_configs,
)
from kbroker.config import validate_topic_configs as _validate_topic_configs
from kbroker.controller import ControllerError
from kbroker.controller.state import TopicInfo
from kbroker.controller.validation import validate_topic_name
from kbroker.coordinator.consumer_coordinator import (
    CONSUMER_GROUP_CONFIGS,
    consumer_group_config_defaults,
    consumer_group_config_problem,
)
from kbroker.coordinator.streams_coordinator import (
    STREAMS_GROUP_CONFIGS,
    streams_group_config_defaults,
    validate_streams_group_config,
)
from kbroker.handlers.context import (
    BrokerParts,
    RequestContext,
    ShareCoordination,
    caught_up,
)
from kbroker.handlers.registry import handles
from kbroker.protocol import requests, responses
from kbroker.security.acl import AUTHORIZATION_FAILED, CLUSTER_NAME, Operation, ResourceType
from kbroker.telemetry import (
    CLIENT_METRICS_CONFIGS,
    INTERVAL_MS_DEFAULT,
    SubscriptionError,
    validate_subscription,
)

log = logging.getLogger("kbroker.admin")

ALTER_CONFIGS = 33
DESCRIBE_CONFIGS = 32
INCREMENTAL_ALTER_CONFIGS = 44

# ConfigResource.Type ids.
TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8
CLIENT_METRICS = 16
GROUP = 32

# AlterConfigOp.OpType ids.
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_OP_NAMES = {SET: "SET", DELETE: "DELETE", APPEND: "APPEND", SUBTRACT: "SUBTRACT"}

CONFIG_TYPE_LIST = 7
SOURCE_DYNAMIC_BROKER_LOGGER = 6
ROOT_LOGGER = "root"


class ResourceError(Exception):
    """A refusal for one resource (or topic); the request's others go on."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message


def validate_topic_configs(configs: dict[str, str]) -> None:
    """kbroker.config's validation, with Kafka's error code for a bad value (INVALID_CONFIG)."""
    try:
        _validate_topic_configs(configs)
    except ConfigError as exc:
        raise ResourceError(ErrorCode.invalid_config, str(exc)) from exc


def controller_failure(exc: ControllerError) -> ResourceError:
    try:
        code = ErrorCode(exc.error_code)
    except ValueError:
        code = ErrorCode.unknown_server_error
    return ResourceError(code, exc.message)


# -- describing config entries -------------------------------------------------------------


def _synonym(synonym: ConfigSynonym) -> responses.DescribeConfigsSynonym:
    return {"name": synonym.name, "value": synonym.value, "source": int(synonym.source)}


def config_entry_result(
    entry: ConfigEntry, include_synonyms: bool, include_documentation: bool
) -> responses.DescribeConfigsResourceResult:
    """One ConfigEntry as a DescribeConfigs result (sensitive values are never sent)."""
    return {
        "name": entry.name,
        "value": None if entry.is_sensitive else entry.value,
        "read_only": bool(entry.read_only),
        "config_source": int(entry.source),
        "is_sensitive": bool(entry.is_sensitive),
        "synonyms": [_synonym(s) for s in entry.synonyms or ()] if include_synonyms else [],
        "config_type": int(entry.config_type),
        "documentation": entry.documentation if include_documentation else None,
    }


def created_topic_configs(
    broker: BrokerParts, overrides: dict[str, str]
) -> list[responses.CreatableTopicConfigs]:
    """A new topic's effective configs, as CreateTopics v5+ returns them, sorted by name."""
    entries = describe_topic_config(
        overrides, broker.config, include_synonyms=False, include_documentation=False
    )
    return [
        {
            "name": e.name,
            "value": None if e.is_sensitive else e.value,
            "read_only": bool(e.read_only),
            "config_source": int(e.source),
            "is_sensitive": bool(e.is_sensitive),
        }
        for e in entries
    ]


def check_node_id(broker: BrokerParts, resource_name: str) -> None:
    """A per-broker resource must name this node (INVALID_REQUEST otherwise)."""
    try:
        node_id = int(resource_name)
    except ValueError:
        raise ResourceError(
            ErrorCode.invalid_request, f"Broker id must be an integer, but it is: {resource_name}"
        ) from None
    if node_id != broker.node_id:
        raise ResourceError(
            ErrorCode.invalid_request,
            f"Unexpected broker id, expected {broker.node_id} or empty string, "
            f"but received {resource_name}",
        )


def existing_topic(broker: BrokerParts, name: str) -> TopicInfo:
    try:
        validate_topic_name(name)
    except ControllerError as exc:
        raise controller_failure(exc) from exc
    topic = broker.controller.state.topics.get(name)
    if topic is None:
        raise ResourceError(ErrorCode.unknown_topic_or_partition, f"Topic {name} does not exist.")
    return topic


class DescribedResource(Protocol):
    """A resource of DescribeConfigs, in every version."""

    @property
    def resource_type(self) -> int: ...
    @property
    def resource_name(self) -> str: ...
    @property
    def configuration_keys(self) -> Sequence[str] | None: ...


def _describe_resource(
    broker: BrokerParts, resource: DescribedResource, synonyms: bool, docs: bool
) -> list[responses.DescribeConfigsResourceResult]:
    kind, name = resource.resource_type, resource.resource_name
    flags = {"include_synonyms": synonyms, "include_documentation": docs}
    keys = resource.configuration_keys or None  # null or empty: every config
    if kind == TOPIC:
        topic = existing_topic(broker, name)
        entries = describe_topic_config(dict(topic.configs), broker.config, keys, **flags)
        return [config_entry_result(e, synonyms, docs) for e in entries]
    if kind == BROKER:
        if not name:  # the cluster-wide dynamic defaults, and only they
            entries = describe_dynamic_default_config(broker.config, keys, **flags)
            return [config_entry_result(e, synonyms, docs) for e in entries]
        check_node_id(broker, name)
        entries = describe_broker_config(broker.config, keys, **flags)
        return [config_entry_result(e, synonyms, docs) for e in entries]
    if kind == BROKER_LOGGER:
        if not name:
            raise ResourceError(ErrorCode.invalid_request, "Broker id must not be empty")
        check_node_id(broker, name)
        results: list[responses.DescribeConfigsResourceResult] = [
            {
                "name": logger_name,
                "value": level,
                "read_only": False,
                "config_source": SOURCE_DYNAMIC_BROKER_LOGGER,
                "is_sensitive": False,
                "synonyms": [],
                "documentation": None,
            }
            for logger_name, level in current_log_levels().items()
        ]
        return [r for r in results if keys is None or r["name"] in keys]
    if kind == GROUP:
        return describe_group_configs(broker, name, keys, docs)
    if kind == CLIENT_METRICS:
        return describe_client_metrics(broker, name, keys)
    raise ResourceError(ErrorCode.invalid_request, f"Unsupported resource type: {kind}")


def _config_denial(
    ctx: RequestContext, resource_type: int, name: str, operation: Operation
) -> ResourceError | None:
    """Kafka's check for a config resource: DESCRIBE_CONFIGS / ALTER_CONFIGS on the topic,
    the group, or (brokers and their loggers) the cluster."""
    if ctx.broker.authorizer is None:
        return None
    if resource_type == TOPIC:
        if ctx.allowed(operation, ResourceType.TOPIC, name):
            return None
        return ResourceError(ErrorCode.topic_authorization_failed, AUTHORIZATION_FAILED)
    if resource_type == GROUP:
        if ctx.allowed(operation, ResourceType.GROUP, name):
            return None
        return ResourceError(ErrorCode.group_authorization_failed, AUTHORIZATION_FAILED)
    if resource_type in (BROKER, BROKER_LOGGER, CLIENT_METRICS):
        if ctx.allowed(operation, ResourceType.CLUSTER, CLUSTER_NAME):
            return None
        return ResourceError(ErrorCode.cluster_authorization_failed, AUTHORIZATION_FAILED)
    return None


@handles(DESCRIBE_CONFIGS, 0)  # v0 through protocol.legacy_messages
async def describe_configs(
    ctx: RequestContext, request: requests.DescribeConfigsRequest
) -> responses.DescribeConfigsResponse:
    broker = ctx.broker
    include_documentation = request.include_documentation
    topics = broker.controller.state.topics
    if any(r.resource_type == TOPIC and r.resource_name not in topics for r in request.resources):
        # Perhaps created through another node a moment ago (DescribeConfigs right after
        # CreateTopics): answer from the fresh image rather than UNKNOWN_TOPIC_OR_PARTITION.
        await caught_up(broker.controller)
    results: list[responses.DescribeConfigsResult] = []
    for resource in request.resources:
        out: responses.DescribeConfigsResult = {
            "resource_type": resource.resource_type,
            "resource_name": resource.resource_name,
            "error_code": ErrorCode.none,
            "error_message": None,
            "configs": [],
        }
        denied = _config_denial(
            ctx, resource.resource_type, resource.resource_name, Operation.DESCRIBE_CONFIGS
        )
        if denied is not None:
            out["error_code"], out["error_message"] = denied.code, denied.message
            results.append(out)
            continue
        try:
            out["configs"] = _describe_resource(
                broker, resource, request.include_synonyms, include_documentation
            )
        except ResourceError as err:
            out["error_code"], out["error_message"] = err.code, err.message
        except Exception as exc:
            log.exception("describing configs of %s failed", resource.resource_name)
            out["error_code"], out["error_message"] = ErrorCode.unknown_server_error, str(exc)
        results.append(out)
    if ctx.version == 0:  # v0 says is_default where later versions name the source
        for result in results:
            for config in result["configs"]:
                config["is_default"] = config.get("config_source") == SOURCE_DEFAULT
    return {"throttle_time": 0, "results": results}


# -- altering ------------------------------------------------------------------------------


class ConfigChange(Protocol):
    """One config of an AlterConfigs or IncrementalAlterConfigs resource."""

    @property
    def name(self) -> str: ...
    @property
    def value(self) -> str | None: ...


class ConfigOperation(ConfigChange, Protocol):
    """An IncrementalAlterConfigs change: SET, DELETE, APPEND or SUBTRACT."""

    @property
    def config_operation(self) -> int: ...


class ConfigResource(Protocol):
    """A resource whose configs AlterConfigs (every version) replaces."""

    @property
    def resource_type(self) -> int: ...
    @property
    def resource_name(self) -> str: ...
    @property
    def configs(self) -> Sequence[ConfigChange]: ...


class IncrementalConfigResource(ConfigResource, Protocol):
    """A resource whose configs IncrementalAlterConfigs (every version) changes."""

    @property
    def configs(self) -> Sequence[ConfigOperation]: ...


R = TypeVar("R", bound=ConfigResource)


def _alter_response(
    resources: Iterable[ConfigResource], errors: list[ResourceError | None]
) -> responses.AlterConfigsResponse:
    results: list[responses.AlterConfigsResourceResponse] = []
    for resource, err in zip(resources, errors, strict=True):
        results.append(
            {
                "resource_type": resource.resource_type,
                "resource_name": resource.resource_name,
                "error_code": err.code if err else ErrorCode.none,
                "error_message": err.message if err else None,
            }
        )
    return {"throttle_time": 0, "responses": results}


def _preflight(
    resources: Sequence[ConfigResource], deleted: Sequence[frozenset[str]] | None = None
) -> list[ResourceError | None]:
    """Checks Kafka makes before looking at any resource: each resource at most once, each
    key at most once per resource, no null values (other than for the keys `deleted`
    names per resource, an incremental DELETE)."""
    errors: list[ResourceError | None] = [None] * len(resources)
    seen: dict[tuple[int, str], int] = {}
    for i, resource in enumerate(resources):
        key = (resource.resource_type, resource.resource_name)
        if key in seen:
            duplicate = ResourceError(
                ErrorCode.invalid_request, "Each resource must appear at most once."
            )
            errors[i] = errors[seen[key]] = duplicate
        else:
            seen[key] = i
    for i, resource in enumerate(resources):
        if errors[i] is not None:
            continue
        names = [c.name for c in resource.configs]
        if len(set(names)) != len(names):
            errors[i] = ResourceError(
                ErrorCode.invalid_request, "Error due to duplicate config keys"
            )
            continue
        nulls = [
            c.name
            for c in resource.configs
            if c.value is None and not (deleted is not None and c.name in deleted[i])
        ]
        if nulls:
            errors[i] = ResourceError(
                ErrorCode.invalid_request, "Null value not supported for : " + ", ".join(nulls)
            )
    return errors


MIN_ISR = "min.insync.replicas"


async def alter_broker_configs(
    broker: BrokerParts, resource_name: str, wanted: dict[str, str], validate_only: bool
) -> None:
    """Make `wanted` the dynamic configs of a BROKER resource ("" the cluster default,
    else this broker's id), recorded in the metadata log for every broker to apply.

    Validated as Kafka's DynamicBrokerConfig does, over the whole set the resource would
    hold, and by building the settings this broker would run with (cross-checks, key
    stores that must load); any refusal is INVALID_REQUEST with Kafka's message and
    nothing of the resource changes.
    """
    per_broker = bool(resource_name)
    if per_broker:
        check_node_id(broker, resource_name)
    dynamic = broker.controller.state.broker_configs
    current = dynamic.get(resource_name, {})
    try:
        refuse_unapplied_kafka_names({k: v for k, v in wanted.items() if k not in current})
        validate_dynamic_broker_configs(wanted, per_broker)
        cluster_default = dict(wanted) if not per_broker else dynamic.get("", {})
        own = dict(wanted) if per_broker else dynamic.get(str(broker.node_id), {})
        broker.lifecycle.dynamic_config_for(cluster_default, own)
    except ConfigError as exc:
        raise ResourceError(ErrorCode.invalid_request, str(exc)) from exc
    changes: dict[str, str | None] = {
        key: wanted.get(key)
        for key in set(current) | set(wanted)
        if current.get(key) != wanted.get(key)
    }
    if MIN_ISR in changes and broker.controller.state.elr_enabled:
        # Kafka's controller (KIP-966): the ELR rests on one min.insync.replicas for the
        # cluster, so no broker may have its own and the cluster default may not go.
        if per_broker:
            raise ResourceError(
                ErrorCode.invalid_config,
                "Broker-level min.insync.replicas cannot be altered while ELR is enabled.",
            )
        if changes[MIN_ISR] is None:
            raise ResourceError(
                ErrorCode.invalid_config,
                "Cluster-level min.insync.replicas cannot be removed while ELR is enabled.",
            )
    if validate_only or not changes:
        return
    await broker.controller.set_broker_configs(resource_name, changes)


def _broker_entries(broker: BrokerParts, resource_name: str) -> dict[str, ConfigEntry]:
    """Described configs of a BROKER resource by name (the base an APPEND starts from)."""
    if resource_name:
        check_node_id(broker, resource_name)
    return {e.name: e for e in describe_broker_config(broker.config, include_synonyms=False)}


async def _run_alters(
    broker: BrokerParts,
    resources: list[R],
    errors: list[ResourceError | None],
    alter: Callable[[BrokerParts, R], Awaitable[None]],
) -> list[ResourceError | None]:
    for i, resource in enumerate(resources):
        if errors[i] is not None:
            continue
        try:
            await alter(broker, resource)
        except ResourceError as err:
            errors[i] = err
        except ControllerError as exc:
            errors[i] = controller_failure(exc)
        except Exception as exc:  # one resource's failure must not take the others down
            log.exception("altering configs of %s failed", resource.resource_name)
            errors[i] = ResourceError(ErrorCode.unknown_server_error, str(exc))
    return errors


async def _catch_up_for(broker: BrokerParts, resources: Sequence[ConfigResource]) -> None:
    """Topic and broker configs are altered from the fresh metadata image, as Kafka's
    controller alters them from its own: an incremental change made on top of an image
    that lags a change made through another node would undo that change, and a topic
    created there a moment ago would be refused as unknown."""
    if any(r.resource_type in (TOPIC, BROKER, CLIENT_METRICS) for r in resources):
        await caught_up(broker.controller)


@handles(ALTER_CONFIGS, 0)
async def alter_configs(
    ctx: RequestContext, request: requests.AlterConfigsRequest
) -> responses.AlterConfigsResponse:
    """Legacy AlterConfigs: the given configs replace all of a topic's overrides."""
    broker = ctx.broker
    validate_only = request.validate_only
    resources: list[ConfigResource] = list(request.resources)
    await _catch_up_for(broker, resources)

    async def alter(broker: BrokerParts, resource: ConfigResource) -> None:
        denied = _config_denial(
            ctx, resource.resource_type, resource.resource_name, Operation.ALTER_CONFIGS
        )
        if denied is not None:
            raise denied
        if resource.resource_type == BROKER:
            # _preflight refused null values: every config here has one.
            wanted = {c.name: c.value for c in resource.configs if c.value is not None}
            await alter_broker_configs(broker, resource.resource_name, wanted, validate_only)
            return
        if resource.resource_type != TOPIC:
            raise ResourceError(
                ErrorCode.invalid_request, f"Unknown resource type {resource.resource_type}"
            )
        topic = existing_topic(broker, resource.resource_name)
        # _preflight refused null values: every config here has one.
        configs = {c.name: c.value for c in resource.configs if c.value is not None}
        validate_topic_configs(configs)
        await broker.controller.replace_topic_configs(
            topic.name, configs, validate_only=validate_only
        )

    errors = await _run_alters(broker, resources, _preflight(resources), alter)
    return _alter_response(resources, errors)


class _ConfigBase(Protocol):
    """What apply_incremental reads of a described config: its type and its value."""

    @property
    def config_type(self) -> int: ...
    @property
    def value(self) -> str | None: ...


def apply_incremental(
    current: dict[str, str], ops: Iterable[ConfigOperation], entries: Mapping[str, _ConfigBase]
) -> dict[str, str]:
    """A topic's overrides after SET/DELETE/APPEND/SUBTRACT; `entries` are its described
    configs by name (their types say which keys are lists, their values are the base an
    APPEND starts from when the topic has no override)."""
    result = dict(current)
    for op in ops:
        # Null only with DELETE: _preflight refused the other operations' nulls.
        kind, key, value = op.config_operation, op.name, op.value or ""
        if kind == SET:
            result[key] = value
        elif kind == DELETE:
            result.pop(key, None)
        elif kind in (APPEND, SUBTRACT):
            entry = entries.get(key)
            if entry is None or int(entry.config_type) != CONFIG_TYPE_LIST:
                raise ResourceError(
                    ErrorCode.invalid_config,
                    f"Can't {_OP_NAMES[kind]} to key {key} because its type is not LIST.",
                )
            base = result.get(key, entry.value)
            items = [part for part in (base or "").split(",") if part]
            for part in value.split(","):
                if kind == APPEND and part not in items:
                    items.append(part)
                elif kind == SUBTRACT and part in items:
                    items.remove(part)
            result[key] = ",".join(items)
        else:
            raise ResourceError(ErrorCode.invalid_request, f"Unknown operations type {kind}")
    return result


@handles(INCREMENTAL_ALTER_CONFIGS, 0)
async def incremental_alter_configs(
    ctx: RequestContext, request: requests.IncrementalAlterConfigsRequest
) -> responses.IncrementalAlterConfigsResponse:
    broker = ctx.broker
    validate_only = request.validate_only
    resources: list[IncrementalConfigResource] = list(request.resources)
    await _catch_up_for(broker, resources)

    async def alter(broker: BrokerParts, resource: IncrementalConfigResource) -> None:
        kind = resource.resource_type
        denied = _config_denial(ctx, kind, resource.resource_name, Operation.ALTER_CONFIGS)
        if denied is not None:
            raise denied
        if kind == BROKER_LOGGER:
            alter_log_levels(broker, resource, validate_only)
            return
        if kind == BROKER:
            for op in resource.configs:
                if op.config_operation not in _OP_NAMES:
                    raise ResourceError(
                        ErrorCode.invalid_request,
                        f"Unknown operations type {op.config_operation}",
                    )
            name = resource.resource_name
            entries = _broker_entries(broker, name)
            current = dict(broker.controller.state.broker_configs.get(name, {}))
            wanted = apply_incremental(current, resource.configs, entries)
            await alter_broker_configs(broker, name, wanted, validate_only)
            return
        if kind == GROUP:
            await alter_group_configs(broker, resource, validate_only)
            return
        if kind == CLIENT_METRICS:
            await alter_client_metrics(broker, resource, validate_only)
            return
        if kind != TOPIC:
            raise ResourceError(ErrorCode.invalid_request, f"Unknown resource type {kind}")
        topic = existing_topic(broker, resource.resource_name)
        current = dict(topic.configs)
        entries = {e.name: e for e in describe_topic_config(current, broker.config)}
        wanted = apply_incremental(current, resource.configs, entries)
        validate_topic_configs(wanted)
        changes: dict[str, str | None] = {
            key: wanted.get(key)
            for key in set(current) | set(wanted)
            if current.get(key) != wanted.get(key)
        }
        if changes:
            await broker.controller.set_topic_configs(
                topic.name, changes, validate_only=validate_only
            )

    deleted = [
        frozenset(c.name for c in resource.configs if c.config_operation == DELETE)
        for resource in resources
    ]
    errors = await _run_alters(broker, resources, _preflight(resources, deleted), alter)
    return _alter_response(resources, errors)


# -- GROUP: share-group configs (KIP-932, KIP-1191) and streams-group ones (KIP-1071) -----

SOURCE_DYNAMIC_GROUP = 8  # ConfigSource.GROUP_CONFIG
SOURCE_DEFAULT = 5
CONFIG_TYPE_STRING = 2


def _share_service(broker: BrokerParts) -> ShareCoordination:
    service = broker.shares
    if service is None or not broker.config.group_share_enable:
        raise ResourceError(ErrorCode.invalid_request, "Group configs need share groups enabled")
    return service


async def alter_group_configs(
    broker: BrokerParts, resource: IncrementalConfigResource, validate_only: bool
) -> None:
    """SET and DELETE of a group's configs, in the cluster metadata. A consumer group's
    (`consumer.*`) and a streams group's (`streams.*`) are served whatever
    `group.share.enable` says, as in Kafka; the others are share groups' and need share
    groups on."""
    group_id = resource.resource_name
    if not group_id:
        raise ResourceError(ErrorCode.invalid_request, "Group name must not be empty")
    changes: dict[str, str | None] = {}
    for op in resource.configs:
        if op.config_operation not in (SET, DELETE):
            raise ResourceError(
                ErrorCode.invalid_config,
                f"Can't {_OP_NAMES.get(op.config_operation, '?')} to key {op.name} "
                "because its type is not LIST.",
            )
        value = op.value if op.config_operation == SET else None
        if op.name in CONSUMER_GROUP_CONFIGS:
            problem = None  # checked together below: one bounds the other
        elif op.name.startswith("streams."):
            problem = validate_streams_group_config(broker.config, op.name, value)
        else:
            problem = _share_service(broker).coordinator.configs.validate(op.name, value)
        if problem is not None:
            raise ResourceError(ErrorCode.invalid_config, problem)
        changes[op.name] = value
    if any(name in CONSUMER_GROUP_CONFIGS for name in changes):
        after = dict(broker.controller.state.group_configs.get(group_id, {}))
        for name, value in changes.items():
            if value is None:
                after.pop(name, None)
            else:
                after[name] = value
        problem = consumer_group_config_problem(broker.config, after)
        if problem is not None:
            raise ResourceError(ErrorCode.invalid_config, problem)
    if validate_only or not changes:
        return
    try:  # in the cluster metadata, as Kafka's ConfigRecords: every broker has them
        await broker.controller.set_group_configs(group_id, changes)
    except ControllerError as exc:
        raise controller_failure(exc) from None


def describe_group_configs(
    broker: BrokerParts, group_id: str, keys: Sequence[str] | None, docs: bool
) -> list[responses.DescribeConfigsResourceResult]:
    from kbroker.share.group_configs import GROUP_CONFIGS

    defaults: dict[str, str | None] = {
        **consumer_group_config_defaults(broker.config),
        **streams_group_config_defaults(broker.config),
    }
    names: tuple[str, ...] = (*CONSUMER_GROUP_CONFIGS, *STREAMS_GROUP_CONFIGS)
    service = broker.shares
    if service is not None and broker.config.group_share_enable:
        # share groups' configs only while share groups are served; streams groups' always
        coordinator = service.coordinator
        names = (*CONSUMER_GROUP_CONFIGS, *GROUP_CONFIGS, *STREAMS_GROUP_CONFIGS)
        defaults |= {
            "share.auto.offset.reset": "latest",
            "share.isolation.level": "read_uncommitted",
            "share.record.lock.duration.ms": str(coordinator.config.record_lock_ms),
            "share.delivery.count.limit": str(coordinator.config.delivery_count_limit),
            "share.partition.max.record.locks": str(coordinator.config.max_record_locks),
            "share.renew.acknowledge.enable": "true",
            "share.session.timeout.ms": str(coordinator.config.session_timeout_ms),
            "share.heartbeat.interval.ms": str(coordinator.config.heartbeat_interval_ms),
            "errors.deadletterqueue.topic.name": None,
            "errors.deadletterqueue.copy.record.enable": "false",
        }
    configs = broker.controller.state.group_configs.get(group_id, {})
    results: list[responses.DescribeConfigsResourceResult] = []
    for name in names:
        if keys is not None and name not in keys:
            continue
        explicit = name in configs
        results.append(
            {
                "name": name,
                "value": configs[name] if explicit else defaults[name],
                "read_only": False,
                "config_source": SOURCE_DYNAMIC_GROUP if explicit else SOURCE_DEFAULT,
                "is_sensitive": False,
                "synonyms": [],
                "config_type": CONFIG_TYPE_STRING,
                "documentation": None,
            }
        )
    return results


# -- CLIENT_METRICS: client telemetry subscriptions (KIP-714) ----------------------------

SOURCE_DYNAMIC_CLIENT_METRICS = 7  # ConfigSource.CLIENT_METRICS_CONFIG
CONFIG_TYPE_INT = 3


@dataclass(frozen=True, slots=True)
class _ClientMetricsEntry:
    """What apply_incremental reads of a config: its type and its base value."""

    config_type: int
    value: str


def _client_metrics_defaults() -> dict[str, _ClientMetricsEntry]:
    return {
        "metrics": _ClientMetricsEntry(CONFIG_TYPE_LIST, ""),
        "interval.ms": _ClientMetricsEntry(CONFIG_TYPE_INT, str(INTERVAL_MS_DEFAULT)),
        "match": _ClientMetricsEntry(CONFIG_TYPE_LIST, ""),
    }


async def alter_client_metrics(
    broker: BrokerParts, resource: IncrementalConfigResource, validate_only: bool
) -> None:
    """A subscription's configs after SET/DELETE/APPEND/SUBTRACT, checked whole as Kafka's
    ClientMetricsConfigs.validate does, then kept in the metadata log."""
    name = resource.resource_name
    current = dict(broker.controller.state.client_metrics.get(name, {}))
    for op in resource.configs:
        if op.name not in CLIENT_METRICS_CONFIGS:
            raise ResourceError(
                ErrorCode.invalid_request, f"Unknown client metrics configuration: {op.name}"
            )
    wanted = apply_incremental(current, resource.configs, _client_metrics_defaults())
    try:
        validate_subscription(name, wanted)
    except SubscriptionError as exc:
        raise ResourceError(exc.code, exc.message) from None
    changes: dict[str, str | None] = {
        key: wanted.get(key)
        for key in set(current) | set(wanted)
        if current.get(key) != wanted.get(key)
    }
    if validate_only or not changes:
        return
    await broker.controller.set_client_metrics(name, changes)


def describe_client_metrics(
    broker: BrokerParts, name: str, keys: Sequence[str] | None
) -> list[responses.DescribeConfigsResourceResult]:
    """The three configs of a subscription; those it does not set at their defaults."""
    if not name:
        raise ResourceError(ErrorCode.invalid_request, "Subscription name can't be empty")
    configs = broker.controller.state.client_metrics.get(name, {})
    results: list[responses.DescribeConfigsResourceResult] = []
    for key, default in _client_metrics_defaults().items():
        if keys is not None and key not in keys:
            continue
        explicit = key in configs
        results.append(
            {
                "name": key,
                "value": configs[key] if explicit else default.value,
                "read_only": False,
                "config_source": SOURCE_DYNAMIC_CLIENT_METRICS if explicit else SOURCE_DEFAULT,
                "is_sensitive": False,
                "synonyms": [],
                "config_type": default.config_type,
                "documentation": None,
            }
        )
    return results


# -- BROKER_LOGGER: Python loggers under log4j's level names -----------------------------

_LOG4J_LEVELS = {
    "TRACE": 5,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "ERROR": logging.ERROR,
    "FATAL": logging.CRITICAL,
    "OFF": logging.CRITICAL + 10,
}


def log4j_level_name(level: int) -> str:
    """The log4j name of the most verbose log4j level that still shows `level` records."""
    for name, value in sorted(_LOG4J_LEVELS.items(), key=lambda kv: -kv[1]):
        if level >= value:
            return name
    return "TRACE"


def _logger(name: str) -> logging.Logger | None:
    if name == ROOT_LOGGER:
        return logging.getLogger()
    existing = logging.Logger.manager.loggerDict.get(name)
    return existing if isinstance(existing, logging.Logger) else None


def current_log_levels() -> dict[str, str]:
    """Every logger that exists in this process, with its effective level."""
    levels = {ROOT_LOGGER: log4j_level_name(logging.getLogger().getEffectiveLevel())}
    for name, logger in sorted(logging.Logger.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger):
            levels[name] = log4j_level_name(logger.getEffectiveLevel())
    return levels


def alter_log_levels(
    broker: BrokerParts, resource: IncrementalConfigResource, validate_only: bool
) -> None:
    """Validate every operation first, then apply them all (KIP-412's order)."""
    check_node_id(broker, resource.resource_name)
    changes: list[tuple[logging.Logger, int]] = []
    for op in resource.configs:
        kind = op.config_operation
        if kind in (APPEND, SUBTRACT):
            raise ResourceError(
                ErrorCode.invalid_request,
                f"{_OP_NAMES[kind]} operation is not allowed for the BROKER_LOGGER resource",
            )
        if kind not in (SET, DELETE):
            raise ResourceError(
                ErrorCode.invalid_request,
                f"Unknown operation type {kind} is not allowed for the BROKER_LOGGER resource",
            )
        logger = _logger(op.name)
        if logger is None:
            raise ResourceError(ErrorCode.invalid_config, f"Logger {op.name} does not exist!")
        if kind == DELETE:
            if op.name == ROOT_LOGGER:
                raise ResourceError(
                    ErrorCode.invalid_request,
                    "Removing the log level of the root logger is not allowed",
                )
            changes.append((logger, logging.NOTSET))
            continue
        level = _LOG4J_LEVELS.get(op.value or "")
        if level is None:
            raise ResourceError(
                ErrorCode.invalid_config,
                f"Cannot set the log level of {op.name} to {op.value} as it is not a supported "
                f"log level. Valid log levels are {', '.join(sorted(_LOG4J_LEVELS))}",
            )
        changes.append((logger, level))
    if not validate_only:
        for logger, level in changes:
            logger.setLevel(level)


# -- ListConfigResources (KIP-1142) --------------------------------------------------------

LIST_CONFIG_RESOURCES = 74
# v0 was ListClientMetricsResources: client-metrics subscriptions only.
LISTABLE_TYPES = {0: (CLIENT_METRICS,), 1: (TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP)}


@handles(LIST_CONFIG_RESOURCES, 0)
def list_config_resources(
    ctx: RequestContext, request: requests.ListConfigResourcesRequest
) -> responses.ListConfigResourcesResponse:
    """The resources that can hold configs, of the types asked (all when none are).

    As Kafka lists them: every topic; every registered broker, as BROKER and as
    BROKER_LOGGER; the groups that have configs set (share groups here); client-metrics
    subscriptions. A type the version does not list answers
    UNSUPPORTED_VERSION for the whole request.
    """
    supported = LISTABLE_TYPES[min(ctx.version, 1)]
    wanted = [int(t) for t in request.resource_types] or list(supported)
    if any(t not in supported for t in wanted):
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.unsupported_version,
            "config_resources": [],
        }
    state = ctx.broker.controller.state
    brokers = sorted(state.brokers)
    found: list[responses.ConfigResource] = []
    for kind in wanted:
        if kind in (BROKER, BROKER_LOGGER):
            found += [{"resource_name": str(b), "resource_type": kind} for b in brokers]
        elif kind == TOPIC:
            found += [{"resource_name": t, "resource_type": TOPIC} for t in sorted(state.topics)]
        elif kind == GROUP:
            configured = state.group_configs
            found += [
                {"resource_name": g, "resource_type": GROUP}
                for g in sorted(configured)
                if configured[g]
            ]
        elif kind == CLIENT_METRICS:
            found += [
                {"resource_name": n, "resource_type": CLIENT_METRICS}
                for n in sorted(state.client_metrics)
            ]
    return {"throttle_time": 0, "error_code": ErrorCode.none, "config_resources": found}
