"""The Java clients Kafka 4 no longer serves (kafka-clients 0.11, 1.1 and 2.0, KIP-896)
produce, consume in a group and commit on the topic a current client (confluent-kafka)
writes and reads, as against Kafka 3.9.

The jars come from scripts/install-test-tools.sh (Maven Central, into
~/.cache/kbroker-test-tools/kafka-java-old/VERSION; KBROKER_OLD_KAFKA_JARS overrides);
compat_tests/java_old/OldClient.java is compiled against each.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import confluent_kafka
import pytest

from compat_tests.broker_process import BrokerProcess
from compat_tests.confluent_helpers import (
    consume_from_beginning,
    create_topic,
    produce_all,
    unique_topic,
)

pytestmark = pytest.mark.timeout(120)

OLD_JARS = Path(
    os.environ.get(
        "KBROKER_OLD_KAFKA_JARS", Path.home() / ".cache" / "kbroker-test-tools" / "kafka-java-old"
    )
)
VERSIONS = ("0.11.0.3", "1.1.1", "2.0.1")
SOURCE = Path(__file__).with_name("java_old") / "OldClient.java"


def _classpath(version: str, tmp_path: Path) -> str:
    jars = OLD_JARS / version
    if shutil.which("javac") is None or shutil.which("java") is None:
        pytest.skip("no JDK on PATH (the old Java client tests need javac and java)")
    if not (jars / ".complete").is_file():
        pytest.skip(
            f"kafka-clients {version} is not in {jars}: scripts/install-test-tools.sh "
            "fetches it from Maven Central, and could not here"
        )
    classes = tmp_path / "classes"
    classpath = f"{jars}/*"
    subprocess.run(
        ["javac", "-d", str(classes), "-cp", classpath, str(SOURCE)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return f"{classes}:{classpath}"


@pytest.mark.parametrize("version", VERSIONS)
def test_old_java_client_produces_consumes_and_commits_beside_a_current_client(
    shared_broker: BrokerProcess, version: str, tmp_path: Path
) -> None:
    classpath = _classpath(version, tmp_path)
    bootstrap = shared_broker.bootstrap
    topic, group = unique_topic("old-java"), unique_topic("old-java-group")
    create_topic(bootstrap, topic)
    produce_all(bootstrap, topic, [{"key": b"n", "value": f"new-{i}".encode()} for i in range(3)])
    run = subprocess.run(
        ["java", "-cp", classpath, "OldClient", bootstrap, topic, group, "3", "6", "gzip"],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    answer = json.loads(run.stdout.strip().splitlines()[-1])
    expected = [[i, f"new-{i}"] for i in range(3)] + [[3 + i, f"java-old-{i}"] for i in range(3)]
    assert answer == {"records": expected, "committed": 6}
    # What the old client wrote is a current consumer's, and its commit the group's.
    got = consume_from_beginning(bootstrap, topic, 6)
    assert [r.value for r in got] == [v.encode() for _, v in expected]
    current = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        (tp,) = current.committed([confluent_kafka.TopicPartition(topic, 0)], timeout=15)
    finally:
        current.close()
    assert tp.offset == 6
