"""Broker CPU per request of two kbroker trees at once, on the same machine in the same
minutes: what a change to the request path saves, where separate runs of
bench.request_cost on a shared 2-core machine scatter more than the change.

    PYTHONPATH=$PWD .venv/bin/python -m bench.paired_cost --before /tmp/kbroker-base \\
        --after . --workloads heartbeat,commit --rounds 6 --block 3000

One broker runs from each tree (its `kbroker` package first on PYTHONPATH; build each
tree's C extensions first, `make serve`, or the slower Python fallbacks run). The
workloads are bench.request_cost's: one connection a broker, one request at a time.
Blocks of `--block` requests alternate between the two brokers, the order swapping each
round; each block's figure is the broker's CPU (utime + stime) over it divided by the
requests, and the broker's own local time (decode and handler, from its
RequestMetrics) beside it. The report gives each tree's median and the per-round
difference, after - before, with how many rounds came out lower. `--set name=value`
gives both brokers a setting (`socket.busy.poll.us=0` keeps a one-at-a-time workload's
busy poll from charging the broker for the client's turnaround).
"""

from __future__ import annotations

import argparse
import contextlib
import re
import statistics
import sys
import tempfile
import urllib.request
from pathlib import Path

from bench.peers import add_settings_option
from bench.request_cost import WORKLOADS, cpu_split, load, workload
from kbroker.testing import KafkaServer, kafka_broker

# The API whose RequestMetrics local time each workload reads.
API_LABEL = {
    "produce": "Produce",
    "fetch": "Fetch",
    "heartbeat": "ConsumerGroupHeartbeat",
    "commit": "OffsetCommit",
}


def interpreter_for(tree: Path, scratch: Path, name: str) -> str:
    """A wrapper running this interpreter with `tree`'s kbroker first on its path."""
    wrapper = scratch / f"python-{name}"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="{tree}" exec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def local_ms_total(server: KafkaServer, api: str) -> float:
    """The broker's summed local time (ms) of `api` requests so far."""
    url = f"http://127.0.0.1:{server.nodes[0].http_port}/metrics"
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    pattern = r'kafka_network_requestmetrics_localtimems_sum\{request="' + api + r'"\} (\S+)'
    found = re.search(pattern, text)
    return float(found.group(1)) if found else 0.0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="the tree measured first")
    parser.add_argument("--after", type=Path, required=True, help="the tree with the change")
    parser.add_argument("--workloads", default="heartbeat,commit")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--block", type=int, default=3000, help="requests a block")
    add_settings_option(parser)
    args = parser.parse_args(argv)
    names = args.workloads.split(",")
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        parser.error(f"unknown workloads {unknown}; choose from {', '.join(WORKLOADS)}")
    settings = dict(args.set)
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    with tempfile.TemporaryDirectory(prefix="paired-") as scratch, contextlib.ExitStack() as stack:
        root = Path(scratch)
        servers = {
            side: stack.enter_context(
                kafka_broker(
                    root / side,
                    settings=settings,
                    http=True,
                    python=interpreter_for(tree, root, side),
                )
            )
            for side, tree in trees.items()
        }
        for name in names:
            calls = {}
            for side, server in servers.items():
                one, close, _asked = workload(name, server.bootstrap, server.create_topic())
                stack.callback(close)
                calls[side] = one
            cpu: dict[str, list[float]] = {side: [] for side in servers}
            local: dict[str, list[float]] = {side: [] for side in servers}
            print(f"{name}: load {load()}")
            for round_ in range(args.rounds):
                order = list(servers) if round_ % 2 == 0 else list(servers)[::-1]
                for side in order:
                    server, proc = servers[side], servers[side].nodes[0].proc
                    assert proc is not None
                    pid = proc.pid
                    local_before = local_ms_total(server, API_LABEL[name])
                    user, system = cpu_split(pid)
                    for _ in range(args.block):
                        calls[side]()
                    user_after, system_after = cpu_split(pid)
                    spent = (user_after - user) + (system_after - system)
                    cpu[side].append(1e6 * spent / args.block)
                    local_ms = local_ms_total(server, API_LABEL[name]) - local_before
                    local[side].append(1e3 * local_ms / args.block)
            for side in servers:
                print(
                    f"  {side:6} {trees[side]}: CPU median {statistics.median(cpu[side]):6.1f} "
                    f"µs/request (blocks {' '.join(f'{x:.0f}' for x in cpu[side])}); "
                    f"local time median {statistics.median(local[side]):5.1f} µs"
                )
            differences = [a - b for a, b in zip(cpu["after"], cpu["before"], strict=True)]
            print(
                f"  after - before a round: median {statistics.median(differences):+.1f} µs, "
                f"{sum(d < 0 for d in differences)} of {len(differences)} rounds lower; "
                f"load {load()}"
            )


if __name__ == "__main__":
    main()
