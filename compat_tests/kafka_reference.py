"""Apache Kafka 4.3 itself on loopback, beside kbroker: the reference its behaviour is held to.

The jars come from scripts/install-test-tools.sh (``fetch_kafka_dist``: Maven Central into
~/.cache/kbroker-test-tools/kafka-4.3, or KBROKER_KAFKA_DIST), run with the JDK on PATH.

- ``KafkaNode``: one KRaft node, broker and controller combined (``process.roles``), its
  storage formatted before its first start, on free loopback ports, with a heap sized for
  a 2-core machine; ready once it has answered ApiVersions and a stock client's Metadata.
- ``KafkaReference``: one node or a 3-node quorum sharing a cluster id; ``running_kafka``
  keeps one started for a block (a module fixture's body) and kills it after.
- ``ToolRunner``: Kafka's command-line tools (``kafka.tools.*``, ``org.apache.kafka.tools.*``)
  run one after another inside one JVM, so a test pays the JVM's start-up once; each run
  answers its exit code, stdout and stderr (compat_tests/kafka_tools/ToolRunner.java).

``kafka_unavailable()`` says why Kafka cannot run here (no JDK, jars not fetched) so that a
test can skip saying so; on a machine where the install script ran it is None.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compat_tests.broker_process import (
    LIVE,
    api_versions_round_trip,
    free_ports,
    kill_now,
    log_tail,
    metadata_round_trip,
    rss_of,
    spawn_logged,
    stop_gracefully,
)

KAFKA_VERSION = "4.3.1"
KAFKA_DIST = Path(
    os.environ.get(
        "KBROKER_KAFKA_DIST", Path.home() / ".cache" / "kbroker-test-tools" / "kafka-4.3"
    )
)
TOOL_SOURCE = Path(__file__).with_name("kafka_tools") / "ToolRunner.java"

# A JVM on a loaded 2-core machine: a node takes 10-20 s to its first Metadata.
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30.0
TOOL_TIMEOUT_S = 120.0
LOG_TAIL_LINES = 200

# Kafka's own launcher (kafka-run-class.sh) runs the broker with G1 and short pauses; the
# heap is half of its default 1 GiB, which a test node never fills.
BROKER_JVM = (
    "-Xmx512m",
    "-Xms512m",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
)
# A test node needs no peak throughput: the quick JIT tier and a smaller heap cut its start-up
# CPU, which on 2 shared cores is most of its time to first Metadata.
TEST_JVM = (
    "-Xmx384m",
    "-Xms384m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Djava.awt.headless=true",
)
# Tools are short-lived: a small serial-GC heap and the quick JIT tier start fastest.
TOOL_JVM = ("-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true")

# Settings a test node runs with: internal topics fit the cluster's size, and groups form at
# once (the same as compat_tests.broker_process.FAST_GROUP_SETTINGS gives kbroker).
TEST_SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "num.partitions": "1",
    "auto.create.topics.enable": "true",
}

LOG4J2 = """\
status = warn
appender.console.type = Console
appender.console.name = STDERR
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.console.ref = STDERR
"""


class KafkaStartError(RuntimeError):
    pass


def kafka_unavailable() -> str | None:
    """Why Kafka cannot run on this machine, or None when it can."""
    for tool in ("java", "javac"):
        if shutil.which(tool) is None:
            return f"{tool} not found on PATH (Kafka {KAFKA_VERSION} needs a JDK, 17 or newer)"
    complete = KAFKA_DIST / ".complete"
    if not complete.is_file() or complete.read_text().strip() != KAFKA_VERSION:
        return (
            f"Apache Kafka {KAFKA_VERSION}'s jars are not in {KAFKA_DIST} "
            "(scripts/install-test-tools.sh fetches them)"
        )
    return None


def kafka_classpath(*extra: str) -> str:
    return os.pathsep.join([*extra, str(KAFKA_DIST / "*")])


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes in URL-safe base64 without padding, never
    starting with "-" (Kafka's Uuid.randomUuid skips those, and a command line would take
    such an id for an option)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def write_log4j2(directory: Path, level: str) -> Path:
    path = directory / f"log4j2-{level.lower()}.properties"
    if not path.exists():
        path.write_text(LOG4J2.format(level=level))
    return path


def tool_runner_classes() -> Path:
    """The programs in compat_tests/kafka_tools (ToolRunner.java, WordCount.java) compiled
    against the fetched jars, once per version of their sources."""
    sources = sorted(TOOL_SOURCE.parent.glob("*.java"))
    digest = hashlib.sha256(
        b"".join(p.read_bytes() for p in sources) + KAFKA_VERSION.encode()
    ).hexdigest()[:16]
    target = KAFKA_DIST.parent / f"kafka-tool-runner-{digest}"
    if (target / "ToolRunner.class").is_file():
        return target
    building = Path(f"{target}.part-{os.getpid()}")
    building.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["javac", "-nowarn", "-d", str(building), "-cp", kafka_classpath(), *map(str, sources)],
        check=True,
        capture_output=True,
        timeout=TOOL_TIMEOUT_S,
    )
    try:
        building.rename(target)
    except OSError:  # another process built it first
        shutil.rmtree(building, ignore_errors=True)
    return target


@dataclass
class ToolResult:
    code: int
    out: str
    err: str

    def check(self) -> ToolResult:
        if self.code != 0:
            raise AssertionError(
                f"tool exited {self.code}\nstdout:\n{self.out}\nstderr:\n{self.err}"
            )
        return self


class ToolRunner:
    """One JVM running Kafka's tools in turn: ``run(main_class, *args, stdin="")``."""

    def __init__(self, work_dir: Path, log_level: str = "WARN") -> None:
        work_dir.mkdir(parents=True, exist_ok=True)
        classes = tool_runner_classes()
        log4j = write_log4j2(work_dir, log_level)
        self._stderr = open(work_dir / "tool-runner.stderr.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                "java",
                *TOOL_JVM,
                f"-Dlog4j2.configurationFile={log4j}",
                "-cp",
                kafka_classpath(str(classes)),
                "ToolRunner",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            cwd=work_dir,
        )
        LIVE.add(self.proc)
        self._lock = threading.Lock()

    def run(
        self, main: str, *args: str, stdin: str = "", timeout: float = TOOL_TIMEOUT_S
    ) -> ToolResult:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        line = json.dumps({"main": main, "args": list(args), "stdin": stdin}) + "\n"
        with self._lock:
            self.proc.stdin.write(line.encode())
            self.proc.stdin.flush()
            answer: list[dict[str, Any]] = []
            reader = threading.Thread(target=self._read_answer, args=(answer,), daemon=True)
            reader.start()
            reader.join(timeout)
            if not answer:
                self.close()
                raise AssertionError(f"{main} {' '.join(args)} did not finish within {timeout}s")
        return ToolResult(int(answer[0]["code"]), answer[0]["out"], answer[0]["err"])

    def _read_answer(self, into: list[dict[str, Any]]) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                decoded = json.loads(raw)
            except ValueError:
                continue  # a line a tool's own thread wrote to the process's stdout
            if isinstance(decoded, dict) and decoded.get("toolRunner"):
                into.append(decoded)
                return

    def close(self) -> None:
        if self.proc.poll() is None:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        LIVE.discard(self.proc)
        self._stderr.close()


def run_tool_process(
    main: str, *args: str, stdin: str = "", timeout: float = TOOL_TIMEOUT_S
) -> ToolResult:
    """A tool in a JVM of its own: for tools that report from a shutdown hook (the
    verifiable producer and consumer print their last events as the JVM exits)."""
    log4j = write_log4j2(KAFKA_DIST.parent, "WARN")
    done = subprocess.run(
        [
            "java",
            *TOOL_JVM,
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp",
            kafka_classpath(),
            main,
            *args,
        ],
        input=stdin.encode(),
        capture_output=True,
        timeout=timeout,
    )
    return ToolResult(
        done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
    )


def start_tool_process(
    main: str, *args: str, log: Path, classes: Path | None = None
) -> subprocess.Popen[bytes]:
    """A long-running Kafka program (MirrorMaker 2, a Streams application...) in a JVM of its
    own, its output appended to `log`; the caller stops it. `classes` adds a directory of
    compiled classes (tool_runner_classes()) to the class path."""
    log4j = write_log4j2(log.parent, "INFO")
    extra = () if classes is None else (str(classes),)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [
                "java",
                *TOOL_JVM,
                f"-Dlog4j2.configurationFile={log4j}",
                "-cp",
                kafka_classpath(*extra),
                main,
                *args,
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )
    LIVE.add(proc)
    return proc


@dataclass
class KafkaNode:
    """One Kafka KRaft node (broker and controller) with its own ports and log dir."""

    base_dir: Path
    node_id: int
    port: int
    controller_port: int
    voters: str = ""
    cluster_id: str = ""
    overrides: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    ready_seconds: float = 0.0
    _spawned_at: float = 0.0

    def __post_init__(self) -> None:
        self.base_dir.mkdir(parents=True, exist_ok=True)

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def data_dir(self) -> Path:
        return self.base_dir / "data"

    @property
    def properties_path(self) -> Path:
        return self.base_dir / "server.properties"

    @property
    def log_path(self) -> Path:
        return self.base_dir / "kafka.stderr.log"

    @property
    def pid(self) -> int:
        assert self.proc is not None, "kafka not started"
        return self.proc.pid

    def settings(self) -> dict[str, str]:
        return {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": self.voters
            or f"{self.node_id}@{self.host}:{self.controller_port}",
            "listeners": f"PLAINTEXT://{self.bootstrap},CONTROLLER://{self.host}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.bootstrap}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            **TEST_SETTINGS,
            **self.overrides,
        }

    def write_properties(self) -> None:
        lines = [f"{name}={value}" for name, value in self.settings().items()]
        self.properties_path.write_text("\n".join(lines) + "\n")

    def formatted(self) -> bool:
        return (self.data_dir / "meta.properties").is_file()

    def format_args(self) -> list[str]:
        return [
            "format",
            "--cluster-id",
            self.cluster_id,
            "--config",
            str(self.properties_path),
            "--ignore-formatted",
        ]

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def spawn(self, jvm: Sequence[str] = BROKER_JVM, log_level: str = "INFO") -> None:
        if self.running():
            raise RuntimeError("kafka already running")
        log4j = write_log4j2(self.base_dir, log_level)
        cmd = [
            "java",
            *jvm,
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp",
            kafka_classpath(),
            "kafka.Kafka",
            str(self.properties_path),
        ]
        self._spawned_at = time.monotonic()
        self.proc = spawn_logged(cmd, self.log_path, "start", self.base_dir)

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> float:
        """Seconds from spawn until ApiVersions and a Metadata round trip (with a broker
        listed) are answered."""
        assert self.proc is not None
        deadline = self._spawned_at + timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise KafkaStartError(
                    f"kafka exited with code {self.proc.returncode} before serving\n"
                    + self.log_tail()
                )
            try:
                api_versions_round_trip(self.host, self.port)
                metadata_round_trip(self.bootstrap, 2.0)
                self.ready_seconds = time.monotonic() - self._spawned_at
                return self.ready_seconds
            except Exception as exc:  # not listening yet, or no broker registered yet
                last_error = exc
                time.sleep(0.1)  # pacing: the start is polled
        self.kill()
        raise KafkaStartError(
            f"kafka did not answer Metadata on {self.bootstrap} within {timeout}s "
            f"(last error: {last_error!r})\n" + self.log_tail()
        )

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM (Kafka's controlled shutdown) and wait; return the exit code."""
        if self.proc is None:
            raise RuntimeError("kafka not started")
        return stop_gracefully(self.proc, timeout, "kafka", self.log_tail)

    def kill(self) -> None:
        if self.proc is not None:
            kill_now(self.proc)

    def rss_bytes(self) -> int:
        return rss_of(self.pid)

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return log_tail(self.log_path, "kafka", lines)


class KafkaReference:
    """``size`` Kafka nodes, each broker and voter, formatted with one cluster id."""

    def __init__(self, root: Path, size: int = 1, overrides: dict[str, str] | None = None) -> None:
        self.root = root
        self.cluster_id = new_cluster_id()
        names = [f"{kind}{i}" for i in range(1, size + 1) for kind in ("kafka", "controller")]
        ports = free_ports(names)
        voters = ",".join(f"{i}@127.0.0.1:{ports[f'controller{i}']}" for i in range(1, size + 1))
        rf = str(min(size, 3))
        settings = {
            "offsets.topic.replication.factor": rf,
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": "1" if size == 1 else "2",
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": "1" if size == 1 else "2",
            "default.replication.factor": "1",
            **(overrides or {}),
        }
        self.nodes = [
            KafkaNode(
                root / f"kafka{i}",
                i,
                ports[f"kafka{i}"],
                ports[f"controller{i}"],
                voters,
                self.cluster_id,
                dict(settings),
            )
            for i in range(1, size + 1)
        ]

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes)

    def format(self) -> None:
        """Format every node's storage not yet formatted, in one JVM."""
        pending = [node for node in self.nodes if not node.formatted()]
        for node in self.nodes:
            node.write_properties()
        if not pending:
            return
        runner = ToolRunner(self.root / "format", "ERROR")
        try:
            for node in pending:
                runner.run("kafka.tools.StorageTool", *node.format_args()).check()
        finally:
            runner.close()

    def start(self, timeout: float = START_TIMEOUT_S, jvm: Sequence[str] = TEST_JVM) -> float:
        """Format, start every node, and wait for all; seconds to the last one ready.
        Tests take the default JVM options; a benchmark passes BROKER_JVM."""
        began = time.monotonic()
        self.format()
        for node in self.nodes:
            node.spawn(jvm)
        try:
            for node in self.nodes:
                node.wait_ready(timeout)
        except BaseException:
            self.kill_all()
            raise
        return time.monotonic() - began

    def stop_all(self) -> None:
        for node in self.nodes:
            if node.running():
                node.stop()

    def kill_all(self) -> None:
        for node in self.nodes:
            node.kill()

    def log_tails(self, lines: int = 60) -> str:
        return "\n".join(node.log_tail(lines) for node in self.nodes)


@contextmanager
def running_kafka(
    root: Path, size: int = 1, overrides: dict[str, str] | None = None
) -> Iterator[KafkaReference]:
    kafka = KafkaReference(root, size, overrides)
    try:
        kafka.start()
        yield kafka
    finally:
        kafka.kill_all()
