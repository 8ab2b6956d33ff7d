"""Operations on partitions, the cluster and transactions:

    kbroker topics trim TOPIC --offset N          (kafka-delete-records, rpk topic trim-prefix)
    kbroker cluster elect-leaders                 (kafka-leader-election)
    kbroker cluster features [upgrade|downgrade]  (kafka-features)
    kbroker transactions list | describe | abort  (kafka-transactions)
    kbroker producers describe TOPIC              (kafka-transactions describe-producers)

Each asks the broker Kafka's tool asks: DeleteRecords of each partition's leader,
ElectLeaders, ApiVersions' feature levels and UpdateFeatures, ListTransactions of every
broker, DescribeTransactions of the transaction's coordinator, DescribeProducers of
each partition's leader, and WriteTxnMarkers to abort a hanging transaction.
"""

from __future__ import annotations

import argparse
import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from kbroker.admin.client import ClientError, Cluster
from kbroker.admin.output import Output
from kbroker.admin.topics import check, error_of, metadata

DELETE_RECORDS = 21
WRITE_TXN_MARKERS = 27
FIND_COORDINATOR = 10
API_VERSIONS = 18
ELECT_LEADERS = 43
UPDATE_FEATURES = 57
DESCRIBE_PRODUCERS = 61
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66
ELECTION_TYPES = {"preferred": 0, "unclean": 1}


def _partitions_of(c: Cluster, topic: str, wanted: list[int] | None) -> list[int]:
    every = [p.partition for p in metadata(c, [topic]).topics[0].partitions]
    for p in wanted or ():
        if p not in every:
            raise ClientError(f"topic {topic} has no partition {p}")
    return list(wanted) if wanted else every


def _by_leader(c: Cluster, topic: str, partitions: list[int]) -> dict[tuple[str, int], list[int]]:
    md = metadata(c, [topic])
    grouped: dict[tuple[str, int], list[int]] = {}
    for p in partitions:
        address = md.leader_address((topic, p))
        if address is None:
            raise ClientError(f"no leader for {topic}-{p}")
        grouped.setdefault(address, []).append(p)
    return grouped


# -- topics trim -----------------------------------------------------------------------------


def add_trim_command(topics_commands: argparse._SubParsersAction, common: Any) -> None:
    for name, text in (
        ("trim", "delete records before an offset (rpk topic trim-prefix)"),
        ("delete-records", "the same as trim (kafka-delete-records)"),
    ):
        trim = topics_commands.add_parser(name, parents=[common], help=text)
        trim.add_argument("topic")
        trim.add_argument(
            "--offset",
            type=int,
            required=True,
            help="the new start offset; -1 for the end (delete every record)",
        )
        trim.add_argument(
            "--partition", "-p", type=int, action="append", help="only these (default: all)"
        )
        trim.set_defaults(run=_topics_trim)


def delete_records(
    c: Cluster, topic: str, partitions: list[int], offset: int, timeout_ms: int = 30_000
) -> dict[int, int]:
    """DeleteRecords on each partition's leader; each partition's new start offset."""
    found: dict[int, int] = {}
    for (host, port), ps in _by_leader(c, topic, partitions).items():
        response = c.connection(host, port).call(
            DELETE_RECORDS,
            {
                "topics": [
                    {"name": topic, "partitions": [{"partition_index": p, "offset": offset}
                                                   for p in ps]}
                ],
                "timeout": timeout_ms,
            },
            versions=(0, 2),
        )  # fmt: skip
        for t in response.topics:
            for r in t.partitions:
                check(r.error_code, f"deleting records of {topic}-{r.partition_index}")
                found[int(r.partition_index)] = int(r.low_watermark)
    return dict(sorted(found.items()))


def _topics_trim(c: Cluster, args: argparse.Namespace, out: Output) -> int:
    partitions = _partitions_of(c, args.topic, args.partition)
    starts = delete_records(c, args.topic, partitions, args.offset)
    if out.json:
        out.data(
            {
                "topic": args.topic,
                "partitions": [{"partition": p, "start_offset": o} for p, o in starts.items()],
            }
        )
    else:
        out.table(
            ["TOPIC", "PARTITION", "START-OFFSET"], [(args.topic, p, o) for p, o in starts.items()]
        )
    return 0


# -- cluster elect-leaders and features ------------------------------------------------------


def add_cluster_commands(cluster_sub: argparse._SubParsersAction, common: Any) -> None:
    elect = cluster_sub.add_parser(
        "elect-leaders",
        parents=[common],
        help="elect the preferred (or, unclean, any live) replica leader (kafka-leader-election)",
    )
    elect.add_argument("--election-type", choices=tuple(ELECTION_TYPES), default="preferred")
    which = elect.add_mutually_exclusive_group(required=True)
    which.add_argument("--all-topic-partitions", action="store_true", help="every partition")
    which.add_argument("--topic", help="this topic's partitions (or --partition ones)")
    elect.add_argument("--partition", "-p", type=int, action="append", help="with --topic")
    elect.set_defaults(run=_elect_leaders)
    features = cluster_sub.add_parser(
        "features",
        parents=[common],
        help="feature levels supported and finalized (kafka-features describe)",
    )
    features.set_defaults(run=_features_describe)
    features_sub = features.add_subparsers(dest="features_command")
    for name, text in (
        ("upgrade", "raise finalized feature levels (kafka-features upgrade)"),
        ("downgrade", "lower finalized feature levels (kafka-features downgrade)"),
    ):
        change = features_sub.add_parser(name, parents=[common], help=text)
        change.add_argument(
            "--feature", action="append", required=True, metavar="NAME=LEVEL", help="repeatable"
        )
        change.add_argument("--dry-run", action="store_true", help="validate only")
        if name == "downgrade":
            change.add_argument(
                "--unsafe", action="store_true", help="allow a downgrade that loses metadata"
            )
        change.set_defaults(run=_features_update, features_command=name)


def _elect_leaders(c: Cluster, args: argparse.Namespace, out: Output) -> int:
    if args.partition and not args.topic:
        raise ClientError("--partition needs --topic")
    wanted = None
    if args.topic:
        wanted = [
            {"topic": args.topic, "partitions": _partitions_of(c, args.topic, args.partition)}
        ]
    response = c.any().call(
        ELECT_LEADERS,
        {
            "election_type": ELECTION_TYPES[args.election_type],
            "topic_partitions": wanted,
            "timeout": 30_000,
        },
        versions=(0, 2),
    )
    check(getattr(response, "error_code", 0), "electing leaders")
    rows = []
    failed = 0
    for t in response.replica_election_results:
        for r in t.partition_result:
            error = error_of(r.error_code)
            if error == ErrorCode.none:
                outcome = "elected"
            elif error == ErrorCode.election_not_needed:
                outcome = "not needed"
            else:
                outcome = error.name.upper() + (f" ({r.error_message})" if r.error_message else "")
                failed += 1
            rows.append({"topic": t.topic, "partition": int(r.partition_id), "result": outcome})
    rows.sort(key=lambda r: (r["topic"], r["partition"]))
    if out.json:
        out.data(rows)
    elif rows:
        out.table(["TOPIC", "PARTITION", "RESULT"], [tuple(r.values()) for r in rows])
    else:
        out.note("No partition needed an election.")
    if failed:
        raise ClientError(f"{failed} of {len(rows)} elections failed")
    return 0


def describe_features(c: Cluster) -> dict[str, Any]:
    """ApiVersions v3+ of one broker: supported ranges, finalized levels and their epoch."""
    conn = c.any()
    version = conn.version_for(API_VERSIONS, (3, 4))
    answer = conn.request(
        API_VERSIONS,
        version,
        client_software_name="kbroker-admin",
        client_software_version="1",
    )
    check(answer.error_code, "ApiVersions")
    finalized = {f.name: int(f.max_version_level) for f in answer.finalized_features or ()}
    features = [
        {
            "feature": f.name,
            "supported_min": int(f.min_version),
            "supported_max": int(f.max_version),
            "finalized": finalized.get(f.name, 0),
        }
        for f in answer.supported_features or ()
    ]
    return {
        "finalized_epoch": int(answer.finalized_features_epoch),
        "features": sorted(features, key=lambda f: f["feature"]),
    }


def _features_describe(c: Cluster, args: argparse.Namespace, out: Output) -> int:
    found = describe_features(c)
    if out.json:
        out.data(found)
    else:
        out.table(
            ["FEATURE", "SUPPORTED-MIN", "SUPPORTED-MAX", "FINALIZED", "EPOCH"],
            [(*f.values(), found["finalized_epoch"]) for f in found["features"]],
        )
    return 0


def _features_update(c: Cluster, args: argparse.Namespace, out: Output) -> int:
    updates = []
    for item in args.feature:
        name, sep, level = item.partition("=")
        if not sep or not level.strip().lstrip("-").isdigit():
            raise ClientError(f"expected --feature NAME=LEVEL, got {item!r}")
        kind = 1 if args.features_command == "upgrade" else (3 if args.unsafe else 2)
        updates.append({"feature": name.strip(), "max_version_level": int(level),
                        "upgrade_type": kind, "allow_downgrade": kind != 1})  # fmt: skip
    conn = c.any()
    if UPDATE_FEATURES not in conn.versions:
        raise ClientError(
            f"{conn.host}:{conn.port} does not serve UpdateFeatures (UNSUPPORTED_VERSION): "
            "its feature levels cannot be changed over the wire"
        )
    response = conn.call(
        UPDATE_FEATURES,
        {"timeout": 30_000, "feature_updates": updates, "validate_only": bool(args.dry_run)},
        versions=(0, 1),
    )
    check(response.error_code, f"{args.features_command} of features", response.error_message)
    for r in getattr(response, "results", ()) or ():
        check(r.error_code, f"feature {r.feature}", r.error_message)
    done = {u["feature"]: u["max_version_level"] for u in updates}
    if out.json:
        out.data({"dry_run": bool(args.dry_run), args.features_command: done})
    else:
        verb = "Would set" if args.dry_run else "Set"
        for name, level in done.items():
            out.text(f"{verb} {name} to level {level}.")
    return 0


# -- transactions and producers --------------------------------------------------------------


def add_transaction_commands(sub: argparse._SubParsersAction, common: Any) -> None:
    parser = sub.add_parser(
        "transactions", help="list, describe and abort transactions (kafka-transactions)"
    )
    commands = parser.add_subparsers(dest="transactions_command", required=True)
    listing = commands.add_parser(
        "list", parents=[common], help="transactional ids every coordinator knows"
    )
    listing.add_argument("--state", action="append", help="only in these states (repeatable)")
    listing.add_argument("--producer-id", type=int, action="append", help="only these producers")
    listing.add_argument(
        "--duration-filter", type=int, metavar="MS", help="only those open longer than this"
    )
    listing.set_defaults(run=_transactions_list)
    describe = commands.add_parser(
        "describe", parents=[common], help="one transaction as its coordinator holds it"
    )
    describe.add_argument("transactional_id")
    describe.set_defaults(run=_transactions_describe)
    abort = commands.add_parser(
        "abort",
        parents=[common],
        help="abort a hanging transaction on a partition (WriteTxnMarkers to its leader)",
    )
    abort.add_argument("--topic", required=True)
    abort.add_argument("--partition", type=int, required=True)
    abort.add_argument(
        "--start-offset",
        type=int,
        required=True,
        help="the first offset of the transaction (kbroker producers describe shows it)",
    )
    abort.set_defaults(run=_transactions_abort)
    producers = sub.add_parser(
        "producers", help="active producers of partitions (kafka-transactions describe-producers)"
    )
    producers_sub = producers.add_subparsers(dest="producers_command", required=True)
    describe_producers = producers_sub.add_parser(
        "describe", parents=[common], help="producer ids, epochs, sequences and open transactions"
    )
    describe_producers.add_argument("topic")
    describe_producers.add_argument("--partition", "-p", type=int, action="append")
    describe_producers.set_defaults(run=_producers_describe)


def _transactions_list(c: Cluster, args: argparse.Namespace, out: Output) -> int:
    md = metadata(c, [])
    rows: list[dict[str, Any]] = []
    for b in md.brokers:
        response = c.connection(b.host, b.port).call(
            LIST_TRANSACTIONS,
            {
                "state_filters": args.state or [],
                "producer_id_filters": args.producer_id or [],
                "duration_filter": -1 if args.duration_filter is None else args.duration_filter,
                "transactional_id_pattern": None,
            },
            versions=(0, 2),
        )
        check(response.error_code, f"listing transactions of broker {b.node_id}")
        rows.extend(
            {
                "transactional_id": t.transactional_id,
                "coordinator": b.node_id,
                "producer_id": int(t.producer_id),
                "state": t.transaction_state,
            }
            for t in response.transaction_states
        )
    rows.sort(key=lambda r: r["transactional_id"])
    if out.json:
        out.data(rows)
    else:
        out.table(
            ["TRANSACTIONAL-ID", "COORDINATOR", "PRODUCER-ID", "STATE"],
            [tuple(r.values()) for r in rows],
        )
    return 0


def _coordinator(c: Cluster, transactional_id: str) -> tuple[int, str, int]:
    response = c.any().call(
        FIND_COORDINATOR,
        {"key": transactional_id, "key_type": 1, "coordinator_keys": [transactional_id]},
        versions=(1, 4),
    )
    if getattr(response, "coordinators", None):
        found = response.coordinators[0]
        check(
            found.error_code, f"finding the coordinator of {transactional_id}", found.error_message
        )
        return int(found.node_id), found.host, int(found.port)
    check(response.error_code, f"finding the coordinator of {transactional_id}")
    return int(response.node_id), response.host, int(response.port)


def _transactions_describe(c: Cluster, args: argparse.Namespace, out: Output) -> int:
    node, host, port = _coordinator(c, args.transactional_id)
    response = c.connection(host, port).call(
        DESCRIBE_TRANSACTIONS, {"transactional_ids": [args.transactional_id]}, versions=(0, 0)
    )
    t = response.transaction_states[0]
    check(t.error_code, f"describing transaction {args.transactional_id}")
    start = t.transaction_start_time
    start_ms = (
        int(start.timestamp() * 1000) if isinstance(start, datetime.datetime) else int(start or -1)
    )
    doc = {
        "transactional_id": t.transactional_id,
        "coordinator": node,
        "state": t.transaction_state,
        "producer_id": int(t.producer_id),
        "producer_epoch": int(t.producer_epoch),
        "timeout_ms": int(t.transaction_timeout.total_seconds() * 1000)
        if isinstance(t.transaction_timeout, datetime.timedelta)
        else int(t.transaction_timeout),
        "start_time_ms": start_ms,
        "partitions": sorted(f"{tp.topic}-{p}" for tp in t.topics for p in tp.partitions),
    }
    if out.json:
        out.data(doc)
    else:
        out.table(
            ["COORDINATOR", "TRANSACTIONAL-ID", "PRODUCER-ID", "EPOCH", "STATE", "TIMEOUT-MS",
             "START-TIME-MS", "PARTITIONS"],
            [(doc["coordinator"], doc["transactional_id"], doc["producer_id"],
              doc["producer_epoch"], doc["state"], doc["timeout_ms"], doc["start_time_ms"],
              ",".join(doc["partitions"]) or "-")],
        )  # fmt: skip
    return 0


def describe_producers(
    c: Cluster, topic: str, partitions: list[int] | None
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for (host, port), ps in _by_leader(c, topic, _partitions_of(c, topic, partitions)).items():
        response = c.connection(host, port).call(
            DESCRIBE_PRODUCERS,
            {"topics": [{"name": topic, "partition_indexes": ps}]},
            versions=(0, 0),
        )
        for t in response.topics:
            for p in t.partitions:
                check(p.error_code, f"describing producers of {topic}-{p.partition_index}",
                      p.error_message)  # fmt: skip
                rows.extend(
                    {
                        "topic": topic,
                        "partition": int(p.partition_index),
                        "producer_id": int(a.producer_id),
                        "producer_epoch": int(a.producer_epoch),
                        "last_sequence": int(a.last_sequence),
                        "last_timestamp": int(a.last_timestamp),
                        "coordinator_epoch": int(a.coordinator_epoch),
                        "current_txn_start_offset": int(a.current_txn_start_offset),
                    }
                    for a in p.active_producers
                )
    return sorted(rows, key=lambda r: (r["partition"], r["producer_id"]))


def _producers_describe(c: Cluster, args: argparse.Namespace, out: Output) -> int:
    rows = describe_producers(c, args.topic, args.partition)
    if out.json:
        out.data(rows)
    else:
        out.table(
            ["TOPIC", "PARTITION", "PRODUCER-ID", "EPOCH", "LAST-SEQUENCE", "LAST-TIMESTAMP",
             "COORDINATOR-EPOCH", "CURRENT-TXN-START-OFFSET"],
            [tuple(r.values()) for r in rows],
        )  # fmt: skip
    return 0


def _transactions_abort(c: Cluster, args: argparse.Namespace, out: Output) -> int:
    producers = describe_producers(c, args.topic, [args.partition])
    match = [p for p in producers if p["current_txn_start_offset"] == args.start_offset]
    if not match:
        raise ClientError(
            f"no open transaction starts at offset {args.start_offset} of "
            f"{args.topic}-{args.partition}"
        )
    producer = match[0]
    ((host, port),) = _by_leader(c, args.topic, [args.partition])
    response = c.connection(host, port).call(
        WRITE_TXN_MARKERS,
        {
            "markers": [
                {
                    "producer_id": producer["producer_id"],
                    "producer_epoch": producer["producer_epoch"],
                    "transaction_result": False,
                    "topics": [{"name": args.topic, "partition_indexes": [args.partition]}],
                    "coordinator_epoch": producer["coordinator_epoch"],
                    "transaction_version": 0,
                }
            ]
        },
        versions=(1, 1),
    )
    for marker in response.markers:
        for t in marker.topics:
            for p in t.partitions:
                check(p.error_code, f"aborting the transaction on {t.name}-{p.partition_index}")
    if out.json:
        out.data({"aborted": producer})
    else:
        out.text(
            f"Aborted the transaction of producer {producer['producer_id']} (epoch "
            f"{producer['producer_epoch']}) on {args.topic}-{args.partition} from offset "
            f"{args.start_offset}."
        )
    return 0
