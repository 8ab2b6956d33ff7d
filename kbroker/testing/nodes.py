"""kbroker nodes as child processes on loopback: what `kbroker.testing` and `kbroker dev`
start. Each node is a `python -m kbroker serve` process with its settings on the command
line, its stderr in a log file, and a parent-death signal so it never outlives the
process that started it. A node counts as started when it answers Metadata listing every
node of its cluster.

Nothing here imports the broker: the admin client is imported when a node is first asked.
"""

from __future__ import annotations

import contextlib
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
LOG_TAIL_CHARS = 4000
_PR_SET_PDEATHSIG = 1


class NodeStartError(RuntimeError):
    """A node exited or did not answer Metadata in time; the message ends with its log."""


def _ephemeral_range() -> tuple[int, int]:
    """The ports the kernel hands out to outgoing connections (Linux's default if unread)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


# Every port free_ports has handed out in this process. A port is free only until its
# node binds it, and a caller may ask for a registry's port, then for a node's listeners,
# and start the node with both: the second ask must not hand out the first port again.
_handed_out: set[int] = set()


def _worker_share() -> tuple[int, int]:
    """(this process's index, how many share the ports): under pytest-xdist each worker
    takes only the ports congruent to its index, since `_handed_out` is one process's and
    two workers could otherwise hand out the same port; (0, 1) anywhere else."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if worker.startswith("gw") and worker[2:].isdigit() and count.isdigit() and int(count) > 1:
        return int(worker[2:]) % int(count), int(count)
    return 0, 1


def free_ports(count: int, taken: Iterable[int] = ()) -> list[int]:
    """`count` distinct loopback ports that were free a moment ago (none of `taken`, none
    handed out before by this process).

    Chosen outside the kernel's ephemeral range where there is room below it: a port the
    kernel handed out for a listen probe can go to any outgoing connection before the
    node binds it (a broker's client, another test's), one below that range cannot."""
    ports: list[int] = []
    avoid = set(taken)
    low, _high = _ephemeral_range()
    index, share = _worker_share()
    below = range(10000 + index, low, share) if low > 11000 else None
    if below is not None and len(_handed_out) > len(below) // 2:
        _handed_out.clear()  # a long run: the oldest ports are long bound or long gone
    while len(ports) < count:
        port = random.choice(below) if below is not None else 0
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use: another pick
            port = int(sock.getsockname()[1])
        if port not in avoid and port not in ports and port not in _handed_out:
            ports.append(port)
    _handed_out.update(ports)
    return ports


def new_secret() -> str:
    return secrets.token_hex(24)


def _parent_death_signal() -> Callable[[], None] | None:
    """Linux: what a child runs before exec so that it gets SIGTERM when the process that
    started it dies (even by kill -9). ctypes is loaded here, not when the pytest plugin
    is, since most test runs start no node."""
    if sys.platform != "linux":
        return None
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def set_signal() -> None:  # pragma: no cover - runs in the child
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)

    return set_signal


def broker_environment() -> dict[str, str]:
    """The environment without KBROKER_* settings, which would beat none of the command
    line's but could add settings the caller never chose."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KBROKER_")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


@dataclass
class Node:
    """One kbroker process. `settings` are broker properties (Kafka's names)."""

    node_id: int
    directory: Path
    port: int
    settings: dict[str, str]
    http_port: int | None = None
    started_in: float = 0.0  # seconds from spawn to the first Metadata answered
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _spawned_at: float = field(default=0.0, repr=False)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.directory / f"node-{self.node_id}.log"

    def spawn(self, python: str | None = None) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        command = [python or sys.executable, "-m", "kbroker", "serve"]
        for name, value in self.settings.items():
            command += ["--override", f"{name}={value}"]
        with self.log_path.open("ab") as log:
            log.write(f"===== {' '.join(command)}\n".encode())
            log.flush()
            self._spawned_at = time.monotonic()
            self.proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=broker_environment(),
                cwd=self.directory,
                preexec_fn=_parent_death_signal(),
                # Its own process group: a terminal's Ctrl-C reaches the parent, which stops
                # every node in order, not each node at once behind its back.
                start_new_session=True,
            )

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def answers(self, expected_nodes: int) -> bool:
        """True once this node answers Metadata naming `expected_nodes` brokers."""
        from kbroker.admin.client import ClientError, cluster
        from kbroker.admin.topics import metadata

        try:
            with cluster(self.address, timeout=2.0) as c:
                md = metadata(c, [])
        except (ClientError, OSError):
            return False
        return len(md.brokers) >= expected_nodes

    def wait_started(self, expected_nodes: int, deadline: float) -> None:
        while not self.answers(expected_nodes):
            if not self.running:
                raise NodeStartError(
                    f"kbroker node {self.node_id} exited with status "
                    f"{self.proc.returncode if self.proc else '?'}\n{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                self.kill()
                raise NodeStartError(
                    f"kbroker node {self.node_id} did not answer Metadata on {self.address} "
                    f"in time\n{self.log_tail()}"
                )
            time.sleep(0.05)
        if not self.started_in:
            self.started_in = time.monotonic() - self._spawned_at

    def signal(self, signum: int) -> None:
        if self.running and self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signum)

    def wait(self, timeout: float) -> int | None:
        """The exit status, killing the process (status None) when it outlasts `timeout`."""
        if self.proc is None:
            return 0
        try:
            return self.proc.wait(timeout=max(timeout, 0.0))
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def rss_bytes(self) -> int:
        """Resident memory of the node's process now (Linux /proc), 0 when not running."""
        if not self.running or self.proc is None:
            return 0
        try:
            status = Path(f"/proc/{self.proc.pid}/status").read_text()
        except OSError:
            return 0
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-LOG_TAIL_CHARS:]
        except OSError:
            return "(no log)"


def single_node(directory: Path, port: int, http_port: int | None, **settings: str) -> Node:
    """A node that is its own controller, as `kbroker serve` runs by default."""
    base = {
        "listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "log.dirs": str(directory / "data"),
        "http.listeners": f"http://127.0.0.1:{http_port}" if http_port else "",
    }
    return Node(1, directory, port, {**base, **settings}, http_port)


def cluster_nodes(
    directory: Path,
    ports: list[int],
    controller_ports: list[int],
    http_ports: list[int] | None,
    secret: str,
    settings: Mapping[str, str] | None = None,
) -> list[Node]:
    """Nodes 1..N, each a voter of the metadata quorum and a broker, as docker-compose runs
    them. Topics (internal ones included) are replicated to min(3, N) nodes by default,
    so a cluster keeps every record through the loss of a node and a small one still
    serves groups and transactions."""
    size = len(ports)
    voters = ",".join(f"{i + 1}@127.0.0.1:{controller_ports[i]}" for i in range(size))
    replicas = str(min(3, size))
    min_isr = str(min(2, size))
    nodes = []
    for i in range(size):
        node_id = i + 1
        http = http_ports[i] if http_ports else None
        node_dir = directory / f"node-{node_id}"
        base = {
            "node.id": str(node_id),
            "process.roles": "broker,controller",
            "listeners": (
                f"PLAINTEXT://127.0.0.1:{ports[i]},CONTROLLER://127.0.0.1:{controller_ports[i]}"
            ),
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{ports[i]}",
            "controller.listener.names": "CONTROLLER",
            "controller.quorum.voters": voters,
            "cluster.secret": secret,
            "log.dirs": str(node_dir / "data"),
            "http.listeners": f"http://127.0.0.1:{http}" if http else "",
            "default.replication.factor": replicas,
            "offsets.topic.replication.factor": replicas,
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": min_isr,
            "share.coordinator.state.topic.replication.factor": replicas,
            "share.coordinator.state.topic.min.isr": min_isr,
        }
        nodes.append(Node(node_id, node_dir, ports[i], {**base, **(settings or {})}, http))
    return nodes


def start_all(
    nodes: list[Node], timeout: float = START_TIMEOUT_S, python: str | None = None
) -> None:
    """Spawn every node (with `python`, else this interpreter), then wait until each
    answers Metadata naming all of them; on failure every node is killed and the error
    carries the failing node's log."""
    deadline = time.monotonic() + timeout
    try:
        for node in nodes:
            node.spawn(python)
        for node in nodes:
            node.wait_started(len(nodes), deadline)
    except BaseException:
        for node in nodes:
            node.kill()
        raise


def stop_all(nodes: list[Node], timeout: float = STOP_TIMEOUT_S) -> dict[int, int | None]:
    """SIGTERM every node at once and wait for each; one still running at the timeout is
    killed. Returns each node's exit status (None for killed)."""
    for node in nodes:
        node.signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    return {node.node_id: node.wait(deadline - time.monotonic()) for node in nodes}
