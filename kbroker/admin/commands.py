"""`kbroker groups list|describe|lag`: consumer groups of a running cluster, as tables."""

from __future__ import annotations

import argparse
import sys

from kbroker.admin.client import ClientError, cluster
from kbroker.admin.groups import (
    describe_group,
    list_groups,
    render_description,
    render_lag,
    render_list,
)

DEFAULT_BOOTSTRAP = "localhost:9092"


def add_group_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--bootstrap",
        default=DEFAULT_BOOTSTRAP,
        metavar="HOST:PORT[,HOST:PORT]",
        # Not read from KBROKER_*: that prefix holds broker settings, which `serve` checks.
        help=f"brokers to ask first (default {DEFAULT_BOOTSTRAP})",
    )
    common.add_argument(
        "--timeout", type=float, default=10.0, help="seconds to wait on each broker"
    )
    groups = sub.add_parser("groups", help="list and describe consumer groups of a cluster")
    commands = groups.add_subparsers(dest="groups_command", required=True)
    commands.add_parser("list", parents=[common], help="every group, its type and state")
    describe = commands.add_parser(
        "describe", parents=[common], help="members, assignments, committed offsets and lag"
    )
    describe.add_argument("group")
    lag = commands.add_parser(
        "lag", parents=[common], help="committed offset and lag per partition"
    )
    lag.add_argument("group")


def run_group_command(args: argparse.Namespace) -> int:
    try:
        with cluster(args.bootstrap, args.timeout) as c:
            if args.groups_command == "list":
                print(render_list(list_groups(c)))
            elif args.groups_command == "describe":
                print(render_description(describe_group(c, args.group)))
            else:
                print(render_lag(describe_group(c, args.group)))
    except ClientError as exc:
        print(f"kbroker groups: {exc}", file=sys.stderr)
        return 1
    return 0
