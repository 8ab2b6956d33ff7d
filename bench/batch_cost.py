"""Broker CPU per record of batched produce and consume, kbroker against the mock.

    PYTHONPATH=$PWD .venv/bin/python -m bench.batch_cost --peer mock
    PYTHONPATH=$PWD .venv/bin/python -m bench.batch_cost --peer kbroker [--source DIR] \
        [--set socket.busy.poll.us=0]
    PATH=.venv/bin:$PATH PYTHONPATH=$PWD .venv/bin/python -m bench.batch_cost --peer kbroker \
        --profile "perf record -e cpu-clock -F 999 -g -p PID -o /tmp/p100.data" --profile-at p100

One fresh peer (kbroker from this tree or from `--source`, a directory holding a kbroker
package, or librdkafka's mock cluster), then bench/run.py's workloads 1 and 2 (kafka_load:
confluent-kafka, acks=all, linger 5 ms, batch.size 1 MB) for 100 B and for 1 KiB records:
a batched produce of N records, then a consume of them (the mock re-reads its retained
window, as in bench/run.py). Each figure is the broker process's CPU time (utime + stime
from /proc) over that workload divided by its records, so it holds on a loaded machine
where rates do not. A consumer asks for a committed offset before anything is measured,
so a broker creates __consumer_offsets then and not inside the first consume
(--cold-offsets: inside it, as bench/run.py measures). With --profile, the command (PID
replaced by the broker's pid) runs while the workload named by --profile-at does, and is
stopped with SIGINT after it. One JSON line: µs of broker CPU per record for p100, c100, p1024, c1024, and the load average.
"""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from bench import kafka_load
from bench.peers import KbrokerPeer, MockPeer, Peer, add_settings_option
from bench.procs import loadavg

SIZES = {100: "t100", 1024: "t1k"}


def warm_group_coordinator(bootstrap: str, topic: str) -> None:
    """Ask the group coordinator for a committed offset once, so a broker creates
    __consumer_offsets (50 partitions) now rather than during the first measured consume."""
    consumer = Consumer({"bootstrap.servers": bootstrap, **kafka_load.CONSUMER_FETCH})
    try:
        consumer.committed([TopicPartition(topic, 0)], timeout=60)
    finally:
        consumer.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--peer", choices=["kbroker", "mock"], default="kbroker")
    parser.add_argument("--source", type=Path, help="run the kbroker package found here")
    parser.add_argument("--records-100b", type=int, default=1_000_000)
    parser.add_argument("--records-1kib", type=int, default=300_000)
    parser.add_argument("--time-limit", type=float, default=120.0)
    parser.add_argument(
        "--cold-offsets",
        action="store_true",
        help="leave __consumer_offsets to the first consume, as bench/run.py does",
    )
    add_settings_option(parser)
    parser.add_argument("--profile", help="command to run during one workload (PID: broker)")
    parser.add_argument("--profile-at", default="p100", help="p100, c100, p1024 or c1024")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="kbroker-batch-cost-"))
    peer: Peer
    if args.peer == "mock":
        peer = MockPeer("mock", work, topics=list(SIZES.values()))
        peer.start()
    else:
        overrides = dict(args.set)
        peer = KbrokerPeer("kbroker", work, source=args.source, overrides=overrides)
        peer.start()
        kafka_load.create_topics(peer.bootstrap, {t: 1 for t in SIZES.values()})
    if not args.cold_offsets:
        warm_group_coordinator(peer.bootstrap, SIZES[100])
    out: dict[str, object] = {
        "peer": args.peer,
        "source": str(args.source or ""),
        "load": loadavg(),
    }

    def measure(name: str, run) -> int:
        profiler = None
        if args.profile and args.profile_at == name:
            command = shlex.split(args.profile.replace("PID", str(peer.pid)))
            profiler = subprocess.Popen(command)
            time.sleep(1.0)  # let it attach before the workload starts
        before = peer.cpu_seconds()
        records = run().records
        spent = peer.cpu_seconds() - before
        if profiler is not None:
            profiler.send_signal(signal.SIGINT)
            profiler.wait()
        out[name] = round(spent / max(records, 1) * 1e6, 3)
        return records

    try:
        for size, topic in SIZES.items():
            count = args.records_100b if size == 100 else args.records_1kib
            produced = measure(
                f"p{size}",
                lambda t=topic, c=count, s=size: kafka_load.produce_batched(
                    peer.bootstrap, t, c, s, args.time_limit
                ),
            )
            measure(
                f"c{size}",
                lambda t=topic, c=produced: kafka_load.consume_all(
                    peer.bootstrap, t, c, args.time_limit, rewind=args.peer == "mock"
                ),
            )
    finally:
        peer.stop()
        subprocess.run(["rm", "-rf", str(work)], check=False)
    out["load_after"] = loadavg()
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
