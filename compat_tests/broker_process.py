"""A real ``kbroker serve`` process on loopback, started and stopped the way an operator would.

The compat tests only ever talk to the broker over its Kafka listener, so readiness is
judged the same way: the port accepts, a raw ApiVersions v0 round trip answers with no
error (Kafka guarantees v0 for every broker, so this probe needs no negotiation), and a
stock client's Metadata round trip succeeds.
"""

from __future__ import annotations

import atexit
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbroker.admin.client import BrokerConnection, ClientError, produce_fields
from kbroker.protocol.batch import BatchHeader, encode_batch
from kbroker.storage.segment import scan_batches
from kbroker.testing.nodes import free_ports as loopback_ports

START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 20.0
METADATA_GRACE_S = 3.0
LOG_TAIL_LINES = 300

# Classic groups that form at once and accept short sessions, so rebalances take seconds:
# the initial delay alone would add 3 s to every new group.
FAST_GROUP_SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
}

# Every server and tool process a test started (kbroker's here, Kafka's in kafka_reference).
LIVE: set[subprocess.Popen[bytes]] = set()


def _kill_leftovers() -> None:
    """Last line of defence: no broker outlives the test run, whatever happened to it."""
    for proc in list(LIVE):
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)


atexit.register(_kill_leftovers)


class BrokerStartError(RuntimeError):
    pass


# -- a server process under test: what kbroker's and Kafka's nodes (kafka_reference) share --


def spawn_logged(
    cmd: list[str], log_path: Path, what: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start `cmd` with stdout and stderr appended to `log_path` after a line saying `what`
    and the command; it is killed at exit if it still runs then."""
    with open(log_path, "ab") as log:
        log.write(f"\n===== {what}: {' '.join(cmd)}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, cwd=cwd
        )
    LIVE.add(proc)
    return proc


def stop_gracefully(
    proc: subprocess.Popen[bytes], timeout: float, name: str, tail: Callable[[], str]
) -> int:
    """SIGTERM and wait for the exit code; kill and raise (with the log's `tail`) on hang."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_now(proc)
            raise RuntimeError(
                f"{name} did not exit within {timeout}s of SIGTERM\n" + tail()
            ) from None
    LIVE.discard(proc)
    return proc.returncode


def kill_now(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL, if it still runs, and reap it."""
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)
    LIVE.discard(proc)


def rss_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("VmRSS not found")


def log_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def log_tail(path: Path, name: str, lines: int) -> str:
    text = log_text(path).splitlines()
    head = f"--- {name} stderr ({path}), last {min(lines, len(text))} lines ---"
    return "\n".join([head, *text[-lines:]])


def kbroker_command() -> list[str]:
    """The installed console script beside this interpreter, else ``python -m kbroker``.

    ``COMPAT_BROKER_COMMAND`` (shell words) replaces it, to run the suite against another
    build or a wrapped interpreter.
    """
    configured = os.environ.get("COMPAT_BROKER_COMMAND")
    if configured:
        return shlex.split(configured)
    script = Path(sys.executable).with_name("kbroker")
    if script.exists():
        return [str(script)]
    found = shutil.which("kbroker")
    if found:
        return [found]
    return [sys.executable, "-m", "kbroker"]


def run_admin(bootstrap: str, command_config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A `kbroker` admin command against `bootstrap` with Kafka's client properties
    file (`--command-config`), its output captured."""
    return subprocess.run(
        [
            *kbroker_command(),
            *args,
            "--bootstrap",
            bootstrap,
            "--command-config",
            str(command_config),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def broker_environment() -> dict[str, str]:
    """This process's environment for a broker, without KBROKER_* settings.

    Where PYTHONDONTWRITEBYTECODE is set, every broker would compile kbroker's ~160
    modules again (about 0.2 s of CPU per start, hundreds of starts per run): brokers
    instead keep their bytecode under a cache directory outside the source tree, which
    stays as clean as the setting asked.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("KBROKER_")}
    env["PYTHONUNBUFFERED"] = "1"
    if env.pop("PYTHONDONTWRITEBYTECODE", None) and "PYTHONPYCACHEPREFIX" not in env:
        env["PYTHONPYCACHEPREFIX"] = str(Path(tempfile.gettempdir()) / "kbroker-test-pycache")
    return env


def free_port() -> int:
    """A loopback port free a moment ago, below the kernel's ephemeral range."""
    return loopback_ports(1)[0]


def free_ports(names: Iterable[str], *taken: int) -> dict[str, int]:
    """A free loopback port for each name, no two alike and none in `taken`: each port is
    released before the next is asked for, so the kernel may hand one out again."""
    ports: dict[str, int] = {}
    for name in names:
        port = free_port()
        while port in taken or port in ports.values():
            port = free_port()
        ports[name] = port
    return ports


def api_versions_round_trip(
    host: str, port: int, timeout: float = 2.0
) -> dict[int, tuple[int, int]]:
    """Send ApiVersions v0 and return {api_key: (min, max)}; raise on any error or mismatch."""
    with BrokerConnection(host, port, timeout, "kbroker-compat-probe") as conn:
        return conn.negotiate().versions


def metadata_round_trip(bootstrap: str, timeout: float) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 5000})
    metadata = admin.list_topics(timeout=max(timeout, 0.5))
    if not metadata.brokers:
        raise ConnectionError("Metadata response lists no brokers")


@dataclass
class BrokerProcess:
    """One kbroker node: fixed port and data dir across restarts, stderr appended to a log."""

    base_dir: Path
    overrides: dict[str, str] = field(default_factory=dict)
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    api_versions: dict[int, tuple[int, int]] = field(default_factory=dict)
    ready_seconds: float = 0.0
    starts: int = 0
    _spawned_at: float = 0.0
    # How long a Metadata round trip may keep failing once the listener answers.
    metadata_grace_s: float = METADATA_GRACE_S

    def __post_init__(self) -> None:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if not self.port:
            self.port = free_port()

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
    def log_path(self) -> Path:
        return self.base_dir / "kbroker.stderr.log"

    @property
    def pid(self) -> int:
        assert self.proc is not None, "broker not started"
        return self.proc.pid

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def command(self) -> list[str]:
        settings = {
            "listeners": f"PLAINTEXT://{self.bootstrap}",
            "log.dirs": str(self.data_dir),
            # No fixed-port HTTP endpoint: brokers of one run would fight over it.
            "http.listeners": "",
            **self.overrides,
        }
        cmd = [*kbroker_command(), "serve"]
        for name, value in settings.items():
            cmd += ["--override", f"{name}={value}"]
        return cmd

    def start(self, timeout: float = START_TIMEOUT_S) -> float:
        """Start the process and wait until it serves; return seconds from spawn to ready."""
        self.spawn()
        return self.wait_ready(timeout)

    def spawn(self) -> None:
        """Start the process without waiting (a cluster node serves only once a majority
        of the quorum runs, so a cluster spawns every node before waiting for any)."""
        if self.running():
            raise RuntimeError("broker already running")
        env = broker_environment()
        cmd = self.command()
        self.starts += 1
        self._spawned_at = time.monotonic()
        self.proc = spawn_logged(cmd, self.log_path, f"start #{self.starts}", self.base_dir, env)

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> float:
        """Wait until the spawned process serves; return seconds from spawn to ready."""
        began = self._spawned_at
        try:
            self._wait_ready(began + timeout)
        except BaseException:
            self.kill()
            raise
        self.ready_seconds = time.monotonic() - began
        return self.ready_seconds

    def _wait_ready(self, deadline: float) -> None:
        assert self.proc is not None
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BrokerStartError(
                    f"kbroker exited with code {self.proc.returncode} before serving\n"
                    + self.log_tail()
                )
            try:
                self.api_versions = api_versions_round_trip(self.host, self.port)
                break
            except (OSError, ClientError) as exc:
                last_error = exc
                time.sleep(0.05)  # pacing: the start is polled
        else:
            raise BrokerStartError(
                f"kbroker did not answer ApiVersions on {self.bootstrap} within the start "
                f"timeout (last error: {last_error!r})\n" + self.log_tail()
            )
        # The listener is up, so a failing Metadata is the broker's fault: retry briefly only.
        metadata_deadline = min(deadline, time.monotonic() + self.metadata_grace_s)
        while True:
            try:
                metadata_round_trip(self.bootstrap, metadata_deadline - time.monotonic())
                return
            except Exception as exc:
                if time.monotonic() >= metadata_deadline or self.proc.poll() is not None:
                    raise BrokerStartError(
                        f"kbroker answered ApiVersions but not a Metadata round trip: {exc!r}\n"
                        + self.log_tail()
                    ) from exc
                time.sleep(0.2)  # pacing: Metadata is retried

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM and wait for a clean exit; return the exit code (kill and raise on hang)."""
        if self.proc is None:
            raise RuntimeError("broker not started")
        return stop_gracefully(self.proc, timeout, "kbroker", self.log_tail)

    def kill(self) -> None:
        """SIGKILL: the crash a fsync policy has to survive."""
        if self.proc is not None:
            kill_now(self.proc)

    def restart(
        self, extra_overrides: dict[str, str] | None = None, graceful: bool = True
    ) -> float:
        """Stop (if running) and start again on the same port and data dir."""
        if self.running():
            if graceful:
                self.stop()
            else:
                self.kill()
        if extra_overrides:
            self.overrides = {**self.overrides, **extra_overrides}
        return self.start()

    def rss_bytes(self) -> int:
        return rss_of(self.pid)

    def log_text(self) -> str:
        return log_text(self.log_path)

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return log_tail(self.log_path, "kbroker", lines)


@contextmanager
def running_broker(
    base_dir: Path, overrides: dict[str, str] | None = None
) -> Iterator[BrokerProcess]:
    """A started node for the length of the block (a module fixture's body), then SIGKILLed."""
    node = BrokerProcess(base_dir, dict(overrides or {}))
    try:
        node.start()
        yield node
    finally:
        node.kill()


def stored_batches(broker: BrokerProcess, topic: str, partition: int = 0) -> list[BatchHeader]:
    """The headers of every batch in the partition's segment files, as the node wrote them:
    what a client cannot see, such as codecs, compaction and control batches."""
    headers: list[BatchHeader] = []
    for path in sorted((broker.data_dir / f"{topic}-{partition}").glob("*.log")):
        fd = os.open(path, os.O_RDONLY)
        try:
            headers += scan_batches(fd, 0, os.fstat(fd).st_size)
        finally:
            os.close(fd)
    return headers


def produce_one_error(broker: BrokerProcess, topic: str, partition: int, client_id: str) -> int:
    """The error code of a one-record Produce (acks=1) sent on a fresh connection: the raw
    request shows the broker's own answer where a stock client would retry."""
    batch = bytes(encode_batch([b"x"], int(time.time() * 1000)))
    with BrokerConnection(broker.host, broker.port, 10.0, client_id) as conn:
        answer = conn.request(0, 9, **produce_fields(topic, batch, partition=partition, acks=1))
    return int(answer.responses[0].partition_responses[0].error_code)


def topic_metadata(broker: BrokerProcess, topic: str, client_id: str) -> Any:
    """The broker's Metadata (v12) for one topic, asked on a fresh connection without
    creating it."""
    with BrokerConnection(broker.host, broker.port, 10.0, client_id) as conn:
        answer = conn.request(
            3, 12, topics=[{"name": topic, "topic_id": None}], allow_auto_topic_creation=False
        )
    return answer.topics[0]
