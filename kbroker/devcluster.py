"""`kbroker dev`: an N-node cluster on this host for development, in one command.

Every node is a voter of the metadata quorum and a broker (as docker-compose runs them),
a child process of the command with its data and log under `--dir` (node-1/, node-2/,
...). Ports: Kafka on `--port` and the next N-1 (9092, 9093, 9094 by default), the Raft
listeners 1000 above them, HTTP (/metrics, /health, /ready) on 9644 and up; `--port 0`
takes any free ports instead. The node ids (1..N), the ports and a random cluster secret
are chosen on the first start and kept in `<dir>/cluster.json`, so running the command
again on the same directory brings the same cluster back with its topics.

How many nodes: one per core by default (`--nodes cores`), and at least 3, the smallest
cluster that keeps serving when a node is lost: each node is one event loop on one core,
so that is what uses every core of the host. `--nodes N` runs N. The nodes share one
host, so none is given a `broker.rack`: a rack label says which nodes fail together,
and here they all do.

Ctrl-C (or SIGTERM) stops every node cleanly and waits for each; a node that dies is
reported and the others go on. The command exits 0 when every node stopped cleanly.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import Any

from kbroker.testing.nodes import (
    Node,
    NodeStartError,
    cluster_nodes,
    free_ports,
    new_secret,
    start_all,
    stop_all,
)

MIN_NODES = 3
MAX_NODES = 64
DEFAULT_DIR = "data-cluster"
DEFAULT_PORT = 9092
CONTROLLER_PORT_OFFSET = 1000
DEFAULT_HTTP_PORT = 9644
STATE_FILE = "cluster.json"


class DevClusterError(Exception):
    """Said in one line, exit status 2."""


def node_count(text: str) -> int:
    if text == "cores":
        return min(MAX_NODES, max(MIN_NODES, os.cpu_count() or 1))
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'cores', got {text!r}") from None
    if not 1 <= count <= MAX_NODES:
        raise argparse.ArgumentTypeError(f"between 1 and {MAX_NODES} nodes, got {count}")
    return count


def port_number(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= port <= 65535 - 2 * CONTROLLER_PORT_OFFSET:
        raise argparse.ArgumentTypeError(f"port {port} out of range")
    return port


def add_parser(sub: argparse._SubParsersAction) -> None:
    dev = sub.add_parser(
        "dev",
        help="run an N-node cluster on this host for development (Ctrl-C stops it)",
        description=(__doc__ or "").split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    dev.add_argument(
        "--nodes",
        "-n",
        type=node_count,
        default=None,
        metavar="N|cores",
        help=f"how many nodes (default 'cores': one per core, at least {MIN_NODES})",
    )
    dev.add_argument(
        "--dir",
        type=Path,
        default=Path(DEFAULT_DIR),
        help=f"where the nodes keep their data and logs (default ./{DEFAULT_DIR})",
    )
    dev.add_argument(
        "--port",
        type=port_number,
        default=DEFAULT_PORT,
        help=f"Kafka port of node 1, the others following (default {DEFAULT_PORT}; 0: any free)",
    )
    dev.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a broker property for every node (repeatable)",
    )


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _plan(count: int, base: int) -> dict[str, Any]:
    """Ports and secret of a new cluster."""
    if base == 0:
        ports = free_ports(3 * count)
        kafka, raft, http = ports[:count], ports[count : 2 * count], ports[2 * count :]
    else:
        kafka = [base + i for i in range(count)]
        raft = [base + CONTROLLER_PORT_OFFSET + i for i in range(count)]
        http = [DEFAULT_HTTP_PORT + i for i in range(count)]
        http = http if all(_port_free(p) for p in http) else free_ports(count, kafka + raft)
    return {
        "nodes": count,
        "ports": kafka,
        "controller_ports": raft,
        "http_ports": http,
        "secret": new_secret(),
    }


def load_or_plan(directory: Path, nodes: int | None, base: int) -> dict[str, Any]:
    """The cluster kept in `directory`, or a new one planned (and written there)."""
    state_path = directory / STATE_FILE
    if state_path.exists():
        try:
            state = json.loads(state_path.read_text())
            count = int(state["nodes"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise DevClusterError(f"cannot read {state_path}: {exc}") from None
        if nodes is not None and nodes != count:
            raise DevClusterError(
                f"{directory} holds a {count}-node cluster; use --nodes {count}, "
                "or another --dir for a new one"
            )
        return state
    state = _plan(nodes or node_count("cores"), base)
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(state_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(state, out, indent=2)
    return state


def _settings(overrides: list[str]) -> dict[str, str]:
    settings = {}
    for item in overrides:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise DevClusterError(f"--override expects NAME=VALUE, got {item!r}")
        settings[name.strip()] = value
    return settings


def run(args: argparse.Namespace) -> int:
    try:
        settings = _settings(args.override)
        directory = args.dir.resolve()
        state = load_or_plan(directory, args.nodes, args.port)
        ports = (*state["ports"], *state["controller_ports"], *state["http_ports"])
        busy = [p for p in ports if not _port_free(int(p))]
        if busy:
            raise DevClusterError(
                f"port {busy[0]} is in use (another broker?); stop it, or use another "
                "--dir with --port 0 for any free ports"
            )
    except DevClusterError as exc:
        print(f"kbroker dev: {exc}", file=sys.stderr)
        return 2
    nodes = cluster_nodes(
        directory,
        [int(p) for p in state["ports"]],
        [int(p) for p in state["controller_ports"]],
        [int(p) for p in state["http_ports"]],
        str(state["secret"]),
        settings,
    )
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    print(f"kbroker dev: starting {len(nodes)} nodes, data and logs in {directory}", flush=True)
    try:
        start_all(nodes)
    except NodeStartError as exc:
        first = str(exc).splitlines()[0]
        print(f"kbroker dev: {first}; its log is in {directory}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        stop_all(nodes)
        return 130
    _announce(nodes)
    return _supervise(nodes, stop)


def _announce(nodes: list[Node]) -> None:
    for node in nodes:
        http = f", http://127.0.0.1:{node.http_port}" if node.http_port else ""
        print(f"  node {node.node_id}: {node.address}{http}  (log {node.log_path})")
    print(f"bootstrap: {','.join(n.address for n in nodes)}")
    print("Ctrl-C stops every node.", flush=True)


def _supervise(nodes: list[Node], stop: threading.Event) -> int:
    reported: set[int] = set()
    while not stop.wait(0.5):
        for node in nodes:
            if node.node_id not in reported and not node.running:
                reported.add(node.node_id)
                code = node.proc.returncode if node.proc else None
                print(
                    f"kbroker dev: node {node.node_id} exited with status {code}; "
                    f"see {node.log_path}",
                    file=sys.stderr,
                    flush=True,
                )
        if len(reported) == len(nodes):
            return 1
    print("kbroker dev: stopping every node", flush=True)
    statuses = stop_all(nodes)
    clean = True
    for node_id, status in statuses.items():
        if node_id in reported:
            clean = False
            continue
        if status != 0:
            clean = False
            said = "killed after not stopping in time" if status is None else f"status {status}"
            print(f"kbroker dev: node {node_id} {said}", file=sys.stderr)
    if clean:
        print("kbroker dev: every node stopped cleanly", flush=True)
    return 0 if clean else 1
