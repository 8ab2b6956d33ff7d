"""kcat (Debian's package, librdkafka underneath) against kbroker: -P, -C -e, -L, -z."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from compat_tests.confluent_helpers import create_topic, unique_topic

KCAT = shutil.which("kcat") or shutil.which("kafkacat")

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(
        KCAT is None, reason="kcat not installed (scripts/install-test-tools.sh installs it)"
    ),
]

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _kcat(bootstrap: str, *args: str, stdin: str | None = None) -> str:
    assert KCAT is not None
    result = subprocess.run(
        [KCAT, "-b", bootstrap, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, (
        f"kcat {' '.join(args)} exited {result.returncode}\nstderr:\n{result.stderr}"
    )
    return result.stdout


def test_kcat_metadata_lists_broker_and_topic_partitions(shared_broker):
    topic = unique_topic("kcat")
    create_topic(shared_broker.bootstrap, topic, partitions=3)
    listing = json.loads(_kcat(shared_broker.bootstrap, "-L", "-J", "-t", topic))
    (broker,) = listing["brokers"]
    assert broker["name"] == shared_broker.bootstrap
    (described,) = listing["topics"]
    assert described["topic"] == topic
    assert "error" not in described
    partitions = sorted(described["partitions"], key=lambda p: p["partition"])
    assert [p["partition"] for p in partitions] == [0, 1, 2]
    assert all(p["leader"] == broker["id"] for p in partitions)


def test_kcat_plain_metadata_listing_names_topic(shared_broker):
    topic = unique_topic("kcat")
    create_topic(shared_broker.bootstrap, topic, partitions=2)
    listing = _kcat(shared_broker.bootstrap, "-L")
    assert f'topic "{topic}" with 2 partitions' in listing


@pytest.mark.parametrize("codec", CODECS)
def test_kcat_produce_then_consume_to_end_with_codec(shared_broker, codec):
    topic = unique_topic(f"kcat-{codec}")
    create_topic(shared_broker.bootstrap, topic)
    lines = [f"key{i}:value {i} " + "x" * (i % 50) for i in range(300)]
    _kcat(
        shared_broker.bootstrap,
        "-P",
        "-t",
        topic,
        "-p",
        "0",
        "-z",
        codec,
        "-K",
        ":",
        stdin="\n".join(lines) + "\n",
    )
    out = _kcat(
        shared_broker.bootstrap,
        "-C",
        "-t",
        topic,
        "-p",
        "0",
        "-o",
        "beginning",
        "-e",
        "-q",
        "-f",
        "%k:%s|%o\n",
    )
    got = out.splitlines()
    assert got == [f"{line}|{i}" for i, line in enumerate(lines)]
