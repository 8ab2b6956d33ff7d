"""What TLS and SASL cost: batched produce and consume over SASL_SSL as ratios of
PLAINTEXT, measured in the same run against the same broker process.

One kbroker serves a PLAINTEXT and a SASL_SSL listener (SCRAM-SHA-512, certificates
from a CA made for the run). Each round produces N records into a fresh topic over each
listener and reads them back over the same listener, the two listeners interleaved
(each first in every other round, each topic deleted after its round),
with the client settings of bench/kafka_load.py; the figures are each one's median
round. Over TLS the broker cannot sendfile (the kernel would send segment bytes
unencrypted): fetched ranges are read with pread and encrypted in the process.

The client runs in this process, so its CPU (librdkafka's threads included) is measured
beside the broker's. On a machine where client and broker share the cores and keep them
busy, the wall-clock ratio follows the ratio of their summed CPU per GiB. The table
says how busy they kept the cores, and what that ratio would be if the broker's TLS
work cost nothing (its PLAINTEXT CPU per GiB on both sides): where both runs keep the
cores busy, that is the most any broker could show on this machine.

    .venv/bin/python -m bench.security [--records 300000] [--size 1024] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import resource
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
CORES = os.cpu_count() or 1


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


def own_cpu_seconds() -> float:
    """CPU this process (the client, with librdkafka's threads) has used so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


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
                    broker, client = tree_cpu_seconds(proc.pid), own_cpu_seconds()
                    produced = produce_batched(
                        bootstrap, topic, args.records, args.size, args.time_limit, extra
                    )
                    broker_produce = tree_cpu_seconds(proc.pid) - broker
                    client_produce = own_cpu_seconds() - client
                    broker, client = tree_cpu_seconds(proc.pid), own_cpu_seconds()
                    consumed = consume_all(
                        bootstrap, topic, produced.records, args.time_limit, security=extra
                    )
                    broker_consume = tree_cpu_seconds(proc.pid) - broker
                    client_consume = own_cpu_seconds() - client
                    for workload, result, busy, client_busy in (
                        ("produce", produced, broker_produce, client_produce),
                        ("consume", consumed, broker_consume, client_consume),
                    ):
                        mib_s = result.metrics()["mib_per_s"]
                        # CPU per GiB moved: what the protocol costs each side, steadier
                        # than wall-clock rates on a machine others share.
                        gib = max(result.nbytes, 1) / (1 << 30)
                        figures.setdefault((name, workload), []).append(mib_s)
                        figures.setdefault((name, workload + " cpu"), []).append(busy / gib)
                        figures.setdefault((name, workload + " client"), []).append(
                            client_busy / gib
                        )
                        # Share of the machine's cores client and broker kept busy.
                        cores = (busy + client_busy) / result.seconds / CORES
                        figures.setdefault((name, workload + " cores"), []).append(cores)
                        print(
                            f"round {round_no + 1} {name:9} {workload:7} {mib_s:8.1f} MiB/s"
                            f" CPU s/GiB broker {busy / gib:5.2f} client {client_busy / gib:5.2f}"
                            f" cores busy {cores:4.0%}"
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
        "| broker CPU s/GiB PLAINTEXT | SASL_SSL | client CPU s/GiB PLAINTEXT | SASL_SSL "
        "| cores busy PLAINTEXT | SASL_SSL | ratio if the broker's TLS cost nothing |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for workload in ("produce", "consume"):

        def median(name: str, figure: str, workload: str = workload) -> float:
            return statistics.median(figures[(name, workload + figure)])

        plain, secure = median("PLAINTEXT", ""), median("SASL_SSL", "")
        plain_cpu, secure_cpu = median("PLAINTEXT", " cpu"), median("SASL_SSL", " cpu")
        plain_client, secure_client = (
            median("PLAINTEXT", " client"),
            median("SASL_SSL", " client"),
        )
        ceiling = (plain_client + plain_cpu) / (secure_client + plain_cpu)
        print(
            f"| {workload} batched | {plain:.1f} | {secure:.1f} | {secure / plain:.2f}x "
            f"| {plain_cpu:.2f} | {secure_cpu:.2f} | {plain_client:.2f} | {secure_client:.2f} "
            f"| {median('PLAINTEXT', ' cores'):.0%} | {median('SASL_SSL', ' cores'):.0%} "
            f"| {ceiling:.2f}x |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
