"""What TLS and SASL cost: batched produce and consume over SASL_SSL as ratios of
PLAINTEXT, measured in the same run against the same broker process; with
`--peers kbroker,kafka` Apache Kafka 4.3 (one KRaft node, bench.peers.KafkaPeer) is
measured the same way in the same run, both brokers up and their rounds interleaved, and
the kbroker/Kafka ratios printed.

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
                                      [--peers kbroker,kafka]
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
from bench.peers import KafkaPeer, PeerUnavailable
from bench.procs import loadavg, tree_cpu_seconds
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
    return proc, bootstrap, f"127.0.0.1:{secure}", _add_user(bootstrap, tls.ca.cert)


def _add_user(bootstrap: str, ca: Path) -> dict[str, str]:
    """The SCRAM user, created over PLAINTEXT; the client settings to log in as it."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    upsert = UserScramCredentialUpsertion(
        USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), PASSWORD.encode()
    )
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(30)
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": USER,
        "sasl.password": PASSWORD,
        "ssl.ca.location": str(ca),
    }


def start_kafka(workdir: Path) -> tuple[KafkaPeer, str, str, dict[str, str]]:
    """Kafka 4.3 with the same two listeners, keystore and mechanism: (peer, PLAINTEXT
    address, SASL_SSL address, client settings for SASL_SSL)."""
    tls = make_tls_material(workdir / "kafka-tls")
    peer = KafkaPeer(
        "kafka",
        workdir,
        sasl_ssl={
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(tls.broker_keystore),
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
        },
    )
    peer.start()
    secure = f"127.0.0.1:{peer.secure_port}"
    return peer, peer.bootstrap, secure, _add_user(peer.bootstrap, tls.ca.cert)


def own_cpu_seconds() -> float:
    """CPU this process (the client, with librdkafka's threads) has used so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def delete_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics([topic], operation_timeout=30).values():
        future.result(30)


WORKLOADS = ("produce", "consume")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--peers", default="kbroker", help="kbroker, kafka, or both")
    parser.add_argument(
        "--warmup",
        type=int,
        default=1,
        help="uncounted rounds first: a JVM compiles its hot paths in its first seconds",
    )
    args = parser.parse_args(argv)
    wanted = args.peers.split(",")
    figures: dict[tuple[str, str, str], list[float]] = {}
    loads: list[float] = []
    with tempfile.TemporaryDirectory(prefix="kbroker-bench-security-") as tmp:
        workdir = Path(tmp)
        # (peer, pid of its process tree, PLAINTEXT, SASL_SSL, client settings for SASL_SSL)
        brokers: list[tuple[str, int, str, str, dict[str, str]]] = []
        stops = []
        try:
            if "kbroker" in wanted:
                proc, plain, secure, security = start_broker(workdir)
                stops.append(lambda p=proc: (p.terminate(), p.wait(30)))
                brokers.append(("kbroker", proc.pid, plain, secure, security))
            if "kafka" in wanted:
                try:
                    peer, plain, secure, security = start_kafka(workdir)
                except PeerUnavailable as exc:
                    print(f"kafka skipped: {exc}")
                else:
                    stops.append(peer.stop)
                    brokers.append(("kafka", peer.pid, plain, secure, security))
            for round_no in range(-args.warmup, args.repeat):
                # Each listener (and each broker) goes first in every other round, and each
                # round's topic is deleted after it: the page cache a round dirties is then
                # neither written back under the next one nor always under the same one.
                order = brokers if round_no % 2 == 0 else brokers[::-1]
                for name, pid, plain_bootstrap, secure_bootstrap, security in order:
                    listeners = [
                        ("PLAINTEXT", plain_bootstrap, {}),
                        ("SASL_SSL", secure_bootstrap, security),
                    ]
                    for listener, bootstrap, extra in listeners[:: 1 if round_no % 2 == 0 else -1]:
                        loads.append(loadavg())
                        counted = figures if round_no >= 0 else {}
                        one_round(args, counted, round_no, name, pid, plain_bootstrap,
                                  listener, bootstrap, extra)  # fmt: skip
        finally:
            for stop in stops:
                stop()
    report(args, figures, [b[0] for b in brokers], loads)
    return 0


def one_round(
    args: argparse.Namespace,
    figures: dict[tuple[str, str, str], list[float]],
    round_no: int,
    broker_name: str,
    pid: int,
    plain_bootstrap: str,
    name: str,
    bootstrap: str,
    extra: dict[str, str],
) -> None:
    """Produce `--records` into a fresh topic over one listener and read them back."""
    topic = f"bench-{name.lower()}-{uuid.uuid4().hex[:8]}"
    create_topics(plain_bootstrap, {topic: 1})
    broker, client = tree_cpu_seconds(pid), own_cpu_seconds()
    produced = produce_batched(bootstrap, topic, args.records, args.size, args.time_limit, extra)
    broker_produce = tree_cpu_seconds(pid) - broker
    client_produce = own_cpu_seconds() - client
    broker, client = tree_cpu_seconds(pid), own_cpu_seconds()
    consumed = consume_all(bootstrap, topic, produced.records, args.time_limit, security=extra)
    broker_consume = tree_cpu_seconds(pid) - broker
    client_consume = own_cpu_seconds() - client
    for workload, result, busy, client_busy in (
        ("produce", produced, broker_produce, client_produce),
        ("consume", consumed, broker_consume, client_consume),
    ):
        mib_s = result.metrics()["mib_per_s"]
        # CPU per GiB moved: what the protocol costs each side, steadier than wall-clock
        # rates on a machine others share.
        gib = max(result.nbytes, 1) / (1 << 30)
        # Share of the machine's cores client and broker kept busy.
        cores = (busy + client_busy) / result.seconds / CORES
        for figure, value in (
            ("", mib_s),
            (" cpu", busy / gib),
            (" client", client_busy / gib),
            (" cores", cores),
            (" us/rec", busy / max(result.records, 1) * 1e6),
        ):
            figures.setdefault((broker_name, name, workload + figure), []).append(value)
        print(
            f"round {round_no + 1 if round_no >= 0 else 'warm-up'} {broker_name:7} {name:9} {workload:7} {mib_s:8.1f} MiB/s"
            f" CPU s/GiB broker {busy / gib:5.2f} client {client_busy / gib:5.2f}"
            f" cores busy {cores:4.0%}"
            f" ({result.records} records, {result.errors} errors)",
            flush=True,
        )
    delete_topic(plain_bootstrap, topic)
    time.sleep(1)


def report(
    args: argparse.Namespace,
    figures: dict[tuple[str, str, str], list[float]],
    brokers: list[str],
    loads: list[float],
) -> None:
    def median(broker: str, name: str, figure: str) -> float:
        return statistics.median(figures[(broker, name, figure)])

    print()
    print(
        f"{args.records} records of {args.size} B, median of {args.repeat} rounds, "
        f"load average {min(loads):.1f}-{max(loads):.1f} during the rounds:"
    )
    print(
        "| broker | workload | PLAINTEXT MiB/s | SASL_SSL MiB/s | SASL_SSL / PLAINTEXT "
        "| broker CPU s/GiB PLAINTEXT | SASL_SSL | broker CPU us/record SASL_SSL "
        "| client CPU s/GiB PLAINTEXT | SASL_SSL "
        "| cores busy PLAINTEXT | SASL_SSL | ratio if the broker's TLS cost nothing |"
    )
    print(
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    )
    for broker in brokers:
        for workload in WORKLOADS:
            plain, secure = (
                median(broker, "PLAINTEXT", workload),
                median(broker, "SASL_SSL", workload),
            )
            plain_cpu = median(broker, "PLAINTEXT", workload + " cpu")
            secure_cpu = median(broker, "SASL_SSL", workload + " cpu")
            plain_client = median(broker, "PLAINTEXT", workload + " client")
            secure_client = median(broker, "SASL_SSL", workload + " client")
            ceiling = (plain_client + plain_cpu) / (secure_client + plain_cpu)
            print(
                f"| {broker} | {workload} batched | {plain:.1f} | {secure:.1f} "
                f"| {secure / plain:.2f}x | {plain_cpu:.2f} | {secure_cpu:.2f} "
                f"| {median(broker, 'SASL_SSL', workload + ' us/rec'):.2f} "
                f"| {plain_client:.2f} | {secure_client:.2f} "
                f"| {median(broker, 'PLAINTEXT', workload + ' cores'):.0%} "
                f"| {median(broker, 'SASL_SSL', workload + ' cores'):.0%} | {ceiling:.2f}x |"
            )
    if set(brokers) >= {"kbroker", "kafka"}:
        print()
        print("| workload | listener | kbroker/Kafka MiB/s | kbroker/Kafka broker CPU per GiB |")
        print("| --- | --- | ---: | ---: |")
        for workload in WORKLOADS:
            for name in ("PLAINTEXT", "SASL_SSL"):
                rate = median("kbroker", name, workload) / median("kafka", name, workload)
                cpu = median("kbroker", name, workload + " cpu") / median(
                    "kafka", name, workload + " cpu"
                )
                print(f"| {workload} batched | {name} | {rate:.2f}x | {cpu:.2f}x |")


if __name__ == "__main__":
    sys.exit(main())
