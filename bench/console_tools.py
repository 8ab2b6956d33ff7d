"""`kbroker produce` and `kbroker consume` against kcat, in the same run on one broker.

    .venv/bin/python -m bench.console_tools [--records 1000000] [--size 100] [--rounds 3]

Starts one `kbroker serve` (fresh log.dirs, free loopback port), writes a file of
`--records` lines of `--size` bytes, then in each round, in alternating order:
`kcat -P -l FILE` and `kbroker produce < FILE` (each into a fresh one-partition topic),
then `kcat -C -e` and `kbroker consume --from beginning -e` of the same topic into
/dev/null. Each command is timed whole (process start to exit), as a user sees it; the
broker is the same for both, so the ratio is of the clients. Prints the medians, the
ratios (kbroker's rate over kcat's) and the 1-minute load average before each round.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.procs import loadavg

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _kbroker() -> list[str]:
    script = Path(sys.executable).with_name("kbroker")
    return [str(script)] if script.exists() else [sys.executable, "-m", "kbroker"]


def _timed(command: list[str], stdin: Path | None = None) -> float:
    began = time.perf_counter()
    with open(stdin or os.devnull, "rb") as source:
        subprocess.run(
            command, stdin=source, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=True
        )
    return time.perf_counter() - began


def _wait_ready(bootstrap: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        result = subprocess.run(
            [*_kbroker(), "cluster", "status", "--bootstrap", bootstrap],
            capture_output=True,
        )
        if result.returncode == 0:
            return
        time.sleep(0.5)
    raise SystemExit("kbroker did not start")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    if kcat is None:
        raise SystemExit("kcat is not installed (apt-get install kcat)")
    work = Path(tempfile.mkdtemp(prefix="bench-console-"))
    lines = work / "lines.txt"
    with lines.open("wb") as f:
        for i in range(args.records):
            f.write(b"%010d" % i + b"x" * (args.size - 10) + b"\n")
    port = _free_port()
    bootstrap = f"127.0.0.1:{port}"
    broker = subprocess.Popen(
        [*_kbroker(), "serve", "--override", f"listeners=PLAINTEXT://{bootstrap}",
         "--override", f"log.dirs={work / 'data'}", "--override", "http.listeners=",
         "--override", "num.partitions=1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    times: dict[str, list[float]] = {k: [] for k in ("kcat-P", "kbroker-P", "kcat-C", "kbroker-C")}
    loads: list[float] = []
    try:
        _wait_ready(bootstrap)
        kb = [*_kbroker()]
        for r in range(args.rounds):
            loads.append(loadavg())
            order = ["kcat", "kbroker"] if r % 2 == 0 else ["kbroker", "kcat"]
            for who in order:
                topic = f"bench-{who}-{r}"
                if who == "kcat":
                    times["kcat-P"].append(
                        _timed([kcat, "-P", "-b", bootstrap, "-t", topic, "-l", str(lines)])
                    )
                else:
                    times["kbroker-P"].append(
                        _timed([*kb, "produce", topic, "--bootstrap", bootstrap], lines)
                    )
            topic = f"bench-kcat-{r}"
            for who in order:
                if who == "kcat":
                    times["kcat-C"].append(
                        _timed([kcat, "-C", "-b", bootstrap, "-t", topic, "-o", "beginning",
                                "-e", "-q"])
                    )  # fmt: skip
                else:
                    times["kbroker-C"].append(
                        _timed([*kb, "consume", topic, "--from", "beginning", "-e",
                                "--bootstrap", bootstrap])
                    )  # fmt: skip
    finally:
        broker.terminate()
        broker.wait(30)
        shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    produce_ratio = med["kcat-P"] / med["kbroker-P"]
    consume_ratio = med["kcat-C"] / med["kbroker-C"]
    rate = {k: args.records / v for k, v in med.items()}
    print(f"{args.records} records of {args.size} B, {args.rounds} rounds, median seconds:")
    for k, v in med.items():
        print(f"  {k:10s} {v:6.2f} s  {rate[k]:>10,.0f} records/s   all: "
              + ", ".join(f"{t:.2f}" for t in times[k]))  # fmt: skip
    print(f"produce: kbroker at {produce_ratio:.2f}x kcat's rate")
    print(f"consume: kbroker at {consume_ratio:.2f}x kcat's rate")
    print("1-minute load average before each round: " + ", ".join(f"{x:.2f}" for x in loads))
    if args.json:
        args.json.write_text(
            json.dumps(
                {"records": args.records, "size": args.size, "times": times,
                 "produce_ratio": produce_ratio, "consume_ratio": consume_ratio,
                 "loadavg": loads, "cpus": os.cpu_count()},
                indent=2,
            )
        )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
