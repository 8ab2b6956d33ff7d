"""A kbroker cluster whose nodes live in network namespaces of their own, so a test can cut
the links between them (a network partition) while the test itself still reaches every node.

Topology, all created by ``NetnsCluster`` and removed by ``close()``: one namespace per
node plus one for the client (the test process), joined pairwise by veth pairs (a full
mesh). Each namespace owns one address from 198.18.0.0/15 (RFC 2544's range for network
tests, never routed) on its loopback device, with a /32 route per peer over the veth that
leads to it. ``cut(a, b)`` sets both ends of the a-b veth down; ``heal()`` brings every
link back and restores its routes. Nothing touches the host's own namespace: the test
process enters the client namespace (``entered()``, a setns of the calling thread; threads
it starts, such as librdkafka's, inherit it) and brokers are started with
``ip netns exec``. Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from compat_tests.cluster import ClusterNode, KafkaCluster

CLONE_NEWNET = 0x40000000
CLIENT = 0  # the test process's end of the mesh
SUBNET = "198.18.0"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


def netns_unavailable() -> str | None:
    """Why this machine cannot make network namespaces, or None when it can."""
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed (scripts/install-test-tools.sh installs it)"
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    return None


class NetnsNode(ClusterNode):
    """A cluster node started inside its namespace, serving on the namespace's address."""

    netns: str = ""
    address: str = ""

    @property
    def host(self) -> str:
        return self.address

    def command(self) -> list[str]:
        return ["ip", "netns", "exec", self.netns, *super().command()]


class NetnsCluster(KafkaCluster):
    def __init__(self, root: Path, size: int = 3, overrides: dict[str, str] | None = None):
        self.tag = uuid.uuid4().hex[:6]
        self.members = list(range(CLIENT, size + 1))
        self._made: list[str] = []
        try:
            for m in self.members:
                self._make_namespace(m)
            for a in self.members:
                for b in self.members:
                    if a < b:
                        _ip(
                            "link",
                            "add",
                            self._dev(b),
                            "netns",
                            self.netns(a),
                            "type",
                            "veth",
                            "peer",
                            "name",
                            self._dev(a),
                            "netns",
                            self.netns(b),
                        )
                        self._link_up(a, b)
        except BaseException:
            self.close()
            raise
        super().__init__(root, size, overrides)

    # -- topology ---------------------------------------------------------------------------

    def netns(self, member: int) -> str:
        return f"kb{self.tag}-{member}"

    def address(self, member: int) -> str:
        return f"{SUBNET}.{member + 1}"

    @staticmethod
    def _dev(peer: int) -> str:
        """In each namespace, the veth leading to `peer` is named after it."""
        return f"to{peer}"

    def _make_namespace(self, member: int) -> None:
        name = self.netns(member)
        _ip("netns", "add", name)
        self._made.append(name)
        _ip("-n", name, "link", "set", "lo", "up")
        _ip("-n", name, "addr", "add", f"{self.address(member)}/32", "dev", "lo")

    def _link_up(self, a: int, b: int) -> None:
        for here, there in ((a, b), (b, a)):
            _ip("-n", self.netns(here), "link", "set", self._dev(there), "up")
        for here, there in ((a, b), (b, a)):
            _ip(
                "-n",
                self.netns(here),
                "route",
                "replace",
                f"{self.address(there)}/32",
                "dev",
                self._dev(there),
                "src",
                self.address(here),
            )

    def cut(self, a: int, b: int) -> None:
        """No packet passes between nodes a and b any more (either way)."""
        for here, there in ((a, b), (b, a)):
            _ip("-n", self.netns(here), "link", "set", self._dev(there), "down")

    def isolate(self, node_id: int) -> None:
        """Cut `node_id` off from every other node; the client still reaches it."""
        for other in self.members:
            if other not in (node_id, CLIENT):
                self.cut(node_id, other)

    def reconnect(self, node_id: int) -> None:
        """Undo `isolate(node_id)`: its links to every other node up again."""
        for other in self.members:
            if other not in (node_id, CLIENT):
                self._link_up(node_id, other)

    def heal(self) -> None:
        """Every link up again, then every stopped node started (KafkaCluster.heal)."""
        for a in self.members:
            for b in self.members:
                if a < b:
                    self._link_up(a, b)
        super().heal()

    @contextmanager
    def entered(self) -> Iterator[None]:
        """Run the calling thread (and the threads it starts) in the client namespace."""
        home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        client = os.open(f"/run/netns/{self.netns(CLIENT)}", os.O_RDONLY)
        try:
            _setns(client)
            try:
                yield
            finally:
                _setns(home)
        finally:
            os.close(client)
            os.close(home)

    def close(self) -> None:
        """Kill every node and remove the namespaces (and with them their veths)."""
        if getattr(self, "nodes", None):
            self.kill_all()
        for name in self._made:
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)
        self._made.clear()

    # -- KafkaCluster hooks -----------------------------------------------------------------

    def _host(self, node_id: int) -> str:
        return self.address(node_id)

    def _node(self, node_id: int, base: Path, settings: dict[str, str], port: int) -> ClusterNode:
        node = NetnsNode(base, settings, port=port)
        node.netns = self.netns(node_id)
        node.address = self.address(node_id)
        return node
