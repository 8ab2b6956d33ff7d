"""What the schema registry costs and serves, on one node.

1. Broker-side validation: batched produce (100 B values framed as Confluent's
   serializers frame them: magic byte 0, a registered schema id, the payload) into a
   topic with confluent.value.schema.validation=true and into one without, interleaved
   rounds, each its median round; the ratio is the goal's figure (>= 0.8x).
2. REST: GET /schemas/ids/{id} and the serializer's register-or-lookup (POST
   /subjects/{s}/versions of a schema the subject already has) over keep-alive
   connections from `--clients` threads: requests per second and p50/p99 latency.

    .venv/bin/python -m bench.schema_registry [--records 1000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from bench.kafka_load import create_topics, produce_batched
from bench.metadata_probe import wait_for_metadata
from bench.procs import tree_cpu_seconds
from compat_tests.broker_process import free_port

SCHEMA = json.dumps(
    {"type": "record", "name": "Bench", "fields": [{"name": "payload", "type": "bytes"}]}
)
HEADERS = {"Content-Type": "application/vnd.schemaregistry.v1+json"}


def start_broker(workdir: Path) -> tuple[subprocess.Popen, str, int]:
    kafka, registry = free_port(), free_port()
    settings = {
        "listeners": f"PLAINTEXT://127.0.0.1:{kafka}",
        "log.dirs": str(workdir / "data"),
        "http.listeners": "",
        "schema.registry.listeners": f"http://127.0.0.1:{registry}",
    }
    command = [str(Path(sys.executable).with_name("kbroker")), "serve"]
    for name, value in settings.items():
        command += ["--override", f"{name}={value}"]
    log = open(workdir / "kbroker.log", "wb")  # noqa: SIM115 (lives as long as the broker)
    proc = subprocess.Popen(command, stdout=log, stderr=log)
    first, _ = wait_for_metadata(
        "127.0.0.1", kafka, time.perf_counter() + 60, alive=lambda: proc.poll() is None
    )
    if first is None:
        raise SystemExit(f"kbroker did not start; see {workdir / 'kbroker.log'}")
    return proc, f"127.0.0.1:{kafka}", registry


def request(conn: http.client.HTTPConnection, method: str, path: str, body: bytes | None) -> bytes:
    conn.request(method, path, body=body, headers=HEADERS)
    response = conn.getresponse()
    data = response.read()
    if response.status != 200:
        raise RuntimeError(f"{method} {path}: {response.status} {data[:200]!r}")
    return data


def register(port: int, subject: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    deadline = time.monotonic() + 30
    while True:
        try:
            body = json.dumps({"schema": SCHEMA}).encode()
            return int(
                json.loads(request(conn, "POST", f"/subjects/{subject}/versions", body))["id"]
            )
        except (OSError, RuntimeError, http.client.HTTPException):
            if time.monotonic() > deadline:
                raise
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            time.sleep(0.2)


def rest_load(
    port: int, method: str, path: str, body: bytes | None, clients: int, seconds: float
) -> tuple[float, float, float]:
    """(requests per second, p50 ms, p99 ms) of `clients` threads each repeating one
    request on its own keep-alive connection for `seconds`."""
    latencies: list[list[float]] = [[] for _ in range(clients)]
    start_at = time.perf_counter() + 0.2
    stop_at = start_at + seconds

    def worker(out: list[float]) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        while time.perf_counter() < start_at:
            time.sleep(0.001)
        while True:
            begun = time.perf_counter()
            if begun >= stop_at:
                break
            request(conn, method, path, body)
            out.append(time.perf_counter() - begun)
        conn.close()

    threads = [threading.Thread(target=worker, args=(lat,)) for lat in latencies]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = sorted(x for lat in latencies for x in lat)
    p50 = every[len(every) // 2] * 1000
    p99 = every[min(len(every) - 1, int(len(every) * 0.99))] * 1000
    return len(every) / seconds, p50, p99


def walk_ns_per_record(size: int, rounds: int = 30) -> tuple[float, float]:
    """(ns per record of validation's id walk, of the log's own record walk) over one
    ~1 MiB uncompressed batch of framed records, best of `rounds`: what validation adds
    to an append, measured in-process, so a busy machine moves it little."""
    from kbroker.protocol.batch import encode_batch, validate_batches
    from kbroker.protocol.record_validation import RecordPolicy, validate_records
    from kbroker.schemas.validation import TopicValidation, record_errors

    count = (1 << 20) // (size + 8)
    value = b"\x00\x00\x00\x00\x01" + os.urandom(size - 5)
    batch = bytearray(encode_batch([value] * count, int(time.time() * 1000)))
    check = TopicValidation(None, frozenset({1}))
    headers = validate_batches(batch, 1 << 30)
    best_ids = best_walk = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        if record_errors(batch, check):
            raise SystemExit("the bench's records were refused")
        best_ids = min(best_ids, time.perf_counter() - started)
        started = time.perf_counter()
        validate_records(batch, headers, int(time.time() * 1000), RecordPolicy())
        best_walk = min(best_walk, time.perf_counter() - started)
    return best_ids * 1e9 / count, best_walk * 1e9 / count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--walk-only", action="store_true", help="only the in-process walk")
    args = parser.parse_args(argv)
    ids_ns, walk_ns = walk_ns_per_record(args.size)
    print(
        f"validation's id walk: {ids_ns:.1f} ns/record; the log's record walk: "
        f"{walk_ns:.1f} ns/record ({args.size} B records, 1 MiB batch, best of 30)"
    )
    if args.walk_only:
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        proc, bootstrap, port = start_broker(Path(tmp))
        try:
            rates: dict[str, list[float]] = {"validated": [], "plain": []}
            cpu_us: dict[str, list[float]] = {"validated": [], "plain": []}
            for round_no in range(args.repeat):
                suffix = uuid.uuid4().hex[:8]
                topics = {"validated": f"validated-{suffix}", "plain": f"plain-{suffix}"}
                create_topics(bootstrap, {t: 1 for t in topics.values()})
                from confluent_kafka.admin import (
                    AdminClient,
                    AlterConfigOpType,
                    ConfigEntry,
                    ConfigResource,
                    ResourceType,
                )

                admin = AdminClient({"bootstrap.servers": bootstrap})
                entry = ConfigEntry(
                    "confluent.value.schema.validation",
                    "true",
                    incremental_operation=AlterConfigOpType.SET,
                )
                resource = ConfigResource(
                    ResourceType.TOPIC, topics["validated"], incremental_configs=[entry]
                )
                for future in admin.incremental_alter_configs([resource]).values():
                    future.result(30)
                schema_id = register(port, f"{topics['validated']}-value")
                value = b"\x00" + schema_id.to_bytes(4, "big") + os.urandom(args.size - 5)
                order = list(topics) if round_no % 2 == 0 else list(reversed(topics))
                for kind in order:
                    cpu_before = tree_cpu_seconds(proc.pid)
                    result = produce_batched(
                        bootstrap, topics[kind], args.records, args.size, 120, value=value
                    )
                    broker_cpu = tree_cpu_seconds(proc.pid) - cpu_before
                    if result.errors:
                        raise SystemExit(f"{kind}: {result.errors} records failed")
                    rates[kind].append(result.records / result.seconds)
                    cpu_us[kind].append(broker_cpu * 1e6 / result.records)
                    print(
                        f"round {round_no} {kind:>9}: {rates[kind][-1]:,.0f} records/s, "
                        f"broker CPU {cpu_us[kind][-1]:.2f} us/record"
                    )
            validated = statistics.median(rates["validated"])
            plain = statistics.median(rates["plain"])
            cpu_validated = statistics.median(cpu_us["validated"])
            cpu_plain = statistics.median(cpu_us["plain"])
            print(
                f"produce, {args.size} B records batched: validated {validated:,.0f}/s, "
                f"plain {plain:,.0f}/s: {validated / plain:.2f}x; broker CPU per record "
                f"{cpu_validated:.2f} us validated, {cpu_plain:.2f} us plain: "
                f"{cpu_plain / cpu_validated:.2f}x (load average {os.getloadavg()[0]:.1f})"
            )
            subject = f"lookup-{uuid.uuid4().hex[:8]}"
            schema_id = register(port, subject)
            for name, method, path, body in (
                ("GET /schemas/ids/{id}", "GET", f"/schemas/ids/{schema_id}", None),
                (
                    "register-or-lookup",
                    "POST",
                    f"/subjects/{subject}/versions",
                    json.dumps({"schema": SCHEMA}).encode(),
                ),
            ):
                rps, p50, p99 = rest_load(port, method, path, body, args.clients, args.seconds)
                print(
                    f"{name}: {rps:,.0f} requests/s, p50 {p50:.2f} ms, p99 {p99:.2f} ms "
                    f"({args.clients} keep-alive clients)"
                )
        finally:
            proc.terminate()
            proc.wait(30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
