"""The machine's own limits, recorded beside every set of figures.

Brokers and clients share this machine, so a figure means little without the
ceilings it ran under: cores, loopback bandwidth and round trip, and what a write
plus fsync costs on the disk the brokers write to.

Run alone: `python -m bench.machine [--workdir DIR]` prints the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

MIB = 1024 * 1024

_SENDER = """
import socket, sys, time
port, seconds, mode = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
s = socket.create_connection(("127.0.0.1", port))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
if mode == "blast":
    buf = b"x" * (1 << 20)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        s.sendall(buf)
else:
    while True:
        data = s.recv(65536)
        if not data:
            break
        s.sendall(data)
s.close()
"""


def _peer_process(mode: str, seconds: float) -> tuple[socket.socket, subprocess.Popen]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    child = subprocess.Popen([sys.executable, "-c", _SENDER, str(port), str(seconds), mode])
    conn, _ = server.accept()
    server.close()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return conn, child


def loopback_python(seconds: float = 2.0) -> dict:
    """One TCP stream, Python sender process to Python receiver: bulk MiB/s."""
    conn, child = _peer_process("blast", seconds)
    buf = bytearray(4 * MIB)
    view = memoryview(buf)
    total = 0
    start = None
    with conn:
        while True:
            n = conn.recv_into(view)
            if not n:
                break
            if start is None:
                start = time.perf_counter()
            total += n
    elapsed = time.perf_counter() - (start or time.perf_counter())
    child.wait()
    return {"mib_per_s": round(total / MIB / max(elapsed, 1e-9), 1), "seconds": round(elapsed, 2)}


def loopback_round_trip(count: int = 5000) -> dict:
    """64-byte ping-pong between two Python processes: the floor under any ack latency."""
    conn, child = _peer_process("echo", 0)
    msg = b"p" * 64
    samples = []
    with conn:
        for _ in range(count):
            t0 = time.perf_counter()
            conn.sendall(msg)
            got = 0
            while got < len(msg):
                got += len(conn.recv(65536))
            samples.append(time.perf_counter() - t0)
    child.wait()
    samples.sort()
    return {
        "p50_us": round(samples[len(samples) // 2] * 1e6, 1),
        "p99_us": round(samples[int(len(samples) * 0.99)] * 1e6, 1),
        "round_trips_per_s": round(count / sum(samples), 1),
    }


def loopback_iperf3(seconds: int = 3) -> dict | None:
    """iperf3 over loopback when Debian's iperf3 is installed; None otherwise."""
    binary = shutil.which("iperf3")
    if binary is None:
        return None
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [binary, "-s", "-1", "-B", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(50):
            time.sleep(0.05)
            done = subprocess.run(
                [binary, "-c", "127.0.0.1", "-p", str(port), "-t", str(seconds), "-J"],
                capture_output=True,
                text=True,
            )
            if done.returncode == 0:
                result = json.loads(done.stdout)
                bps = result["end"]["sum_received"]["bits_per_second"]
                return {"mib_per_s": round(bps / 8 / MIB, 1), "seconds": seconds}
        return None
    finally:
        server.kill()
        server.wait()


def fsync_latency(directory: Path, sync=os.fsync, seconds: float = 2.0, block: int = 4096) -> dict:
    """Append `block` bytes then sync, repeatedly: what one durable small write costs."""
    path = directory / "fsync-probe.bin"
    data = os.urandom(block)
    samples = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end and len(samples) < 20_000:
            t0 = time.perf_counter()
            os.write(fd, data)
            sync(fd)
            samples.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    samples.sort()
    return {
        "syncs_per_s": round(len(samples) / sum(samples), 1),
        "p50_ms": round(samples[len(samples) // 2] * 1000, 3),
        "p99_ms": round(samples[int(len(samples) * 0.99)] * 1000, 3),
    }


def write_throughput(directory: Path, mib: int = 256) -> dict:
    """Sequential 1 MiB writes then one fsync: bulk durable write bandwidth."""
    path = directory / "write-probe.bin"
    chunk = os.urandom(MIB)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        start = time.perf_counter()
        for _ in range(mib):
            os.write(fd, chunk)
        buffered = time.perf_counter() - start
        os.fsync(fd)
        total = time.perf_counter() - start
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return {
        "mib": mib,
        "page_cache_mib_per_s": round(mib / buffered, 1),
        "with_fsync_mib_per_s": round(mib / total, 1),
    }


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _mem_total_mib() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    return 0


def _filesystem(directory: Path) -> str:
    """Device and type of the mount holding `directory` (longest matching mount point)."""
    best = ("", "?", "?")
    target = str(directory.resolve())
    for line in Path("/proc/mounts").read_text().splitlines():
        dev, mnt, fstype = line.split()[:3]
        if (target == mnt or target.startswith(mnt.rstrip("/") + "/")) and len(mnt) > len(best[0]):
            best = (mnt, dev, fstype)
    return f"{best[1]} ({best[2]}) mounted at {best[0]}"


def _command_version(cmd: list[str]) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (out.stdout or out.stderr).strip().splitlines()[0] if out.returncode == 0 else None


def interpreter_build() -> str:
    """How this CPython was built, as far as it shows: its executable, whether the
    interpreter runs out of a shared libpython, and the optimizing configure flags it
    names. A node's CPU per request differs by a fifth between builds (docs/benchmarks.md,
    "The interpreter's build")."""
    maps = Path("/proc/self/maps")
    shared = sorted(
        {line.rsplit("/", 1)[-1] for line in maps.read_text().splitlines() if "libpython" in line}
        if maps.exists()
        else set()
    )
    where = f"interpreter in {', '.join(shared)}" if shared else "interpreter in the executable"
    configured = str(sysconfig.get_config_var("CONFIG_ARGS") or "")
    flags = [f for f in ("--enable-optimizations", "--with-lto") if f in configured]
    return "; ".join([os.path.realpath(sys.executable), where, *flags])


def software() -> dict:
    """Versions of everything on the measured path."""
    info: dict = {
        "python": platform.python_version(),
        "python_build": interpreter_build(),
        "kernel": platform.release(),
    }
    try:
        import confluent_kafka

        info["confluent_kafka"] = confluent_kafka.__version__
        info["client_librdkafka"] = confluent_kafka.libversion()[0]
    except ImportError:
        pass
    try:
        import redis

        info["redis_py"] = redis.__version__
        info["hiredis"] = bool(getattr(redis.utils, "HIREDIS_AVAILABLE", False))
    except ImportError:
        pass
    info["mock_librdkafka_deb"] = _command_version(
        ["dpkg-query", "-W", "-f", "${Version}", "librdkafka1"]
    )
    info["redis_server"] = _command_version(["redis-server", "--version"])
    return info


def describe(workdir: Path, quick: bool = False) -> dict:
    """All machine figures; `quick` shortens each probe for --scale runs below 1."""
    secs = 1.0 if quick else 2.0
    return {
        "cpu_model": _cpu_model(),
        "nproc": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)),
        "mem_total_mib": _mem_total_mib(),
        "loadavg_at_start": Path("/proc/loadavg").read_text().split()[:3],
        "filesystem": _filesystem(workdir),
        "loopback_python": loopback_python(secs),
        "loopback_iperf3": loopback_iperf3(2 if quick else 3),
        "loopback_round_trip": loopback_round_trip(2000 if quick else 5000),
        "fsync_4k": fsync_latency(workdir, os.fsync, secs),
        "fdatasync_4k": fsync_latency(workdir, os.fdatasync, secs),
        "sequential_write": write_throughput(workdir, 64 if quick else 256),
        "software": software(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kbroker-bench-", dir=args.workdir) as tmp:
        print(json.dumps(describe(Path(tmp), args.quick), indent=2))


if __name__ == "__main__":
    main()
