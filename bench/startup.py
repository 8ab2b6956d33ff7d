"""Seconds from spawning `kbroker serve` on an empty data directory to its first answered
ApiVersions request, the readiness the compat suite waits for before every test broker.

    PYTHONPATH=. .venv/bin/python bench/startup.py --runs 7

Prints each run, the median, and as a reference the bare interpreter's start
(`python -c pass`) and the time `import kbroker.broker` takes in a fresh process.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.procs import free_port

API_VERSIONS = 18
POLL_S = 0.01

# ApiVersions v0 (header v1: api key, version, correlation id, client id), size-prefixed.
_BODY = struct.pack(">hhih", API_VERSIONS, 0, 7, 5) + b"probe"
PROBE = struct.pack(">i", len(_BODY)) + _BODY


def _answers(port: int) -> bool:
    """Whether the broker on `port` answers ApiVersions v0 with error code 0."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2.0) as sock:
            sock.sendall(PROBE)
            head = sock.recv(10, socket.MSG_WAITALL)
    except OSError:
        return False
    if len(head) < 10:
        return False
    _size, correlation_id, error_code = struct.unpack(">iih", head)
    return correlation_id == 7 and error_code == 0


def serve_command(kbroker: list[str], port: int, data_dir: Path) -> list[str]:
    return [
        *kbroker,
        "serve",
        "--override",
        f"listeners=PLAINTEXT://127.0.0.1:{port}",
        "--override",
        f"log.dirs={data_dir}",
        "--override",
        "http.listeners=",
    ]


def time_to_ready(kbroker: list[str], timeout: float = 60.0) -> float:
    """Spawn one broker on a fresh directory; seconds until ApiVersions answers."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="kbroker-startup-") as tmp:
        began = time.monotonic()
        proc = subprocess.Popen(
            serve_command(kbroker, port, Path(tmp) / "data"),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=tmp,
        )
        try:
            while not _answers(port):
                if proc.poll() is not None:
                    raise RuntimeError(f"kbroker exited with code {proc.returncode}")
                if time.monotonic() - began > timeout:
                    raise RuntimeError("kbroker did not answer within the timeout")
                time.sleep(POLL_S)
            return time.monotonic() - began
        finally:
            proc.kill()
            proc.wait(timeout=10)


def time_python(code: str) -> float:
    began = time.monotonic()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.monotonic() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--command",
        default=f"{sys.executable} -m kbroker",
        help="how to run kbroker (default: this interpreter's -m kbroker)",
    )
    args = parser.parse_args()
    kbroker = args.command.split()
    os.environ.setdefault("PYTHONPATH", str(Path(__file__).resolve().parent.parent))

    bare = statistics.median(time_python("pass") for _ in range(args.runs))
    imports = statistics.median(time_python("import kbroker.broker") for _ in range(args.runs))
    ready = []
    for run in range(args.runs):
        ready.append(time_to_ready(kbroker))
        print(f"run {run + 1}: spawn -> first ApiVersions answered {ready[-1]:.3f} s")
    print(f"python -c pass:                  {bare:.3f} s (median of {args.runs})")
    print(f"python -c 'import kbroker.broker': {imports:.3f} s (median of {args.runs})")
    print(
        f"spawn -> ready:                  {statistics.median(ready):.3f} s (median of {args.runs}, "
        f"min {min(ready):.3f}, max {max(ready):.3f})"
    )


if __name__ == "__main__":
    main()
