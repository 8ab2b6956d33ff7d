"""The admin commands of `kbroker`, shaped as kafka-topics, kafka-consumer-groups,
kafka-configs and the console producer/consumer shape theirs:

    kbroker topics   list | describe [TOPIC...] | create | alter | delete
                     | reassign TOPIC P=B,B,... | reassignments [TOPIC...]
    kbroker groups   list | describe GROUP | lag GROUP | reset-offsets GROUP ... | delete
    kbroker configs  describe | alter | list          (--topic, --broker, --group, ...)
    kbroker produce TOPIC    lines of stdin as records
    kbroker consume TOPIC    records to stdout
    kbroker cluster status   brokers, controller, partitions that need attention
    kbroker cluster quorum   the metadata quorum as its leader sees it

Every command takes `--bootstrap` (default DEFAULT_BOOTSTRAP, the listener `kbroker
serve` opens by default), `--timeout`, `--output table|json` and, for a TLS or SASL
listener, `--command-config FILE` with Kafka's client properties. A broker that cannot be
reached, or an error it answers, is reported in one line on stderr with exit code 1.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import io
import json
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kbroker.admin import access, configs, consumer, operations, producer, topics
from kbroker.admin.client import ClientError, Cluster, cluster
from kbroker.admin.output import Output, advance
from kbroker.admin.security import SecurityConfigError, load_command_config
from kbroker.protocol import record_codec as codec


class _Lazy:
    """A module imported when one of its names is first asked for."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self._name), attr)


if TYPE_CHECKING:
    from kbroker.admin import groups, log_dirs, quorum
else:
    # Imported on first use: `produce` and `consume` start without the group and log
    # directory code (and the broker settings it reads).
    groups = _Lazy("kbroker.admin.groups")
    log_dirs = _Lazy("kbroker.admin.log_dirs")
    quorum = _Lazy("kbroker.admin.quorum")

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
ADMIN_COMMANDS = ("topics", "groups", "configs", "produce", "consume", "cluster")

Runner = Callable[[Cluster, argparse.Namespace, Output], int]


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--bootstrap",
        "--bootstrap-server",
        default=DEFAULT_BOOTSTRAP,
        metavar="HOST:PORT[,HOST:PORT]",
        # Not read from KBROKER_*: that prefix holds broker settings, which `serve` checks.
        help=f"brokers to ask first (default {DEFAULT_BOOTSTRAP})",
    )
    common.add_argument(
        "--timeout", type=float, default=10.0, help="seconds to wait on each broker"
    )
    common.add_argument(
        "--command-config",
        type=Path,
        metavar="FILE",
        help="client properties for a secured listener (security.protocol, sasl.mechanism, "
        "sasl.jaas.config, ssl.truststore.location, ...), as Kafka's tools take them",
    )
    common.add_argument(
        "--output",
        "-o",
        choices=("table", "json"),
        default="table",
        help="tables for people (default) or one JSON document for scripts",
    )
    return common


def _key_values(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        for pair in item.split(","):
            key, sep, value = pair.partition("=")
            if not sep or not key:
                raise ClientError(f"expected NAME=VALUE, got {pair!r}")
            out[key.strip()] = value
    return out


# -- parsers ------------------------------------------------------------------------------


def add_admin_commands(sub: argparse._SubParsersAction) -> None:
    common = _common()
    _add_topics(sub, common)
    _add_groups(sub, common)
    _add_configs(sub, common)
    _add_log_dirs(sub, common)

    _add_produce(sub, common)
    _add_consume(sub, common)
    access.add_acl_commands(sub, common)
    access.add_user_commands(sub, common)
    access.add_quota_commands(sub, common)
    operations.add_transaction_commands(sub, common)

    cluster_cmd = sub.add_parser("cluster", help="the cluster as a whole")
    cluster_sub = cluster_cmd.add_subparsers(dest="cluster_command", required=True)
    status = cluster_sub.add_parser(
        "status", parents=[common], help="brokers, controller, partitions needing attention"
    )
    status.set_defaults(run=_cluster_status)
    quorum_cmd = cluster_sub.add_parser(
        "quorum",
        parents=[common],
        help="the metadata quorum as its leader sees it (kafka-metadata-quorum describe "
        "--status and --replication)",
    )
    quorum_cmd.add_argument(
        "action",
        nargs="?",
        choices=("describe", "add-controller", "remove-controller"),
        default="describe",
        help="describe (default); add-controller makes the controller --controller-config "
        "describes a voter; remove-controller takes --controller-id with "
        "--controller-directory-id out (a dynamic quorum, KIP-853)",
    )
    quorum_cmd.add_argument(
        "--controller-config",
        metavar="FILE",
        help="add-controller: the new controller's server.properties (its node.id, "
        "CONTROLLER listener and formatted metadata directory)",
    )
    quorum_cmd.add_argument("--controller-id", type=int, help="remove-controller: its node id")
    quorum_cmd.add_argument(
        "--controller-directory-id", help="remove-controller: its metadata directory id"
    )
    quorum_cmd.set_defaults(run=_cluster_quorum)
    operations.add_cluster_commands(cluster_sub, common)


def _add_produce(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    produce = sub.add_parser(
        "produce",
        parents=[common],
        help="send lines of stdin as records, batched (console producer, kcat -P)",
    )
    produce.add_argument("topic")
    produce.add_argument("--key-separator", "-K", help="split each line into key and value at this")
    produce.add_argument("--partition", "-p", type=int, help="send every record to this partition")
    produce.add_argument(
        "--acks",
        type=int,
        choices=(-1, 0, 1),
        default=-1,
        help="-1 (all in-sync replicas, default), 1 (the leader) or 0 (no answer)",
    )
    produce.add_argument(
        "--header",
        "-H",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a header every record carries (repeatable)",
    )
    produce.add_argument(
        "--compression",
        "--compression-codec",
        "-z",
        choices=tuple(codec.CODECS),
        default="none",
        help="compress batches as a producer's compression.type does",
    )
    produce.add_argument(
        "--request-timeout",
        type=float,
        default=30.0,
        help="seconds the broker may take to store a batch (default 30)",
    )
    produce.set_defaults(run=_produce)


def _add_consume(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    consume = sub.add_parser(
        "consume", parents=[common], help="print records of a topic (console consumer, kcat -C)"
    )
    consume.add_argument("topic")
    start = consume.add_mutually_exclusive_group()
    start.add_argument(
        "--from",
        dest="start",
        metavar="WHERE",
        help="beginning, end, an OFFSET, -N (N before the end), @MILLIS or an ISO-8601 "
        "time (default: end, or a group's committed offsets)",
    )
    start.add_argument("--from-beginning", action="store_true", help="the same as --from beginning")
    start.add_argument("--offset", type=int, help="the same as --from OFFSET")
    consume.add_argument(
        "--partition", "-p", type=int, action="append", help="read only these (repeatable)"
    )
    consume.add_argument(
        "--group",
        "-G",
        help="consume as a member of this consumer group (KIP-848), committing what it "
        "prints; it starts at the group's committed offsets",
    )
    consume.add_argument("--max-messages", "-c", type=int, help="stop after this many records")
    consume.add_argument(
        "--exit-at-end", "-e", action="store_true", help="stop at the end of every partition"
    )
    consume.add_argument(
        "--idle-timeout",
        type=float,
        default=5.0,
        help="stop once nothing new has come for this many seconds (default 5; 0 never)",
    )
    consume.add_argument("--print-key", action="store_true", help="print key, separator, value")
    consume.add_argument(
        "--key-separator", default="\t", help="between key and value (default a tab)"
    )
    consume.add_argument(
        "--format",
        "-f",
        metavar="FORMAT",
        help="kcat's -f: %%t topic, %%p partition, %%o offset, %%k key, %%s value, %%T "
        "timestamp, %%h headers, %%K/%%S key/value length; \\n \\t escapes",
    )
    consume.add_argument(
        "--isolation-level",
        choices=("read_uncommitted", "read_committed"),
        default="read_uncommitted",
    )
    consume.set_defaults(run=_consume)


def _add_topics(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser("topics", help="list, describe, create, alter and delete topics")
    commands = parser.add_subparsers(dest="topics_command", required=True)
    listing = commands.add_parser("list", parents=[common], help="every topic")
    listing.add_argument("--internal", action="store_true", help="include internal topics")
    listing.set_defaults(run=_topics_list)
    describe = commands.add_parser(
        "describe", parents=[common], help="partitions, leaders, replicas, ISR and configs"
    )
    describe.add_argument("topic", nargs="*", help="topics to describe (default: all)")
    describe.add_argument(
        "--under-replicated-partitions", action="store_true", help="only partitions short of ISR"
    )
    describe.add_argument(
        "--unavailable-partitions", action="store_true", help="only partitions without a leader"
    )
    describe.set_defaults(run=_topics_describe)
    create = commands.add_parser("create", parents=[common], help="create a topic")
    create.add_argument("topic")
    create.add_argument("--partitions", type=int, default=-1, help="default: num.partitions")
    create.add_argument(
        "--replication-factor", type=int, default=-1, help="default: default.replication.factor"
    )
    create.add_argument(
        "--config", action="append", default=[], metavar="NAME=VALUE", help="topic config"
    )
    create.add_argument("--if-not-exists", action="store_true")
    create.set_defaults(run=_topics_create)
    alter = commands.add_parser(
        "alter", parents=[common], help="add partitions, set or delete topic configs"
    )
    alter.add_argument("topic")
    alter.add_argument("--partitions", type=int, help="the new total partition count")
    alter.add_argument("--config", action="append", default=[], metavar="NAME=VALUE")
    alter.add_argument("--delete-config", action="append", default=[], metavar="NAME")
    alter.set_defaults(run=_topics_alter)
    delete = commands.add_parser("delete", parents=[common], help="delete topics")
    delete.add_argument("topic", nargs="+")
    delete.add_argument("--if-exists", action="store_true")
    delete.set_defaults(run=_topics_delete)
    reassign = commands.add_parser(
        "reassign",
        parents=[common],
        help="move partitions to other brokers, or cancel a move (kafka-reassign-partitions)",
    )
    reassign.add_argument("topic")
    reassign.add_argument(
        "assignment",
        nargs="*",
        metavar="PARTITION=BROKER,BROKER,...",
        help="the new replicas of a partition, the first the preferred leader",
    )
    reassign.add_argument(
        "--cancel",
        type=int,
        action="append",
        default=[],
        metavar="PARTITION",
        help="cancel the partition's reassignment in flight (repeatable)",
    )
    reassign.set_defaults(run=_topics_reassign)
    reassignments = commands.add_parser(
        "reassignments", parents=[common], help="partition reassignments in flight"
    )
    reassignments.add_argument("topic", nargs="*", help="only these topics (default: all)")
    reassignments.set_defaults(run=_topics_reassignments)
    operations.add_trim_command(commands, common)


def _add_log_dirs(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "log-dirs", help="describe brokers' log directories, move a replica between them"
    )
    commands = parser.add_subparsers(dest="log_dirs_command", required=True)
    describe = commands.add_parser(
        "describe",
        parents=[common],
        help="each log directory with its replicas, sizes and free space (kafka-log-dirs)",
    )
    describe.add_argument("--broker", type=int, action="append", help="only these (repeatable)")
    describe.add_argument("--topic", action="append", help="only these topics' replicas")
    describe.set_defaults(run=_log_dirs_describe)
    move = commands.add_parser(
        "move", parents=[common], help="move a replica to another log directory of its broker"
    )
    move.add_argument("topic")
    move.add_argument("partition", type=int)
    move.add_argument("--broker", type=int, required=True, help="the broker holding the replica")
    move.add_argument("--dir", required=True, help="the broker's log directory (absolute path)")
    move.set_defaults(run=_log_dirs_move)


def _add_groups(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser("groups", help="list, describe, reset and delete consumer groups")
    commands = parser.add_subparsers(dest="groups_command", required=True)
    commands.add_parser(
        "list", parents=[common], help="every group, its type and state"
    ).set_defaults(run=_groups_list)
    describe = commands.add_parser(
        "describe", parents=[common], help="members, assignments, committed offsets and lag"
    )
    describe.add_argument("group")
    describe.set_defaults(run=_groups_describe)
    lag = commands.add_parser(
        "lag", parents=[common], help="committed offset and lag per partition"
    )
    lag.add_argument("group")
    lag.set_defaults(run=_groups_lag)
    reset = commands.add_parser(
        "reset-offsets",
        parents=[common],
        help="move committed offsets (a dry run unless --execute), as kafka-consumer-groups",
    )
    reset.add_argument("group")
    which = reset.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--topic", action="append", metavar="TOPIC[:P,P]", help="topic or topic:partitions"
    )
    which.add_argument("--all-topics", action="store_true", help="every topic with offsets")
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument(
        "--to-datetime", metavar="YYYY-MM-DDTHH:MM:SS[.sss][+HH:MM]", help="local time unless zoned"
    )
    to.add_argument("--to-offset", type=int)
    to.add_argument("--shift-by", type=int, metavar="N", help="committed offset + N (N may be <0)")
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="show the new offsets (default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    reset.set_defaults(run=_groups_reset)
    delete = commands.add_parser(
        "delete", parents=[common], help="delete groups that have no members, with their offsets"
    )
    delete.add_argument("group", nargs="+")
    delete.set_defaults(run=_groups_delete)


def _add_configs(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser("configs", help="describe and alter configs (kafka-configs)")
    commands = parser.add_subparsers(dest="configs_command", required=True)
    resource = argparse.ArgumentParser(add_help=False)
    which = resource.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic")
    which.add_argument("--broker", help="a broker's node id")
    which.add_argument("--broker-logger", help="a broker's node id: its loggers")
    which.add_argument("--group")
    describe = commands.add_parser(
        "describe", parents=[common, resource], help="configs of one resource, with sources"
    )
    describe.add_argument("--all", action="store_true", help="defaults too, not only overrides")
    describe.set_defaults(run=_configs_describe)
    alter = commands.add_parser(
        "alter", parents=[common, resource], help="set (--add-config) or revert (--delete-config)"
    )
    alter.add_argument("--add-config", action="append", default=[], metavar="NAME=VALUE[,...]")
    alter.add_argument("--delete-config", action="append", default=[], metavar="NAME[,...]")
    alter.set_defaults(run=_configs_alter)
    listing = commands.add_parser(
        "list", parents=[common], help="resources that have configs (ListConfigResources)"
    )
    listing.add_argument(
        "--type",
        action="append",
        choices=sorted(configs.RESOURCE_TYPES),
        help="only these types (repeatable; default all)",
    )
    listing.set_defaults(run=_configs_list)


def run_admin_command(args: argparse.Namespace) -> int:
    """Run the chosen command; a ClientError is one line on stderr and exit code 1."""
    out = Output(args.output)
    try:
        security = load_command_config(args.command_config) if args.command_config else None
    except SecurityConfigError as exc:
        print(f"kbroker {args.command}: {args.command_config}: {exc}", file=sys.stderr)
        return 2
    try:
        with cluster(args.bootstrap, args.timeout, security) as c:
            code: int = args.run(c, args, out)
            return code
    except ClientError as exc:
        print(f"kbroker {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except (BrokenPipeError, SystemExit):
        raise
    except Exception as exc:  # a broker's answer this client did not expect: one line
        print(f"kbroker {args.command}: unexpected {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


# -- topics -------------------------------------------------------------------------------


def _topics_list(c: Cluster, args: argparse.Namespace, out: Output) -> int:
    md = topics.metadata(c)
    shown = [t for t in md.topics if args.internal or not t.internal]
    if out.json:
        out.data(
            [
                {
                    "name": t.name,
                    "partitions": len(t.partitions),
                    "replication_factor": t.replication_factor,
                    "internal": t.internal,
                }
                for t in shown
            ]
        )
    else:
        out.table(
            ["TOPIC", "PARTITIONS", "REPLICAS", "INTERNAL"],
            [
                (t.name, len(t.partitions), t.replication_factor, str(t.internal).lower())
                for t in shown
            ],
        )
    return 0


def _topics_describe(c: Cluster, args: argparse.Namespace, out: Output) -> int:
    md = topics.metadata(c, args.topic or None)
    shown = md.topics if args.topic else [t for t in md.topics if not t.internal]
    described = configs.describe_many(c, "topic", [t.name for t in shown])
    overrides = {
        name: {e.name: e.value for e in entries if e.source == "DYNAMIC_TOPIC_CONFIG"}
        for name, entries in described.items()
    }

    # As kafka-topics does: a partition being moved shows its adding and removing
    # replicas, and is under-replicated only against the replicas it started with.
    moving = topics.reassignments_by_partition(c)

    def under_replicated(t: topics.TopicInfo, p: topics.PartitionInfo) -> bool:
        return p.under_replicated_during(moving.get((t.name, p.partition)))

    def wanted(t: topics.TopicInfo, p: topics.PartitionInfo) -> bool:
        if args.under_replicated_partitions and not under_replicated(t, p):
            return False
        return not (args.unavailable_partitions and p.leader >= 0)

    def joined(ids: tuple[int, ...]) -> str:
        return ",".join(map(str, ids))

    stats = topics.partition_stats(c, shown)

    if out.json:
        docs = []
        for t in shown:
            doc = topics.topic_as_dict(t)
            doc["configs"] = overrides[t.name]
            for d in doc["partitions"]:
                d.update(asdict(stats[(t.name, d["partition"])]))
                move = moving.get((t.name, d["partition"]))
                if move is not None:
                    d["adding_replicas"] = list(move.adding)
                    d["removing_replicas"] = list(move.removing)
            doc["partitions"] = [
                d for d, p in zip(doc["partitions"], t.partitions, strict=True) if wanted(t, p)
            ]
            docs.append(doc)
        out.data(docs)
        return 0
    for t in shown:
        configs_text = ",".join(f"{k}={v}" for k, v in sorted(overrides[t.name].items()))
        out.text(
            f"Topic: {t.name}\tTopicId: {t.topic_id}\tPartitionCount: {len(t.partitions)}\t"
            f"ReplicationFactor: {t.replication_factor}\tConfigs: {configs_text}"
        )
        headers = ["PARTITION", "LEADER", "REPLICAS", "ISR", "OFFLINE", "EPOCH", "START-OFFSET",
                   "END-OFFSET", "SIZE"]  # fmt: skip
        with_moves = any(name == t.name for name, _ in moving)
        if with_moves:
            headers += ["ADDING", "REMOVING"]
        rows: list[tuple[object, ...]] = []
        for p in t.partitions:
            if not wanted(t, p):
                continue
            st = stats[(t.name, p.partition)]
            row: tuple[object, ...] = (
                p.partition,
                "none" if p.leader < 0 else p.leader,
                joined(p.replicas),
                joined(p.isr),
                joined(p.offline) or "-",
                p.leader_epoch,
                st.start_offset,
                st.end_offset,
                st.size,
            )
            if with_moves:
                move = moving.get((t.name, p.partition))
                row += (joined(move.adding), joined(move.removing)) if move else ("", "")
            rows.append(row)
        out.table(headers, rows)
        out.text()
    return 0


def _topics_create(c: Cluster, args: argparse.Namespace, out: Output) -> int:
    created = topics.create_topic(
        c,
        args.topic,
        args.partitions,
        args.replication_factor,
        _key_values(args.config),
        if_not_exists=args.if_not_exists,
    )
    if out.json:
        out.data({"topic": args.topic, "created": created})
    else:
        out.text(f"Created topic {args.topic}." if created else f"Topic {args.topic} exists.")
    return 0


def _topics_alter(c: Cluster, args: argparse.Namespace, out: Output) -> int:
    if args.partitions is None and not args.config and not args.delete_config:
        raise ClientError("nothing to alter: give --partitions, --config or --delete-config")
    if args.partitions is not None:
        topics.add_partitions(c, args.topic, args.partitions)
    if args.config or args.delete_config:
        configs.alter_configs(
            c, "topic", args.topic, _key_values(args.config), _names(args.delete_config)
        )
    if out.json:
        out.data({"topic": args.topic, "altered": True})
    else:
        out.text(f"Altered topic {args.topic}.")
    return 0


def _topics_delete(c: Cluster, args: argparse.Namespace, out: Output) -> int:
    names = list(args.topic)
    if args.if_exists:
        existing = {t.name for t in topics.metadata(c).topics}
        names = [n for n in names if n in existing]
    if names:
        topics.delete_topics(c, names)
    if out.json:
        out.data({"deleted": names})
    else:
        for name in names:
            out.text(f"Deleted topic {name}.")
    return 0


def _reassignment_targets(args: argparse.Namespace) -> dict[int, list[int] | None]:
    targets: dict[int, list[int] | None] = {p: None for p in args.cancel}
    for item in args.assignment:
        partition, sep, brokers = item.partition("=")
        try:
            targets[int(partition)] = [int(b) for b in brokers.split(",") if b.strip()]
        except ValueError:
            sep = ""
        if not sep:
            raise ClientError(f"expected PARTITION=BROKER,BROKER,..., got {item!r}")
    if not targets:
        raise ClientError("nothing to reassign: give PARTITION=BROKERS or --cancel PARTITION")
    return targets


def _topics_reassign(c: Cluster, args: argparse.Namespace, out: Output) -> int:
    targets = _reassignment_targets(args)
    topics.reassign_partitions(c, args.topic, targets)
    if out.json:
        out.data(
            {
                "topic": args.topic,
                "reassigned": {str(p): r for p, r in targets.items() if r is not None},
                "cancelled": [p for p, r in targets.items() if r is None],
            }
        )
    else:
        for p, r in sorted(targets.items()):
            if r is None:
                out.text(f"Cancelled the reassignment of {args.topic}-{p}.")
            else:
                out.text(f"Reassigning {args.topic}-{p} to {','.join(map(str, r))}.")
    return 0


def _log_dirs_describe(c: Cluster, args: argparse.Namespace, out: Output) -> int:
    found = log_dirs.describe_log_dirs(c, args.broker, args.topic)
    if out.json:
        out.data([asdict(d) for d in found])
        return 0
    out.table(
        ["BROKER", "LOG DIR", "ERROR", "REPLICAS", "TOTAL BYTES", "USABLE BYTES"],
        [
            (d.broker, d.path, d.error or "-", len(d.replicas), d.total_bytes, d.usable_bytes)
            for d in found
        ],
    )
    out.text()
    out.table(
        ["BROKER", "LOG DIR", "TOPIC", "PARTITION", "SIZE", "OFFSET LAG", "FUTURE"],
        [
            (d.broker, d.path, r.topic, r.partition, r.size, r.offset_lag, r.future)
            for d in found
            for r in d.replicas
        ],
    )
    return 0


def _log_dirs_move(c: Cluster, args: argparse.Namespace, out: Output) -> int:
    log_dirs.move_replica(c, args.topic, args.partition, args.broker, args.dir)
    if out.json:
        out.data({"topic": args.topic, "partition": args.partition, "broker": args.broker,
                  "dir": args.dir})  # fmt: skip
    else:
        out.text(
            f"Moving {args.topic}-{args.partition} on broker {args.broker} to {args.dir}; "
            "`kbroker log-dirs describe` shows it as FUTURE there until it takes over."
        )
    return 0


def _topics_reassignments(c: Cluster, args: argparse.Namespace, out: Output) -> int:
    found = topics.list_reassignments(c, args.topic or None)
    if out.json:
        out.data([asdict(r) for r in found])
    else:
        out.table(
            ["TOPIC", "PARTITION", "REPLICAS", "ADDING", "REMOVING"],
            [
                (
                    r.topic,
                    r.partition,
                    ",".join(map(str, r.replicas)),
                    ",".join(map(str, r.adding)),
                    ",".join(map(str, r.removing)),
                )
                for r in found
            ],
        )
    return 0


# -- groups -------------------------------------------------------------------------------


def _groups_list(c: Cluster, args: argparse.Namespace, out: Output) -> int:
    found = groups.list_groups(c)
    if out.json:
        out.data([asdict(g) for g in found])
    else:
        out.text(groups.render_list(found))
    return 0


def _group_json(d: groups.GroupDescription) -> dict[str, object]:
    return {
        "group_id": d.group_id,
        "type": d.group_type,
        "state": d.state,
        "coordinator": {
            "node_id": d.coordinator[0],
            "host": d.coordinator[1],
            "port": d.coordinator[2],
        },
        "epoch": d.epoch,
        "assignment_epoch": d.assignment_epoch,
        "assignor": d.assignor,
        "members": [
            {**asdict(m), "assignment": [list(tp) for tp in m.assignment]} for m in d.members
        ],
        "partitions": [
            {
                "topic": p.topic,
                "partition": p.partition,
                "committed_offset": p.committed,
                "log_end_offset": p.log_end,
                "lag": p.lag,
                "member_id": p.member.member_id if p.member else None,
                **({"in_flight": p.in_flight} if p.share else {}),
            }
            for p in d.partitions
        ],
        "total_lag": d.total_lag,
    }


def _groups_describe(c: Cluster, args: argparse.Namespace, out: Output) -> int:
    d = groups.describe_group(c, args.group)
    if out.json:
        out.data(_group_json(d))
    else:
        out.text(groups.render_description(d))
    return 0


def _groups_lag(c: Cluster, args: argparse.Namespace, out: Output) -> int:
    d = groups.describe_group(c, args.group)
    if out.json:
        doc = _group_json(d)
        out.data({k: doc[k] for k in ("group_id", "partitions", "total_lag")})
    else:
        out.text(groups.render_lag(d))
    return 0


def parse_datetime(text: str) -> int:
    """Epoch milliseconds of an ISO-8601 time; one without a zone is local time, as in
    kafka-consumer-groups' --to-datetime."""
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise ClientError(f"bad --to-datetime {text!r}: expected YYYY-MM-DDTHH:MM:SS") from None
    if when.tzinfo is None:
        when = when.astimezone()
    return int(when.timestamp() * 1000)


def _groups_reset(c: Cluster, args: argparse.Namespace, out: Output) -> int:
    if args.to_earliest:
        strategy, value = "earliest", None
    elif args.to_latest:
        strategy, value = "latest", None
    elif args.to_datetime is not None:
        strategy, value = "datetime", parse_datetime(args.to_datetime)
    elif args.shift_by is not None:
        strategy, value = "shift", args.shift_by
    else:
        strategy, value = "offset", args.to_offset
    targets = groups.reset_targets(c, args.group, args.topic or [], args.all_topics)
    with out.progress(f"planning {len(targets)} partitions", total=None):
        plan = groups.plan_reset(c, args.group, targets, strategy, value)
    if args.execute:
        groups.apply_reset(c, args.group, plan)
    if out.json:
        out.data(
            {
                "group_id": args.group,
                "executed": bool(args.execute),
                "partitions": [asdict(r) for r in plan],
            }
        )
    else:
        out.table(
            ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
            [(args.group, r.topic, r.partition, r.new) for r in plan],
        )
        if not args.execute:
            out.note("Dry run: nothing committed. Run again with --execute to apply.")
    return 0


def _groups_delete(c: Cluster, args: argparse.Namespace, out: Output) -> int:
    for group in args.group:
        groups.delete_group(c, group)
        if not out.json:
            out.text(f"Deleted group {group}.")
    if out.json:
        out.data({"deleted": list(args.group)})
    return 0


# -- configs ------------------------------------------------------------------------------


def _resource(args: argparse.Namespace) -> tuple[str, str]:
    for kind in ("topic", "broker", "broker_logger", "group"):
        name = getattr(args, kind)
        if name is not None:
            return kind.replace("_", "-"), name
    raise ClientError("name a resource: --topic, --broker, --broker-logger or --group")


def _names(items: list[str]) -> list[str]:
    return [n.strip() for item in items for n in item.split(",") if n.strip()]


def _configs_describe(c: Cluster, args: argparse.Namespace, out: Output) -> int:
    kind, name = _resource(args)
    entries = configs.describe_configs(c, kind, name)
    shown = (
        entries if args.all or kind == "broker-logger" else [e for e in entries if not e.is_default]
    )
    if out.json:
        out.data(
            {"resource_type": kind, "resource_name": name, "configs": [asdict(e) for e in shown]}
        )
    else:
        out.table(
            ["NAME", "VALUE", "SOURCE", "READ-ONLY"],
            [
                (
                    e.name,
                    "(sensitive)" if e.sensitive else e.value,
                    e.source,
                    str(e.read_only).lower(),
                )
                for e in shown
            ],
        )
    return 0


def _configs_alter(c: Cluster, args: argparse.Namespace, out: Output) -> int:
    kind, name = _resource(args)
    to_set, to_delete = _key_values(args.add_config), _names(args.delete_config)
    if not to_set and not to_delete:
        raise ClientError("nothing to alter: give --add-config or --delete-config")
    configs.alter_configs(c, kind, name, to_set, to_delete)
    if out.json:
        out.data(
            {"resource_type": kind, "resource_name": name, "set": to_set, "deleted": to_delete}
        )
    else:
        out.text(f"Completed updating config for {kind} {name}.")
    return 0


def _configs_list(c: Cluster, args: argparse.Namespace, out: Output) -> int:
    found = configs.list_config_resources(c, args.type or [])
    if out.json:
        out.data([{"resource_type": t, "resource_name": n} for t, n in found])
    else:
        out.table(["TYPE", "NAME"], found)
    return 0


# -- records ------------------------------------------------------------------------------


def _produce(c: Cluster, args: argparse.Namespace, out: Output) -> int:
    headers = []
    for item in args.header:
        key, sep, value = item.partition("=")
        if not sep:
            raise ClientError(f"expected --header KEY=VALUE, got {item!r}")
        headers.append((key, value))
    with out.progress(f"producing to {args.topic}", total=None) as bar:
        sender = producer.Producer(
            c,
            args.topic,
            acks=args.acks,
            partition=args.partition,
            key_separator=None if args.key_separator is None else args.key_separator.encode(),
            headers=codec.headers_blob(headers),
            compression=codec.CODECS[args.compression],
            request_timeout_ms=int(args.request_timeout * 1000),
            on_acked=lambda n: advance(bar, n),
        )
        try:
            stdin = getattr(sys.stdin, "buffer", None)
            sender.send_stream(stdin or io.BytesIO(sys.stdin.read().encode()))
        except KeyboardInterrupt:
            sender.result.interrupted = True
        result = sender.finish()
    if out.json:
        out.data(
            {
                "topic": result.topic,
                "acks": result.acks,
                "produced": result.produced,
                "sent": result.sent,
                "partitions": [
                    {"partition": p, "records": n, "first_offset": first, "last_offset": last}
                    for p, (n, first, last) in sorted(result.partitions.items())
                ],
                "error": result.error,
                "interrupted": result.interrupted,
            }
        )
    if result.interrupted:
        out.note(f"Interrupted: {sender.describe_done()} by {args.topic}.")
        return 130
    if result.error is not None:
        raise ClientError(f"{result.error}; {sender.describe_done()}")
    if not out.json:
        if result.acks == 0:
            out.note(f"Sent {result.sent} records to {args.topic} (acks=0: not acknowledged).")
        else:
            out.note(f"Produced {result.acknowledged} records to {args.topic}.")
    return 0


def _consume(c: Cluster, args: argparse.Namespace, out: Output) -> int:
    md = topics.metadata(c, [args.topic])
    every = [p.partition for p in md.topics[0].partitions]
    chosen = every if args.partition is None else args.partition
    for p in chosen:
        if p not in every:
            raise ClientError(f"topic {args.topic} has no partition {p}")
    if args.start is not None:
        start = consumer.parse_from(args.start)
    elif args.from_beginning:
        start = consumer.Start("beginning")
    elif args.offset is not None:
        start = consumer.Start("offset", args.offset)
    else:
        start = consumer.Start("end")

    def make_fetcher(positions: dict[int, int]) -> consumer.Fetcher:
        return consumer.Fetcher(
            c,
            args.topic,
            positions,
            isolation_level=1 if args.isolation_level == "read_committed" else 0,
            exit_at_end=args.exit_at_end,
            idle_timeout_s=args.idle_timeout or None,
        )

    printer = RecordPrinter(out, args)
    if args.group is not None:
        if args.partition is not None:
            raise ClientError("--partition and --group exclude each other: the group assigns")
        from kbroker.admin.group_consumer import consume_in_group

        def print_section(p: int, section: codec.Section, skip: int) -> tuple[int, int | None]:
            n = printer.section(args.topic, p, section, skip)
            return n, printer.after

        try:
            consume_in_group(
                c, args.group, args.topic, start, make_fetcher, print_section,
                lambda: printer.full,
            )  # fmt: skip
        finally:
            out.note(f"Processed a total of {printer.count} messages")
        return 0
    fetcher = make_fetcher(consumer.start_positions(c, args.topic, chosen, start))
    try:
        with out.progress(f"consuming {args.topic}", args.max_messages, printing=True) as bar:
            for p, section, skip in fetcher.batches():
                n = printer.section(args.topic, p, section, skip)
                advance(bar, n)
                if printer.full:
                    break
    finally:
        fetcher.close()
        out.note(f"Processed a total of {printer.count} messages")
    return 0


class RecordPrinter:
    """Writes consumed records as asked: values (after keys), kcat's --format, or one
    JSON object a line; counts them and stops at --max-messages."""

    def __init__(self, out: Output, args: argparse.Namespace) -> None:
        self.out = out
        self.limit: int | None = args.max_messages
        self.count = 0
        self.json = out.json
        separator = args.key_separator.encode().decode("unicode_escape").encode()
        self.key_sep = separator if args.print_key else None
        self.parts = consumer.compile_format(args.format) if args.format else None
        self.after: int | None = None  # the offset after the last record printed

    @property
    def full(self) -> bool:
        return self.limit is not None and self.count >= self.limit

    def section(self, topic: str, p: int, section: codec.Section, skip: int) -> int:
        plain = self.parts is None and not self.json
        if plain and (self.limit is None or self.limit - self.count >= section.count):
            text, n = codec.join_values(section.data, section.count, skip, self.key_sep, b"\n")
            self.out.write_bytes(text)
            self.count += n
            self.after = section.next if n else None
            return n
        lines = []
        n = 0
        self.after = None
        for delta, ts_delta, key, value, headers in codec.decode(section.data, section.count, skip):
            if self.full:
                break
            offset = section.base_offset + delta
            ts = section.log_append_time
            timestamp = section.base_timestamp + ts_delta if ts is None else ts
            if self.json:
                doc = {
                    "topic": topic,
                    "partition": p,
                    "offset": offset,
                    "timestamp": timestamp,
                    "key": _text(key),
                    "value": _text(value),
                    "headers": {_text(k): _text(v) for k, v in headers},
                }
                lines.append(json.dumps(doc, separators=(",", ":")).encode() + b"\n")
            elif self.parts is not None:
                lines.append(
                    consumer.format_record(
                        self.parts, topic, p, offset, timestamp, key, value, headers
                    )
                )
            else:
                prefix = b"" if self.key_sep is None else (key or b"") + self.key_sep
                lines.append(prefix + (value or b"") + b"\n")
            self.count += 1
            n += 1
            self.after = offset + 1
        self.out.write_bytes(b"".join(lines))
        return n


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="backslashreplace")


# -- cluster ------------------------------------------------------------------------------


def _cluster_status(c: Cluster, args: argparse.Namespace, out: Output) -> int:
    md = topics.metadata(c)
    partitions = [p for t in md.topics for p in t.partitions]
    moving = topics.reassignments_by_partition(c)
    # Partitions an operator must look at: without a leader, or short of their replicas
    # (a partition being moved counted against the replicas it started with).
    troubled = [
        (t.name, p, "offline" if p.leader < 0 else "under-replicated")
        for t in md.topics
        for p in t.partitions
        if p.leader < 0 or p.under_replicated_during(moving.get((t.name, p.partition)))
    ]
    attention = [
        {
            "topic": name,
            "partition": p.partition,
            "problem": problem,
            "leader": p.leader,
            "replicas": list(p.replicas),
            "isr": list(p.isr),
        }
        for name, p, problem in troubled
    ]
    under = sum(1 for _, _, problem in troubled if problem == "under-replicated")
    offline = sum(1 for _, _, problem in troubled if problem == "offline")
    leaders: dict[int, int] = {}
    for p in partitions:
        leaders[p.leader] = leaders.get(p.leader, 0) + 1
    summary = {
        "cluster_id": md.cluster_id,
        "controller_id": md.controller_id,
        "brokers": [
            {**asdict(b), "leader_partitions": leaders.get(b.node_id, 0)} for b in md.brokers
        ],
        "topics": len(md.topics),
        "partitions": len(partitions),
        "under_replicated_partitions": under,
        "offline_partitions": offline,
        "attention": attention,
    }
    if out.json:
        out.data(summary)
        return 0
    out.text(f"Cluster {md.cluster_id}, controller {md.controller_id}")
    out.text(
        f"{len(md.brokers)} brokers, {len(md.topics)} topics, {len(partitions)} partitions, "
        f"{under} under-replicated, {offline} offline"
    )
    out.text()
    out.table(
        ["NODE", "HOST", "PORT", "RACK", "LEADERS", "CONTROLLER"],
        [
            (
                b.node_id,
                b.host,
                b.port,
                b.rack,
                leaders.get(b.node_id, 0),
                "yes" if b.node_id == md.controller_id else "",
            )
            for b in md.brokers
        ],
    )
    if troubled:
        out.text()
        out.table(
            ["TOPIC", "PARTITION", "PROBLEM", "LEADER", "REPLICAS", "ISR"],
            [
                (
                    name,
                    p.partition,
                    problem,
                    "none" if p.leader < 0 else p.leader,
                    ",".join(map(str, p.replicas)),
                    ",".join(map(str, p.isr)),
                )
                for name, p, problem in troubled
            ],
        )
    return 0


def _cluster_quorum(c: Cluster, args: argparse.Namespace, out: Output) -> int:
    if args.action == "add-controller":
        if not args.controller_config:
            raise ClientError("add-controller needs --controller-config")
        controller = quorum.controller_from_config(args.controller_config)
        quorum.add_controller(c, controller)
        out.text(
            f"Added controller {controller.node_id} with directory id "
            f"{controller.directory_id} and endpoints: "
            + ", ".join(f"{n}://{h}:{p}" for n, h, p in controller.listeners)
        )
        return 0
    if args.action == "remove-controller":
        if args.controller_id is None or not args.controller_directory_id:
            raise ClientError(
                "remove-controller needs --controller-id and --controller-directory-id"
            )
        quorum.remove_controller(c, args.controller_id, args.controller_directory_id)
        out.text(
            f"Removed KRaft controller {args.controller_id} with directory id "
            f"{args.controller_directory_id}"
        )
        return 0
    info = quorum.describe_quorum(c)
    lag, lag_ms = info.max_follower_lag()
    if out.json:
        out.data(
            {
                "leader_id": info.leader_id,
                "leader_epoch": info.leader_epoch,
                "high_watermark": info.high_watermark,
                "max_follower_lag": lag,
                "max_follower_lag_time_ms": lag_ms,
                "replicas": [asdict(r) for r in info.replicas],
            }
        )
        return 0
    out.text(f"LeaderId:              {info.leader_id}")
    out.text(f"LeaderEpoch:           {info.leader_epoch}")
    out.text(f"HighWatermark:         {info.high_watermark}")
    out.text(f"MaxFollowerLag:        {lag}")
    out.text(f"MaxFollowerLagTimeMs:  {lag_ms}")
    out.text(f"CurrentVoters:         {info.voters}")
    out.text(f"CurrentObservers:      {info.observers}")
    out.text()
    now_ms = int(datetime.datetime.now(datetime.UTC).timestamp() * 1000)

    def ago(timestamp: int) -> str:
        return "unknown" if timestamp < 0 else f"{max(0, now_ms - timestamp)} ms ago"

    out.table(
        ["NODE", "STATUS", "LOG END OFFSET", "LAG", "LAST FETCH", "LAST CAUGHT UP"],
        [
            (
                r.node_id,
                r.status,
                r.log_end_offset,
                r.lag,
                ago(r.last_fetch_timestamp),
                ago(r.last_caught_up_timestamp),
            )
            for r in info.replicas
        ],
    )
    return 0
