"""`kbroker format`: prepare a controller's metadata directory for a dynamic quorum
(KIP-853), as `kafka-storage format` does.

It writes the directory's meta.properties (the cluster id, the node id and a new
directory id) and, for a controller that starts as a voter, the quorum's first voters:
`--standalone` makes this controller the only one, `--initial-controllers` names every
initial voter as `id@host:port:directory-id`, and `--no-initial-controllers` leaves the
node an observer until AddRaftVoter makes it a voter. A node whose directory was
wiped is formatted again, with `--no-initial-controllers`: it comes back with a new
directory id, as an observer.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from kbroker.config.listeners import format_address, parse_address


def add_parser(sub: argparse._SubParsersAction) -> None:
    fmt = sub.add_parser(
        "format",
        help="format a controller's metadata directory for a dynamic quorum (kafka-storage format)",
    )
    fmt.add_argument("--config", "-c", type=Path, help="server.properties")
    fmt.add_argument(
        "--override", action="append", default=[], metavar="NAME=VALUE", help="set a property"
    )
    fmt.add_argument("--cluster-id", "-t", required=True, help="the cluster's id")
    fmt.add_argument(
        "--ignore-formatted", "-g", action="store_true", help="a formatted directory is no error"
    )
    how = fmt.add_mutually_exclusive_group(required=True)
    how.add_argument(
        "--standalone", "-s", action="store_true", help="this controller is the only voter"
    )
    how.add_argument(
        "--initial-controllers",
        "-I",
        metavar="ID@HOST:PORT:DIRECTORY_ID,...",
        help="the quorum's initial voters, this controller among them",
    )
    how.add_argument(
        "--no-initial-controllers",
        "-N",
        action="store_true",
        help="start as an observer, until added as a voter",
    )


def parse_initial_controllers(text: str) -> dict[int, tuple[str, str]]:
    """`id@host:port:directory-id,...` as node id -> (directory id, "host:port");
    ValueError naming the entry at fault."""
    voters: dict[int, tuple[str, str]] = {}
    for entry in (e.strip() for e in text.split(",")):
        node, sep, rest = entry.partition("@")
        address, colon, directory = rest.rpartition(":")
        if not sep or not colon or not node.isdigit() or not directory:
            raise ValueError(f"{entry!r} is not id@host:port:directory-id")
        host, port = parse_address(address)
        if int(node) in voters:
            raise ValueError(f"node id {node} is named twice")
        voters[int(node)] = (directory, format_address(host, port))
    return voters


def run(args: argparse.Namespace) -> int:
    from kbroker.config import ConfigError, load_broker_config
    from kbroker.controller.controller import VOTERS_FILE
    from kbroker.controller.raft import write_voters_file
    from kbroker.storage.meta_properties import (
        MetaProperties,
        MetaPropertiesError,
        new_directory_id,
        read_meta_properties,
        write_meta_properties,
    )

    def fail(message: str) -> int:
        print(f"kbroker format: {message}", file=sys.stderr)
        return 1

    try:
        config = load_broker_config(args.config, args.override, os.environ)
    except ConfigError as exc:
        return fail(f"configuration error: {exc}")
    quorum = config.quorum
    if not quorum.dynamic:
        return fail(
            "only a controller of a dynamic quorum is formatted: set "
            "controller.quorum.bootstrap.servers and cluster.secret, without "
            "controller.quorum.voters"
        )
    directory = config.metadata_dir
    try:
        existing = read_meta_properties(directory)
    except (MetaPropertiesError, OSError) as exc:
        return fail(str(exc))
    if existing is not None:
        if args.ignore_formatted:
            print(f"{directory} is already formatted; left as it is")
            return 0
        return fail(f"{directory} is already formatted (use --ignore-formatted to skip it)")
    voters: dict[int, tuple[str, str]] | None = None
    if args.standalone:
        directory_id = new_directory_id()
        assert quorum.self_address is not None  # a dynamic controller has one
        voters = {quorum.node_id: (directory_id, quorum.self_address)}
    elif args.initial_controllers:
        try:
            voters = parse_initial_controllers(args.initial_controllers)
        except ValueError as exc:
            return fail(f"--initial-controllers: {exc}")
        own = voters.get(quorum.node_id)
        if own is None:
            return fail(f"--initial-controllers does not name node.id {quorum.node_id}")
        directory_id = own[0]
    else:
        directory_id = new_directory_id()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if voters is not None:
            (directory / "__controller").mkdir(exist_ok=True)
            write_voters_file(str(directory / "__controller" / VOTERS_FILE), voters)
        write_meta_properties(
            directory, MetaProperties(args.cluster_id, quorum.node_id, directory_id)
        )
    except OSError as exc:
        return fail(f"cannot write {directory}: {exc}")
    role = "an initial voter" if voters is not None else "an observer until added as a voter"
    print(f"Formatted {directory} (directory.id {directory_id}) as {role}")
    return 0
