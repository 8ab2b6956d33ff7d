"""The replicated commands and how each one turns a MetadataState into the next.

A command is `(kind, payload)` where payload holds only plain data (str, int, bytes,
lists, dicts). Everything random or time-dependent (topic ids, timestamps, replica
placement) is decided before the command is proposed, so every replica that applies the
same log reaches the same state. Rules that depend on the state are checked again here:
two proposals made from the same snapshot are ordered by the log, and the loser gets
its error back as the command's outcome instead of a change.

`apply_command` never raises for a refused command; it returns the ControllerError as
the outcome, because an exception would look to the Raft library like a broken replica.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from kbroker.controller import leadership, reassignment
from kbroker.controller.errors import (
    BROKER_ID_NOT_REGISTERED,
    INVALID_PARTITIONS,
    INVALID_REQUEST,
    STALE_BROKER_EPOCH,
    UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
    ControllerError,
)
from kbroker.controller.events import (
    BrokerChanged,
    BrokerConfigsChanged,
    BrokerRegistered,
    BrokerUnregistered,
    ClientQuotasChanged,
    FeaturesChanged,
    GroupConfigsChanged,
    MetadataEvent,
    PartitionChanged,
    PartitionsCreated,
    TopicConfigsChanged,
    TopicCreated,
    TopicDeleted,
    broker_config_events,
)
from kbroker.controller.state import (
    BrokerInfo,
    DelegationToken,
    MetadataState,
    PartitionInfo,
    TopicInfo,
    collision_key,
)
from kbroker.controller.validation import check_replica_list, check_topic_absent, initial_isr
from kbroker.security.acl import AclBinding
from kbroker.security.scram import ScramCredential

log = logging.getLogger("kbroker.controller")

BARRIER = "barrier"
CONTROLLER_ELECTED = "controller_elected"
INIT_CLUSTER = "init_cluster"
REGISTER_BROKER = "register_broker"
CREATE_TOPIC = "create_topic"
DELETE_TOPIC = "delete_topic"
CREATE_PARTITIONS = "create_partitions"
ALTER_TOPIC_CONFIGS = "alter_topic_configs"
ALTER_GROUP_CONFIGS = "alter_group_configs"
ALTER_CLIENT_METRICS = "alter_client_metrics"
PUT_DELEGATION_TOKEN = "put_delegation_token"
REMOVE_DELEGATION_TOKENS = "remove_delegation_tokens"
ALTER_BROKER_CONFIGS = "alter_broker_configs"
UPDATE_FEATURES = "update_features"
KEEP_ELR_SAFE = "keep_elr_safe"
UNREGISTER_BROKER = "unregister_broker"
VOTER_CHANGE = "voter_change"
ALLOCATE_PRODUCER_IDS = "allocate_producer_ids"
BROKER_HEARTBEAT = "broker_heartbeat"
FENCE_BROKER = "fence_broker"
CONTROLLED_SHUTDOWN = "controlled_shutdown"
REPLICAS_OFFLINE = "replicas_offline"
ALTER_PARTITION = "alter_partition"
ELECT_LEADERS = "elect_leaders"
ALTER_PARTITION_REASSIGNMENTS = "alter_partition_reassignments"

UNCLEAN_CONFIG = "unclean.leader.election.enable"
MIN_ISR_CONFIG = "min.insync.replicas"
ALTER_SCRAM_CREDENTIALS = "alter_scram_credentials"
CREATE_ACLS = "create_acls"
ALTER_CLIENT_QUOTAS = "alter_client_quotas"
DELETE_ACLS = "delete_acls"


@dataclass(frozen=True, slots=True)
class Applied:
    state: MetadataState
    outcome: Any  # the command's result, or a ControllerError it was refused with
    events: tuple[MetadataEvent, ...] = ()


def apply_command(state: MetadataState, kind: str, payload: dict[str, Any]) -> Applied:
    handler = _HANDLERS.get(kind)
    if handler is None:
        log.error("ignoring unknown metadata command %r (written by a newer version?)", kind)
        return Applied(state, ControllerError(INVALID_REQUEST, f"unknown command {kind!r}"))
    try:
        return handler(state, payload)
    except ControllerError as e:
        return Applied(state, e)
    except Exception as e:
        # A bug, or a malformed entry: every replica fails the same way on the same entry,
        # so skipping it keeps them identical, where raising would retry it forever.
        log.critical("metadata command %s failed; skipped: %r", kind, payload, exc_info=True)
        return Applied(state, ControllerError(INVALID_REQUEST, f"{kind} failed: {e!r}"))


def _alter_scram_credentials(state: MetadataState, p: dict[str, Any]) -> Applied:
    """Upsert and delete SCRAM credentials (already checked by the handler); deleting
    one another command removed first is no error, the end state is the same."""
    credentials = dict(state.scram_credentials)
    for user, mechanism in p.get("deletions", []):
        credentials.pop((user, mechanism), None)
    for user, mechanism, salt, iterations, stored_key, server_key in p.get("upsertions", []):
        credentials[(user, mechanism)] = ScramCredential(
            mechanism, salt, iterations, stored_key, server_key
        )
    return Applied(_bump(state, scram_credentials=credentials), None)


def _alter_client_quotas(state: MetadataState, p: dict[str, Any]) -> Applied:
    """Set and remove quota values per entity (checked by the handler); an entity left
    with no value is dropped."""
    quotas = dict(state.client_quotas)
    for entity_parts, set_values, removed in p["entries"]:
        entity = tuple((str(t), n) for t, n in entity_parts)
        values = dict(quotas.get(entity, {}))
        values.update(set_values)
        for key in removed:
            values.pop(key, None)
        if values:
            quotas[entity] = values
        else:
            quotas.pop(entity, None)
    return Applied(_bump(state, client_quotas=quotas), None, (ClientQuotasChanged(bool(quotas)),))


def _create_acls(state: MetadataState, p: dict[str, Any]) -> Applied:
    """Add bindings (checked by the handler); one already present is not added twice."""
    present = set(state.acls)
    added = [b for b in (AclBinding.from_plain(a) for a in p["acls"]) if b not in present]
    acls = state.acls + tuple(dict.fromkeys(added))
    return Applied(_bump(state, acls=acls), None)


def _delete_acls(state: MetadataState, p: dict[str, Any]) -> Applied:
    gone = {AclBinding.from_plain(a) for a in p["acls"]}
    return Applied(_bump(state, acls=tuple(b for b in state.acls if b not in gone)), None)


def _bump(state: MetadataState, **changes: Any) -> MetadataState:
    return replace(state, version=state.version + 1, **changes)


def _barrier(state: MetadataState, p: dict[str, Any]) -> Applied:
    return Applied(state, p["token"])


def _controller_elected(state: MetadataState, p: dict[str, Any]) -> Applied:
    new = _bump(state, controller_id=p["node_id"], controller_epoch=p["epoch"])
    return Applied(new, None)


def _init_cluster(state: MetadataState, p: dict[str, Any]) -> Applied:
    """A new cluster: its id, and the feature levels it starts at (a Kafka 4.1+ cluster
    is formatted with eligible.leader.replicas.version=1)."""
    if state.cluster_id is not None:  # the first proposal wins; later ones learn its id
        return Applied(state, state.cluster_id)
    features = {**state.features, **p.get("features", {})}
    # A dynamic quorum's bootstrap voters (its standalone or initial controllers).
    voters = {int(i): (str(d), str(a)) for i, d, a in p.get("voters", ())} or state.voters
    new = _bump(state, cluster_id=p["cluster_id"], features=features, voters=voters)
    new, events = _elr_safety(new, p)
    return Applied(new, p["cluster_id"], events)


def _elr_safety(
    state: MetadataState, p: dict[str, Any]
) -> tuple[MetadataState, tuple[MetadataEvent, ...]]:
    """With ELRs kept, one min.insync.replicas holds for the whole cluster (KIP-966), as
    Kafka's controller makes it when the feature is turned on or a cluster is formatted
    with it: the cluster-level dynamic value is written (the proposing controller's
    static min.insync.replicas, `p["min_isr"]`) unless one is set, and every node-level
    value is removed. A describe then shows it as DYNAMIC_DEFAULT_BROKER_CONFIG, as
    Kafka's does, and it cannot be removed while ELR is on."""
    if not state.elr_enabled:
        return state, ()
    every = {r: dict(c) for r, c in state.broker_configs.items()}
    cluster = every.setdefault("", {})
    cluster.setdefault(MIN_ISR_CONFIG, str(p.get("min_isr", 1)))
    for resource, configs in every.items():
        if resource:
            configs.pop(MIN_ISR_CONFIG, None)
    every = {r: c for r, c in every.items() if c}
    if every == state.broker_configs:
        return state, ()
    events = tuple(broker_config_events(state.broker_configs, every))
    return replace(state, broker_configs=every), events


def _keep_elr_safe(state: MetadataState, p: dict[str, Any]) -> Applied:
    """The ELR's one min.insync.replicas for a cluster that kept ELRs without it (one
    formatted before it was written at the start)."""
    new, events = _elr_safety(state, p)
    if new is state:
        return Applied(state, None)
    return Applied(_bump(new), None, events)


def _voter_change(state: MetadataState, p: dict[str, Any]) -> Applied:
    """A committed change of a dynamic quorum's voters (the Raft log's membership entry,
    applied by every replica at the same position): add or remove one voter."""
    voters = dict(state.voters)
    if p["op"] == "add":
        voters[int(p["node_id"])] = (str(p["directory_id"]), str(p["address"]))
    else:
        voters.pop(int(p["node_id"]), None)
    if voters == state.voters:
        return Applied(state, None)
    return Applied(_bump(state, voters=voters), None)


def _update_features(state: MetadataState, p: dict[str, Any]) -> Applied:
    """Finalize feature levels (UpdateFeatures, checked by the proposer); level 0
    removes a feature. A partition's ELR is kept from the next change on."""
    features = dict(state.features)
    for name, level in p["levels"].items():
        if level > 0:
            features[name] = level
        else:
            features.pop(name, None)
    if features == state.features:
        return Applied(state, features)
    new = _bump(state, features=features)
    safety: tuple[MetadataEvent, ...] = ()
    if new.elr_enabled and not state.elr_enabled:
        new, safety = _elr_safety(new, p)
    return Applied(new, features, (FeaturesChanged(dict(features)), *safety))


def _unregister_broker(state: MetadataState, p: dict[str, Any]) -> Applied:
    """A decommissioned broker's registration goes (Kafka's UnregisterBroker): it leaves
    every ISR and ELR it can and leads nothing, as when fenced, then is forgotten; a
    broker still running registers again with its next heartbeat."""
    node_id = p["node_id"]
    info = state.brokers.get(node_id)
    if info is None:
        raise ControllerError(
            BROKER_ID_NOT_REGISTERED, f"Broker ID {node_id} is not currently registered"
        )
    new = _with_broker(state, replace(info, fenced=True))
    new, changed = _update_partitions(
        new,
        lambda part, usable, rules: _forget_elr(
            leadership.without_broker(part, node_id, usable, rules), node_id
        ),
        _defaults(state, p),
    )
    brokers = {n: b for n, b in new.brokers.items() if n != node_id}
    return Applied(_bump(new, brokers=brokers), None, (*changed, BrokerUnregistered(node_id)))


def _forget_elr(part: PartitionInfo, node_id: int) -> PartitionInfo:
    if node_id not in part.elr and node_id not in part.last_known_elr:
        return part
    return replace(
        part,
        elr=tuple(r for r in part.elr if r != node_id),
        last_known_elr=tuple(r for r in part.last_known_elr if r != node_id),
        partition_epoch=part.partition_epoch + 1,
    )


def _after_unclean_shutdown(
    part: PartitionInfo, node_id: int, rules: leadership.Rules
) -> PartitionInfo:
    """`part` without `node_id` in its ELR (kept in its last known ELR), the broker having
    restarted after an unclean shutdown."""
    if node_id not in part.elr:
        return part
    return leadership.with_elr(part, part, rules, False, unclean_shutdown=(node_id,))


def _register_broker(state: MetadataState, p: dict[str, Any]) -> Applied:
    """A broker (re)joins: a new incarnation with a new broker epoch, unfenced. A restart
    the controller had not noticed first ends the old incarnation's leaderships and ISR
    memberships (its log may have lost an unflushed tail). The replicas the broker names
    offline (held before, but on a log directory that is offline at this start, as a
    KRaft broker's registration leaves such a directory out) leave their ISRs and lead
    nothing; then offline partitions the broker can lead get it as leader."""
    node_id = p["node_id"]
    defaults = _defaults(state, p)
    changed: tuple[MetadataEvent, ...] = ()
    old = state.brokers.get(node_id)
    if old is not None and p.get("previous_epoch", -1) != old.epoch:
        # Not a clean shutdown of the incarnation the controller knows: its log may have
        # lost acknowledged records, so it may not lead from an ELR (Kafka's
        # handleBrokerUncleanShutdown).
        state, changed = _update_partitions(
            state,
            lambda part, usable, rules: _after_unclean_shutdown(part, node_id, rules),
            defaults,
        )
    if old is not None and not old.fenced:
        state = _with_broker(state, replace(old, fenced=True))
        state, gone = _update_partitions(
            state,
            lambda part, usable, unclean: leadership.without_broker(part, node_id, usable, unclean),
            defaults,
        )
        changed += gone
    info = BrokerInfo(
        node_id=node_id,
        host=p["host"],
        port=p["port"],
        rack=p.get("rack"),
        fenced=False,
        last_heartbeat_ms=p["timestamp_ms"],
        epoch=state.version + 1,
        endpoints=tuple((e[0], e[1], e[2]) for e in p.get("endpoints", ())),
        offline_replicas=frozenset(_known_partitions(state, p.get("offline", ()))),
    )
    new = _with_broker(state, info)
    new, dropped = _without_offline_replicas(new, info, info.offline_replicas, defaults)
    new, back = _update_partitions(
        new,
        lambda part, usable, unclean: leadership.with_broker_back(part, node_id, usable, unclean),
        defaults,
    )
    return Applied(new, info, (BrokerRegistered(info), *_latest(changed + dropped + back)))


def _latest(events: tuple[MetadataEvent, ...]) -> tuple[MetadataEvent, ...]:
    """One PartitionChanged per partition: its final state."""
    final: dict[Any, MetadataEvent] = {}
    for event in events:
        key = (
            (event.topic, event.info.partition)
            if isinstance(event, PartitionChanged)
            else id(event)
        )
        final.pop(key, None)
        final[key] = event
    return tuple(final.values())


def _with_broker(state: MetadataState, info: BrokerInfo) -> MetadataState:
    brokers = dict(state.brokers)
    brokers[info.node_id] = info
    return _bump(state, brokers=brokers)


def _current_broker(state: MetadataState, p: dict[str, Any]) -> BrokerInfo:
    info = state.brokers.get(p["node_id"])
    if info is None or info.epoch != p["epoch"]:
        raise ControllerError(
            STALE_BROKER_EPOCH,
            f"broker {p['node_id']} epoch {p['epoch']} is not the registered incarnation",
        )
    return info


def _broker_heartbeat(state: MetadataState, p: dict[str, Any]) -> Applied:
    """Liveness is the active controller's business (it notes when each heartbeat is
    applied); the log changes only when a fenced broker comes back."""
    info = _current_broker(state, p)
    if not info.fenced or info.shutting_down:
        return Applied(state, info)
    back = replace(info, fenced=False)
    new = _with_broker(state, back)
    new, changed = _update_partitions(
        new,
        lambda part, usable, unclean: leadership.with_broker_back(
            part, back.node_id, usable, unclean
        ),
        _defaults(state, p),
    )
    return Applied(new, back, (BrokerChanged(back), *changed))


def _fence_broker(state: MetadataState, p: dict[str, Any]) -> Applied:
    """The active controller stopped hearing from the broker (FENCE_BROKER) or the broker
    asked to shut down (CONTROLLED_SHUTDOWN): it leaves every ISR it can and leads
    nothing."""
    info = _current_broker(state, p)
    shutting_down = p.get("shutting_down", False)
    if info.fenced and info.shutting_down == shutting_down:
        return Applied(state, info)
    gone = replace(info, fenced=True, shutting_down=info.shutting_down or shutting_down)
    new = _with_broker(state, gone)
    new, changed = _update_partitions(
        new,
        lambda part, usable, unclean: leadership.without_broker(
            part, gone.node_id, usable, unclean
        ),
        _defaults(state, p),
    )
    return Applied(new, gone, (BrokerChanged(gone), *changed))


def _replicas_offline(state: MetadataState, p: dict[str, Any]) -> Applied:
    """A broker's log directory failed under these partitions (Kafka's offline log
    directory, which a KRaft broker reports in its heartbeat): its replicas of them are
    recorded offline until it registers again, so it leaves their ISR (unless it is the
    last member), leads none of them, and no later election picks it; a new leader is
    elected from the rest of the ISR."""
    reporter = _current_broker(state, p)
    offline = set(_known_partitions(state, p["partitions"]))
    if not offline <= reporter.offline_replicas:
        reporter = replace(reporter, offline_replicas=reporter.offline_replicas | offline)
        state = _with_broker(state, reporter)
    new, events = _without_offline_replicas(state, reporter, offline, _defaults(state, p))
    return Applied(new, len(events), events)


def _known_partitions(state: MetadataState, partitions: Any) -> Iterator[tuple[uuid.UUID, int]]:
    """The (topic id, partition) pairs of `partitions` ([topic id bytes, index] each) that
    still exist: one deleted meanwhile is skipped."""
    for topic_id, index in partitions:
        topic = state.topics_by_id.get(uuid.UUID(bytes=topic_id))
        if topic is not None and 0 <= index < len(topic.partitions):
            yield topic.topic_id, index


def _without_offline_replicas(
    state: MetadataState,
    broker: BrokerInfo,
    offline: set[tuple[uuid.UUID, int]] | frozenset[tuple[uuid.UUID, int]],
    defaults: Defaults,
) -> tuple[MetadataState, tuple[MetadataEvent, ...]]:
    """`broker`'s replicas of `offline` (already recorded in `state`) leave their ISRs
    and give up leadership, as Kafka's controller handles an offline log directory."""
    changed: dict[str, list[PartitionInfo]] = {}
    for topic_id, index in sorted(offline):
        topic = state.topics_by_id[topic_id]
        partitions = changed.setdefault(topic.name, list(topic.partitions))
        partitions[index] = leadership.without_broker(
            partitions[index],
            broker.node_id,
            leadership.usable_in(state, topic_id, index),
            _rules(topic, defaults),
        )
    return _with_partitions(state, changed)


def _update_partitions(
    state: MetadataState,
    update: Any,
    defaults: Defaults,
) -> tuple[MetadataState, tuple[MetadataEvent, ...]]:
    """Apply `update(partition, usable, unclean)` to every partition; one new TopicInfo
    per topic that changed, and a PartitionChanged per changed partition."""
    events: list[MetadataEvent] = []
    topics = dict(state.topics)
    by_id = dict(state.topics_by_id)
    for name, info in state.topics.items():
        rules = _rules(info, defaults)
        partitions = tuple(
            update(part, leadership.usable_in(state, info.topic_id, part.partition), rules)
            for part in info.partitions
        )
        if partitions == info.partitions:
            continue
        new_info = replace(info, partitions=partitions)
        topics[name] = by_id[info.topic_id] = new_info
        for was, now in zip(info.partitions, partitions, strict=True):
            if was is not now:
                events.append(PartitionChanged(name, info.topic_id, now))
    if not events:
        return state, ()
    return replace(state, topics=topics, topics_by_id=by_id), tuple(events)


class Defaults(NamedTuple):
    """What a topic without its own override gets, as the proposer saw it (the active
    controller's dynamic and static settings), and whether ELRs are kept."""

    unclean: bool
    min_isr: int
    elr: bool


def _defaults(state: MetadataState, p: dict[str, Any]) -> Defaults:
    return Defaults(p.get("unclean", False), p.get("min_isr", 1), state.elr_enabled)


def unclean_allowed(info: TopicInfo, default: bool) -> bool:
    """unclean.leader.election.enable of one topic: its override, else `default`."""
    value = info.configs.get(UNCLEAN_CONFIG)
    return default if value is None else value.strip().lower() == "true"


def _rules(info: TopicInfo, defaults: Defaults) -> leadership.Rules:
    """The election rules of one topic: its overrides over the defaults."""
    unclean = unclean_allowed(info, defaults.unclean)
    min_isr = info.configs.get(MIN_ISR_CONFIG)
    try:
        min_isr_value = defaults.min_isr if min_isr is None else int(min_isr)
    except ValueError:
        min_isr_value = defaults.min_isr
    return leadership.Rules(unclean, min_isr_value, defaults.elr)


def _alter_partition(state: MetadataState, p: dict[str, Any]) -> Applied:
    """A partition leader's ISR change (Kafka's AlterPartition), checked against the
    current leader epoch and partition epoch; answers the partition as it now is."""
    topic_id = uuid.UUID(bytes=p["topic_id"])
    info = state.topics_by_id.get(topic_id)
    if info is None:
        raise ControllerError(UNKNOWN_TOPIC_ID, f"unknown topic id {topic_id}")
    index = p["partition"]
    if not 0 <= index < len(info.partitions):
        raise ControllerError(UNKNOWN_TOPIC_OR_PARTITION, f"{info.name} has no partition {index}")

    usable = leadership.usable_in(state, topic_id, index)
    part = info.partitions[index]
    changed = leadership.alter_isr(
        part,
        leader=p["leader"],
        leader_epoch=p["leader_epoch"],
        partition_epoch=p["partition_epoch"],
        new_isr=p["isr"],
        usable=usable,
        rules=_rules(info, _defaults(state, p)),
    )
    if changed is part:
        return Applied(state, part)
    if changed.is_reassigning:  # the ISR may now hold every target replica
        done = reassignment.complete_if_ready(changed, usable, _rules(info, _defaults(state, p)))
        if done is not changed:
            changed = replace(done, partition_epoch=part.partition_epoch + 1)
    partitions = list(info.partitions)
    partitions[index] = changed
    new_info = replace(info, partitions=tuple(partitions))
    return Applied(
        _with_topic(state, new_info), changed, (PartitionChanged(info.name, topic_id, changed),)
    )


def _new_partition(
    state: MetadataState, p: dict[str, Any], partition: int, replicas: list[int]
) -> PartitionInfo:
    """A created partition: led by the first of its replicas on an active broker, with
    those in its ISR. Commands written before the ISR was chosen this way
    (no "active_isr") keep every replica in it, as they did when first applied."""
    assigned = tuple(replicas)
    isr = initial_isr(assigned, state.brokers, partition) if p.get("active_isr") else assigned
    return PartitionInfo(partition, isr[0], assigned, isr, 0, 0)


def _with_topic(state: MetadataState, info: TopicInfo) -> MetadataState:
    topics = dict(state.topics)
    topics[info.name] = info
    by_id = dict(state.topics_by_id)
    by_id[info.topic_id] = info
    return _bump(state, topics=topics, topics_by_id=by_id)


def _create_topic(state: MetadataState, p: dict[str, Any]) -> Applied:
    name = p["name"]
    check_topic_absent(state, name)
    topic_id = uuid.UUID(bytes=p["topic_id"])
    if topic_id in state.topics_by_id:
        raise ControllerError(INVALID_REQUEST, f"topic id {topic_id} is already in use")
    partitions = tuple(_new_partition(state, p, i, r) for i, r in enumerate(p["assignment"]))
    info = TopicInfo(name, topic_id, partitions, dict(p["configs"]))
    new = _with_topic(state, info)
    collisions = dict(state.topic_collisions)
    collisions[collision_key(name)] = name
    new = replace(new, topic_collisions=collisions)
    return Applied(new, info, (TopicCreated(info),))


def _existing_topic(state: MetadataState, name: str, topic_id: bytes | None) -> TopicInfo:
    """The topic called `name`, provided it is still the incarnation the caller saw."""
    info = state.topics.get(name)
    if info is None or (topic_id is not None and info.topic_id.bytes != topic_id):
        raise ControllerError(
            UNKNOWN_TOPIC_OR_PARTITION, f"This server does not host this topic: {name}"
        )
    return info


def _delete_topic(state: MetadataState, p: dict[str, Any]) -> Applied:
    info = _existing_topic(state, p["name"], p.get("topic_id"))
    topics = dict(state.topics)
    del topics[info.name]
    by_id = dict(state.topics_by_id)
    del by_id[info.topic_id]
    collisions = dict(state.topic_collisions)
    collisions.pop(collision_key(info.name), None)
    new = _bump(state, topics=topics, topics_by_id=by_id, topic_collisions=collisions)
    return Applied(new, info, (TopicDeleted(info.name, info.topic_id),))


def _create_partitions(state: MetadataState, p: dict[str, Any]) -> Applied:
    info = _existing_topic(state, p["name"], p.get("topic_id"))
    first = p["first"]
    if len(info.partitions) != first:  # another create_partitions got in first
        raise ControllerError(
            INVALID_PARTITIONS,
            f"Topic {info.name} now has {len(info.partitions)} partitions; the request "
            f"expected {first}.",
        )
    added = tuple(_new_partition(state, p, first + i, r) for i, r in enumerate(p["assignment"]))
    new_info = replace(info, partitions=info.partitions + added)
    return Applied(_with_topic(state, new_info), new_info, (PartitionsCreated(new_info, added),))


def _alter_topic_configs(state: MetadataState, p: dict[str, Any]) -> Applied:
    info = _existing_topic(state, p["name"], p.get("topic_id"))
    configs = {} if p.get("replace") else dict(info.configs)
    for key in p.get("delete", ()):
        configs.pop(key, None)
    configs.update(p.get("set", {}))
    new_info = replace(info, configs=configs)
    new = _with_topic(state, new_info)
    cleared: tuple[MetadataEvent, ...] = ()
    if configs.get(MIN_ISR_CONFIG) != info.configs.get(MIN_ISR_CONFIG):
        new, cleared = _clear_elrs(new, {info.name})
    return Applied(new, configs, (TopicConfigsChanged(info.name, dict(configs)), *cleared))


def _clear_elrs(
    state: MetadataState, names: Iterable[str] | None = None
) -> tuple[MetadataState, tuple[MetadataEvent, ...]]:
    """A changed min.insync.replicas empties the ELR and last known ELR of the topic's
    partitions at once (of every topic's for the cluster default), as Kafka's
    ClearElrRecord does: who was eligible under the old minimum says nothing under the
    new one, and the next ISR change below the minimum builds them again."""
    changed: dict[str, list[PartitionInfo]] = {}
    for name in state.topics if names is None else names:
        info = state.topics[name]
        if any(part.elr or part.last_known_elr for part in info.partitions):
            changed[name] = [
                replace(part, elr=(), last_known_elr=(), partition_epoch=part.partition_epoch + 1)
                if part.elr or part.last_known_elr
                else part
                for part in info.partitions
            ]
    return _with_partitions(state, changed)


def _alter_group_configs(state: MetadataState, p: dict[str, Any]) -> Applied:
    group_id = p["group"]
    configs = dict(state.group_configs.get(group_id, {}))
    for key in p.get("delete", ()):
        configs.pop(key, None)
    configs.update(p.get("set", {}))
    every = {g: c for g, c in state.group_configs.items() if g != group_id}
    if configs:
        every[group_id] = configs
    return Applied(
        _bump(state, group_configs=every),
        configs,
        (GroupConfigsChanged(group_id, dict(configs)),),
    )


def _alter_client_metrics(state: MetadataState, p: dict[str, Any]) -> Applied:
    """Set and delete configs of one client-metrics subscription (KIP-714); a
    subscription left with no configs is gone, as Kafka removes it."""
    name = p["name"]
    configs = dict(state.client_metrics.get(name, {}))
    for key in p.get("delete", ()):
        configs.pop(key, None)
    configs.update(p.get("set", {}))
    every = {n: c for n, c in state.client_metrics.items() if n != name}
    if configs:
        every[name] = configs
    return Applied(_bump(state, client_metrics=every), configs)


def _put_delegation_token(state: MetadataState, p: dict[str, Any]) -> Applied:
    """A new token, or a token's new expiry (a renewal, or an expiry moved earlier)."""
    token = DelegationToken.from_plain(p["token"])
    tokens = dict(state.delegation_tokens)
    if p.get("existing") and token.token_id not in tokens:
        return Applied(state, None)  # removed meanwhile: nothing to renew
    tokens[token.token_id] = token
    return Applied(_bump(state, delegation_tokens=tokens), None)


def _remove_delegation_tokens(state: MetadataState, p: dict[str, Any]) -> Applied:
    tokens = {i: t for i, t in state.delegation_tokens.items() if i not in set(p["ids"])}
    if len(tokens) == len(state.delegation_tokens):
        return Applied(state, None)
    return Applied(_bump(state, delegation_tokens=tokens), None)


def _alter_broker_configs(state: MetadataState, p: dict[str, Any]) -> Applied:
    """Set and delete dynamic configs of one BROKER resource ("" or a node id)."""
    resource = p["resource"]
    configs = dict(state.broker_configs.get(resource, {}))
    for key in p.get("delete", ()):
        configs.pop(key, None)
    configs.update(p.get("set", {}))
    every = {r: c for r, c in state.broker_configs.items() if r != resource}
    if configs:
        every[resource] = configs
    new = _bump(state, broker_configs=every)
    cleared: tuple[MetadataEvent, ...] = ()
    before = state.broker_configs.get(resource, {}).get(MIN_ISR_CONFIG)
    if resource == "" and configs.get(MIN_ISR_CONFIG) != before:
        new, cleared = _clear_elrs(new)
    return Applied(new, configs, (BrokerConfigsChanged(resource, dict(configs)), *cleared))


def _allocate_producer_ids(state: MetadataState, p: dict[str, Any]) -> Applied:
    start = state.next_producer_id
    return Applied(_bump(state, next_producer_id=start + p["count"]), start)


def _elect_leaders(state: MetadataState, p: dict[str, Any]) -> Applied:
    """ElectLeaders for the listed [topic, partition] pairs; the outcome lists
    [topic, partition, error code, message] per pair (0 where a leader was elected)."""
    outcome: list[list[Any]] = []
    changed: dict[str, list[PartitionInfo]] = {}
    for name, index in p["partitions"]:
        info = state.topics.get(name)
        if info is None or not 0 <= index < len(info.partitions):
            outcome.append([name, index, UNKNOWN_TOPIC_OR_PARTITION, None])
            continue
        partitions = changed.setdefault(name, list(info.partitions))
        try:
            usable = leadership.usable_in(state, info.topic_id, index)
            if p["election_type"] == leadership.UNCLEAN:
                rules = _rules(info, _defaults(state, p))
                partitions[index] = leadership.elect_unclean(partitions[index], usable, rules)
            else:
                partitions[index] = leadership.elect_preferred(partitions[index], usable)
        except ControllerError as e:
            outcome.append([name, index, e.error_code, e.message])
            continue
        outcome.append([name, index, 0, None])
    new, events = _with_partitions(state, changed)
    return Applied(new, outcome, events)


def _alter_partition_reassignments(state: MetadataState, p: dict[str, Any]) -> Applied:
    """AlterPartitionReassignments for [topic, partition, replicas or None] triples
    (None cancels); the outcome lists [topic, partition, error code, message] per
    triple, each partition succeeding or failing on its own, as in Kafka."""
    allow_rf_change = p.get("allow_replication_factor_change", True)
    outcome: list[list[Any]] = []
    changed: dict[str, list[PartitionInfo]] = {}
    for name, index, target in p["partitions"]:
        info = state.topics.get(name)
        if info is None:
            message = f"Unable to find a topic named {name}."
            outcome.append([name, index, UNKNOWN_TOPIC_OR_PARTITION, message])
            continue
        if not 0 <= index < len(info.partitions):
            message = f"Unable to find partition {name}:{index}."
            outcome.append([name, index, UNKNOWN_TOPIC_OR_PARTITION, message])
            continue
        partitions = changed.setdefault(name, list(info.partitions))
        unclean = _rules(info, _defaults(state, p))
        usable = leadership.usable_in(state, info.topic_id, index)
        try:
            if target is None:
                partitions[index] = reassignment.cancel(partitions[index], usable, unclean=unclean)
            else:
                replicas = check_replica_list(target, state.brokers, index)
                partitions[index] = reassignment.reassign(
                    partitions[index],
                    replicas,
                    usable,
                    unclean=unclean,
                    allow_replication_factor_change=allow_rf_change,
                )
        except ControllerError as e:
            outcome.append([name, index, e.error_code, e.message])
            continue
        outcome.append([name, index, 0, None])
    new, events = _with_partitions(state, changed)
    return Applied(new, outcome, events)


def _with_partitions(
    state: MetadataState, changed: dict[str, list[PartitionInfo]]
) -> tuple[MetadataState, tuple[MetadataEvent, ...]]:
    """`state` with the listed topics' partitions replaced; a PartitionChanged for each
    partition that is not the object it was."""
    events: list[MetadataEvent] = []
    new = state
    for name, partitions in changed.items():
        info = state.topics[name]
        if tuple(partitions) == info.partitions:
            continue
        new = _with_topic(new, replace(info, partitions=tuple(partitions)))
        events.extend(
            PartitionChanged(name, info.topic_id, now)
            for was, now in zip(info.partitions, partitions, strict=True)
            if was is not now
        )
    return new, tuple(events)


_HANDLERS = {
    BARRIER: _barrier,
    CONTROLLER_ELECTED: _controller_elected,
    INIT_CLUSTER: _init_cluster,
    VOTER_CHANGE: _voter_change,
    REGISTER_BROKER: _register_broker,
    CREATE_TOPIC: _create_topic,
    DELETE_TOPIC: _delete_topic,
    CREATE_PARTITIONS: _create_partitions,
    ALTER_TOPIC_CONFIGS: _alter_topic_configs,
    ALTER_GROUP_CONFIGS: _alter_group_configs,
    ALTER_CLIENT_METRICS: _alter_client_metrics,
    PUT_DELEGATION_TOKEN: _put_delegation_token,
    REMOVE_DELEGATION_TOKENS: _remove_delegation_tokens,
    ALTER_BROKER_CONFIGS: _alter_broker_configs,
    UPDATE_FEATURES: _update_features,
    KEEP_ELR_SAFE: _keep_elr_safe,
    UNREGISTER_BROKER: _unregister_broker,
    ALLOCATE_PRODUCER_IDS: _allocate_producer_ids,
    BROKER_HEARTBEAT: _broker_heartbeat,
    FENCE_BROKER: _fence_broker,
    CONTROLLED_SHUTDOWN: _fence_broker,
    REPLICAS_OFFLINE: _replicas_offline,
    ALTER_PARTITION: _alter_partition,
    ELECT_LEADERS: _elect_leaders,
    ALTER_PARTITION_REASSIGNMENTS: _alter_partition_reassignments,
    ALTER_SCRAM_CREDENTIALS: _alter_scram_credentials,
    CREATE_ACLS: _create_acls,
    ALTER_CLIENT_QUOTAS: _alter_client_quotas,
    DELETE_ACLS: _delete_acls,
}
