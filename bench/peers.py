"""The brokers under comparison, each started fresh on loopback and stopped after its runs.

A peer knows how to start itself, where clients reach it, and which pid to measure.
Kafka peers (kbroker, the librdkafka mock cluster) are driven by kafka_load; the Redis
peer by redis_load; the RabbitMQ peer by share_groups (queue consumption only).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.metadata_probe import wait_for_metadata
from bench.procs import free_port, log_tail, stop_process, tree_cpu_seconds, tree_memory

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
MOCK_BINARY = BENCH_DIR / "build" / "mock_cluster"
# The repository's venv, else the one running the harness (a git worktree has no .venv;
# with PYTHONPATH naming the worktree, that venv's kbroker runs the worktree's code).
KBROKER_BINARY = next(
    (
        path
        for path in (
            REPO_DIR / ".venv" / "bin" / "kbroker",
            Path(sys.executable).parent / "kbroker",
        )
        if path.exists()
    ),
    REPO_DIR / ".venv" / "bin" / "kbroker",
)


class PeerUnavailable(Exception):
    """The peer cannot run on this machine right now; the message says why."""


def add_settings_option(parser: argparse.ArgumentParser, flag: str = "--set") -> None:
    """`flag NAME=VALUE` (repeatable): a broker property for the kbroker peers of a run,
    collected as a list of (name, value) pairs (`dict(args.<flag>)`)."""
    parser.add_argument(
        flag,
        action="append",
        default=[],
        type=_setting,
        metavar="NAME=VALUE",
        help="a kbroker broker property (repeatable), e.g. socket.busy.poll.us=0",
    )


def _setting(text: str) -> tuple[str, str]:
    name, equals, value = text.partition("=")
    if not equals or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


@dataclass
class Peer:
    """A broker process under test; subclasses fill in how it starts."""

    name: str
    workdir: Path
    proc: subprocess.Popen | None = None
    host: str = "127.0.0.1"
    port: int = 0
    log_path: Path | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def memory(self):
        return tree_memory(self.pid)

    def cpu_seconds(self) -> float:
        return tree_cpu_seconds(self.pid)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> float:
        """Stops the broker; returns how long it took to exit."""
        if self.proc is None:
            return 0.0
        took = stop_process(self.proc)
        self.proc = None
        return took


@dataclass
class MockPeer(Peer):
    """librdkafka's mock cluster (in-memory, one broker) run by bench/build/mock_cluster."""

    topics: list[str] = field(default_factory=list)

    def start(self) -> None:
        ensure_mock_built()
        self.log_path = self.workdir / f"{self.name}.log"
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [str(MOCK_BINARY), *self.topics], stdout=subprocess.PIPE, stderr=log
            )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode().strip()
        if not line:
            raise PeerUnavailable(
                f"mock cluster printed no bootstrap servers: {log_tail(self.log_path)}"
            )
        self.host, port = line.split(",")[0].rsplit(":", 1)
        self.port = int(port)


@dataclass
class KbrokerPeer(Peer):
    """kbroker itself, started with `.venv/bin/kbroker serve` and per-run overrides."""

    overrides: dict[str, str] = field(default_factory=dict)
    data_dir: Path | None = None
    start_timeout: float = 60.0
    source: Path | None = None  # a snapshot of the kbroker package to run instead of the tree

    def command(self) -> list[str]:
        settings = {
            "listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "log.dirs": str(self.data_dir),
            # No /metrics endpoint: a fixed HTTP port would clash with any other kbroker
            # on the machine, and the other peers serve nothing besides their protocol.
            "http.listeners": "",
            **self.overrides,
        }
        cmd = [str(KBROKER_BINARY), "serve"]
        for key, value in settings.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd

    def start(self, topic: str | None = None, partitions: int = 0) -> tuple[float, float | None]:
        """Starts (or restarts, keeping data_dir) and waits for Metadata to succeed.

        Returns (seconds to the first Metadata answer, seconds until `topic` has
        `partitions` led partitions), both measured from process launch.
        """
        if not KBROKER_BINARY.exists():
            raise PeerUnavailable(f"{KBROKER_BINARY} does not exist (is the package installed?)")
        if self.port == 0:
            self.port = free_port()
        if self.data_dir is None:
            self.data_dir = self.workdir / f"{self.name}-data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.workdir / f"{self.name}.log"
        env = dict(os.environ)
        if self.source is not None:
            env["PYTHONPATH"] = os.pathsep.join(
                filter(None, [str(self.source), env.get("PYTHONPATH")])
            )
        with self.log_path.open("ab") as log:
            launched = time.perf_counter()
            self.proc = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir, env=env
            )
        first, full = wait_for_metadata(
            self.host,
            self.port,
            launched + self.start_timeout,
            topic=topic,
            partitions=partitions,
            alive=self.alive,
            since=launched,
        )
        if first is None:
            code = self.proc.poll()
            self.stop()
            state = f"exited with code {code}" if code is not None else "did not answer Metadata"
            raise PeerUnavailable(
                f"`kbroker serve` {state} within {self.start_timeout:.0f} s; "
                f"log tail ({self.log_path}):\n{log_tail(self.log_path)}"
            )
        return first, full


@dataclass
class KafkaPeer(Peer):
    """Apache Kafka 4.3 itself: one KRaft node (broker and controller) from the jars that
    scripts/install-test-tools.sh fetches, run as Kafka's launcher runs it (G1, short
    pauses) with a 512 MiB heap, its storage formatted before the timed start."""

    overrides: dict[str, str] = field(default_factory=dict)
    start_timeout: float = 120.0
    node: object | None = None
    # A SASL_SSL listener beside PLAINTEXT: its settings (keystore, mechanisms), on secure_port.
    sasl_ssl: dict[str, str] | None = None
    secure_port: int = 0

    def start(self) -> tuple[float, float | None]:
        """Formats (untimed: an operator's one-time step), launches, and waits for
        Metadata; returns (seconds from launch to the first Metadata answer, None)."""
        from compat_tests.kafka_reference import BROKER_JVM, KafkaReference, kafka_unavailable

        missing = kafka_unavailable()
        if missing:
            raise PeerUnavailable(missing)
        reference = KafkaReference(self.workdir / self.name, 1, self.overrides)
        node = reference.nodes[0]
        if self.sasl_ssl is not None:
            self.secure_port = free_port()
            secure = f"SASL_SSL://{self.host}:{self.secure_port}"
            node.overrides.update(
                {
                    "listeners": f"PLAINTEXT://{node.bootstrap},{secure},"
                    f"CONTROLLER://{self.host}:{node.controller_port}",
                    "advertised.listeners": f"PLAINTEXT://{node.bootstrap},{secure}",
                    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,"
                    "CONTROLLER:PLAINTEXT",
                    **self.sasl_ssl,
                }
            )
        reference.format()
        self.port, self.log_path, self.node = node.port, node.log_path, node
        launched = time.perf_counter()
        node.spawn(BROKER_JVM, log_level="WARN")
        self.proc = node.proc
        first, _ = wait_for_metadata(
            self.host, self.port, launched + self.start_timeout, alive=self.alive, since=launched
        )
        if first is None:
            self.stop()
            raise PeerUnavailable(
                f"Kafka did not answer Metadata within {self.start_timeout:.0f} s; "
                f"log tail ({self.log_path}):\n{log_tail(self.log_path)}"
            )
        return first, None


@dataclass
class RedisPeer(Peer):
    """Debian's redis-server on loopback: AOF with appendfsync always, data in workdir."""

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise PeerUnavailable("redis-server not found (apt-get install -y redis-server)")
        self.port = free_port()
        data = self.workdir / f"{self.name}-data"
        data.mkdir(parents=True, exist_ok=True)
        self.log_path = self.workdir / f"{self.name}.log"
        cmd = [
            binary,
            "--bind", self.host,
            "--port", str(self.port),
            "--dir", str(data),
            "--appendonly", "yes",
            "--appendfsync", "always",
            "--save", "",
            "--daemonize", "no",
            "--protected-mode", "no",
            "--logfile", str(self.log_path),
        ]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        import redis  # the bench extra; imported late so Kafka-only runs do not need it

        deadline = time.perf_counter() + 20
        while time.perf_counter() < deadline and self.alive():
            try:
                redis.Redis(host=self.host, port=self.port).ping()
                return
            except redis.ConnectionError:
                time.sleep(0.02)
        self.stop()
        raise PeerUnavailable(f"redis-server did not start: {log_tail(self.log_path)}")

    def client(self):
        import redis

        return redis.Redis(host=self.host, port=self.port)


RABBITMQ_SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")


@dataclass
class RabbitMQPeer(Peer):
    """Debian's rabbitmq-server, a node of its own: every file under the workdir, AMQP and
    Erlang distribution on loopback only, and its own epmd (started here, so it is
    stopped here too; the Debian wrapper would run it as the rabbitmq user from
    /var/lib/rabbitmq instead, and an epmd the node spawned would outlive it)."""

    epmd: subprocess.Popen | None = None

    def environment(self, base: Path, epmd_port: int) -> dict[str, str]:
        node = f"bench-{os.getpid()}-{self.port}@localhost"
        return {
            **os.environ,
            "HOME": str(base),  # .erlang.cookie
            "RABBITMQ_NODENAME": node,
            "RABBITMQ_NODE_IP_ADDRESS": self.host,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(free_port()),
            "ERL_EPMD_PORT": str(epmd_port),
            "ERL_EPMD_ADDRESS": self.host,
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
            "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
            "RABBITMQ_MNESIA_DIR": str(base / "mnesia" / node),
            "RABBITMQ_FEATURE_FLAGS_FILE": str(base / "feature_flags"),
            "RABBITMQ_LOG_BASE": str(base / "log"),
            "RABBITMQ_PLUGINS_EXPAND_DIR": str(base / "plugins-expand"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "enabled_plugins"),
            "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq"),  # absent: defaults
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(base / "advanced.config"),
            "RABBITMQ_CONF_ENV_FILE": str(base / "rabbitmq-env.conf"),
            "RABBITMQ_PID_FILE": str(base / "rabbitmq.pid"),
        }

    def start(self, timeout: float = 90.0) -> None:
        if not RABBITMQ_SERVER.exists() or shutil.which("epmd") is None:
            raise PeerUnavailable("rabbitmq-server not found (apt-get install -y rabbitmq-server)")
        try:
            import pika  # the bench extra; imported late so other runs do not need it
        except ImportError as exc:
            raise PeerUnavailable(
                f"pika is not installed (pip install -e '.[bench]'): {exc}"
            ) from exc
        self.port = free_port()
        base = self.workdir / f"{self.name}-data"
        base.mkdir(parents=True, exist_ok=True)
        (base / "enabled_plugins").write_text("[].\n")
        self.log_path = self.workdir / f"{self.name}.log"
        epmd_port = free_port()
        with self.log_path.open("ab") as log:
            self.epmd = subprocess.Popen(
                ["epmd", "-port", str(epmd_port), "-address", self.host],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
            self.proc = subprocess.Popen(
                [str(RABBITMQ_SERVER)],
                stdout=log, stderr=subprocess.STDOUT, cwd=base,
                env=self.environment(base, epmd_port),
            )  # fmt: skip
        params = pika.ConnectionParameters(self.host, self.port, connection_attempts=1)
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline and self.alive():
            try:
                pika.BlockingConnection(params).close()
                return
            except pika.exceptions.AMQPConnectionError:
                time.sleep(0.2)
        self.stop()
        raise PeerUnavailable(f"rabbitmq-server did not start: {log_tail(self.log_path)}")

    def stop(self) -> float:
        took = super().stop()
        if self.epmd is not None:
            stop_process(self.epmd)
            self.epmd = None
        return took


def ensure_mock_built() -> None:
    """Builds bench/build/mock_cluster with make if it is missing or older than its source."""
    source = BENCH_DIR / "mock_cluster.c"
    if MOCK_BINARY.exists() and MOCK_BINARY.stat().st_mtime >= source.stat().st_mtime:
        return
    if shutil.which("make") is None or shutil.which("cc") is None:
        raise PeerUnavailable("cannot build the mock cluster: make/cc missing (build-essential)")
    done = subprocess.run(["make", "-C", str(BENCH_DIR)], capture_output=True, text=True)
    if done.returncode != 0:
        raise PeerUnavailable(
            "building bench/build/mock_cluster failed (needs librdkafka-dev):\n" + done.stderr
        )


def kbroker_snapshot(rev: str, dest: Path) -> str:
    """Extracts the kbroker package as committed at `rev` into `dest`; returns the commit.

    The work tree changes under a long run while others edit it; a snapshot pins the
    figures to one commit. Only reads the repository (git archive), never checks out.
    """
    commit = subprocess.run(
        ["git", "-C", str(REPO_DIR), "rev-parse", "--verify", f"{rev}^{{commit}}"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.Popen(
        ["git", "-C", str(REPO_DIR), "archive", commit, "kbroker"], stdout=subprocess.PIPE
    )
    subprocess.run(["tar", "-x", "-C", str(dest)], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        raise PeerUnavailable(f"git archive {commit} kbroker failed")
    # The C parts (the produce path's record walk) are built in place, as `make` does.
    setup = subprocess.run(
        ["git", "-C", str(REPO_DIR), "show", f"{commit}:setup.py"], capture_output=True
    )
    if setup.returncode == 0:
        (dest / "setup.py").write_bytes(setup.stdout)
        built = subprocess.run(
            [sys.executable, "setup.py", "--quiet", "build_ext", "--inplace"],
            cwd=dest, capture_output=True, text=True,
        )  # fmt: skip
        if built.returncode != 0:
            raise PeerUnavailable(f"building kbroker's extension failed:\n{built.stderr}")
    return commit


def kbroker_tree_state() -> str:
    """HEAD of the work tree, marked dirty when kbroker/ has uncommitted changes."""
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO_DIR), "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO_DIR), "status", "--porcelain", "--", "kbroker"],
            capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip
    except OSError:
        return "unknown"
    return f"{head} (work tree{', kbroker/ modified' if dirty else ''})"
