"""What TLS and SASL cost: batched produce and consume over SASL_SSL as ratios of
PLAINTEXT, measured in the same run against the same broker process.

One kbroker serves a PLAINTEXT and a SASL_SSL listener (SCRAM-SHA-512, certificates
from a CA made for the run). Each round produces N records into a fresh topic over each
listener and reads them back over the same listener, the two listeners interleaved
(each first in every other round, each topic deleted after its round),
with the client settings of bench/kafka_load.py; the figures are each one's median
round. Over TLS the broker cannot sendfile (the kernel would send segment bytes
unencrypted): fetched ranges are read with pread and encrypted in the process.

    .venv/bin/python -m bench.security [--records 300000] [--size 1024] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from bench.kafka_load import consume_all, create_topics, produce_batched
from bench.metadata_probe import wait_for_metadata
from bench.procs import tree_cpu_seconds
from compat_tests.broker_process import free_port
from compat_tests.tls_material import make_tls_material

USER, PASSWORD = "bench", "bench-secret"


def start_broker(workdir: Path) -> tuple[subprocess.Popen, str, str, dict[str, str]]:
    """(process, PLAINTEXT address, SASL_SSL address, client settings for SASL_SSL)."""
    tls = make_tls_material(workdir / "tls")
    plain, secure = free_port(), free_port()
    settings = {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_SSL://127.0.0.1:{secure}",
        "log.dirs": str(workdir / "data"),
        "http.listeners": "",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(tls.broker_keystore),
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
    }
    command = [str(Path(sys.executable).with_name("kbroker")), "serve"]
    for name, value in settings.items():
        command += ["--override", f"{name}={value}"]
    log = open(workdir / "kbroker.log", "wb")  # noqa: SIM115 (lives as long as the broker)
    proc = subprocess.Popen(command, stdout=log, stderr=log)
    bootstrap = f"127.0.0.1:{plain}"
    first, _ = wait_for_metadata(
        "127.0.0.1", plain, time.perf_counter() + 60, alive=lambda: proc.poll() is None
    )
    if first is None:
        raise SystemExit(f"kbroker did not start; see {workdir / 'kbroker.log'}")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    upsert = UserScramCredentialUpsertion(
        USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), PASSWORD.encode()
    )
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(30)
    security = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": USER,
        "sasl.password": PASSWORD,
        "ssl.ca.location": str(tls.ca.cert),
    }
    return proc, bootstrap, f"127.0.0.1:{secure}", security


def delete_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics([topic], operation_timeout=30).values():
        future.result(30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--time-limit", type=float, default=60.0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kbroker-bench-security-") as tmp:
        workdir = Path(tmp)
        proc, plain_bootstrap, secure_bootstrap, security = start_broker(workdir)
        try:
            figures: dict[tuple[str, str], list[float]] = {}
            listeners = [
                ("PLAINTEXT", plain_bootstrap, {}),
                ("SASL_SSL", secure_bootstrap, security),
            ]
            for round_no in range(args.repeat):
                # Each listener goes first in every other round, and each round's topic is
                # deleted after it: the page cache a round dirties is then neither written
                # back under the next one nor always under the same listener.
                for name, bootstrap, extra in listeners[:: 1 if round_no % 2 == 0 else -1]:
                    topic = f"bench-{name.lower()}-{uuid.uuid4().hex[:8]}"
                    create_topics(plain_bootstrap, {topic: 1})
                    cpu = tree_cpu_seconds(proc.pid)
                    produced = produce_batched(
                        bootstrap, topic, args.records, args.size, args.time_limit, extra
                    )
                    cpu_produce, cpu = tree_cpu_seconds(proc.pid) - cpu, tree_cpu_seconds(proc.pid)
                    consumed = consume_all(
                        bootstrap, topic, produced.records, args.time_limit, security=extra
                    )
                    cpu_consume = tree_cpu_seconds(proc.pid) - cpu
                    for workload, result, busy in (
                        ("produce", produced, cpu_produce),
                        ("consume", consumed, cpu_consume),
                    ):
                        mib_s = result.metrics()["mib_per_s"]
                        # Broker CPU per GiB moved: what the protocol costs the broker,
                        # steadier than wall-clock rates on a machine others share.
                        cpu_gib = busy / max(result.nbytes, 1) * (1 << 30)
                        figures.setdefault((name, workload), []).append(mib_s)
                        figures.setdefault((name, workload + " cpu"), []).append(cpu_gib)
                        print(
                            f"round {round_no + 1} {name:9} {workload:7} {mib_s:8.1f} MiB/s"
                            f" {cpu_gib:6.2f} broker CPU s/GiB"
                            f" ({result.records} records, {result.errors} errors)",
                            flush=True,
                        )
                    delete_topic(plain_bootstrap, topic)
                    time.sleep(1)
        finally:
            proc.terminate()
            proc.wait(30)
    print()
    print(f"{args.records} records of {args.size} B, median of {args.repeat} rounds:")
    print(
        "| workload | PLAINTEXT MiB/s | SASL_SSL MiB/s | SASL_SSL / PLAINTEXT "
        "| broker CPU s/GiB PLAINTEXT | SASL_SSL |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for workload in ("produce", "consume"):
        plain = statistics.median(figures[("PLAINTEXT", workload)])
        secure = statistics.median(figures[("SASL_SSL", workload)])
        plain_cpu = statistics.median(figures[("PLAINTEXT", workload + " cpu")])
        secure_cpu = statistics.median(figures[("SASL_SSL", workload + " cpu")])
        print(
            f"| {workload} batched | {plain:.1f} | {secure:.1f} | {secure / plain:.2f}x "
            f"| {plain_cpu:.2f} | {secure_cpu:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
