"""bench/load_client.c, the node-capacity benchmark's load client, counts only answers a
real broker gave: the log grows by more records than it reports answers (its warm-up's
and the last requests in flight are appended but not counted)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
from kio.index import load_request_schema

from bench.node_capacity import LOAD_CLIENT, ensure_load_client
from kbroker.admin.client import cluster
from kbroker.protocol.client_frames import encode_request
from kbroker.protocol.messages import build
from kbroker.protocol.one_shot import produce_fields
from kbroker.testing import kafka_broker
from kbroker.testing.records import Record, encode_batch

pytestmark = pytest.mark.slow

PRODUCE, LIST_OFFSETS = 0, 2


def log_end(bootstrap: str, topic: str) -> int:
    with cluster(bootstrap) as c:
        conn = c.any().negotiate()
        answer = conn.call(
            LIST_OFFSETS,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}
                ],
            },
            versions=(1, 7),
        )
        return int(answer.topics[0].partitions[0].offset)


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to build the client")
def test_every_answer_it_counts_is_a_record_the_broker_appended(tmp_path: Path) -> None:
    assert ensure_load_client() == LOAD_CLIENT
    with kafka_broker(tmp_path / "node") as server:
        topic = server.create_topic()
        batch = encode_batch([Record(None, b"x" * 100)], int(time.time() * 1000))
        request = build(load_request_schema(PRODUCE, 9), produce_fields(topic, batch, acks=1))
        (tmp_path / "request").write_bytes(encode_request(request, 1, "load-client-test"))
        host, port = server.nodes[0].address.rsplit(":", 1)
        before = log_end(server.bootstrap, topic)
        done = subprocess.run(
            [str(LOAD_CLIENT), "1", "0.2", "3", host, port, str(tmp_path / "request")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert lines[:2] == ["start", "stop"]
        figures = {name: float(value) for name, value in (line.split() for line in lines[2:])}
        appended = log_end(server.bootstrap, topic) - before
    answers = int(figures["answers"])
    assert answers > 100
    # Warm-up answers and requests in flight at the end are appended but not counted.
    assert answers < appended
    assert 0 < figures["p50_ms"] <= figures["p99_ms"] <= figures["p999_ms"]
    assert 0.9 < figures["wall_s"] < 2.0


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to build the client")
def test_a_refused_connection_ends_it_with_one_line(tmp_path: Path) -> None:
    ensure_load_client()
    (tmp_path / "request").write_bytes(b"\x00\x00\x00\x01x")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: the connect is refused
        done = subprocess.run(
            [str(LOAD_CLIENT), "1", "0", "1", "127.0.0.1", str(port), str(tmp_path / "request")],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert done.returncode == 1
    assert done.stderr.strip() == "load_client: connect: Connection refused"
