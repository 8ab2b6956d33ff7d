"""The C extensions that read hostile bytes survive coverage-guided fuzzing.

The record walk (kbroker/protocol/_recordwalk.c) reads every produced batch before it
is stored, the request reader (kbroker/protocol/_requestread.c) every request's header
and every Produce body as they come off the socket, and the admin codec
(kbroker/protocol/_recordcodec.c) whatever a broker returns to `kbroker consume`. Each has a libFuzzer target in fuzz/ that runs the shipped
source under AddressSanitizer and UndefinedBehaviorSanitizer from a corpus of valid
sections; a crash, an out-of-bounds read, an allocation sized by a hostile count or a
broken promise to the caller fails the run. A planted bounds bug shows the target finds
what it is for. The TLS reader and writer (_tlsread.c) are not fuzzed here: the reader
passes ciphertext to OpenSSL, whose input it is to parse, and the writer encrypts the
broker's own answers and segment files (tests/test_security_tls.py checks its records).
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from kio.index import load_request_schema
from test_produce_request import _encoded as encoded_produce

from kbroker.protocol.batch import CRC_OFFSET, encode_batch
from kbroker.protocol.client_frames import encode_request, request_frame
from kbroker.protocol.fetch_request import fetch_partition, sessionless_fetch
from kbroker.protocol.messages import build
from kbroker.protocol.record_codec import encode_pairs_py, headers_blob

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


def _sections() -> list[tuple[int, bytes]]:
    """Valid records sections of several shapes: (record count, section)."""
    headers = headers_blob([("trace", "abc"), ("empty", None)])
    schema = b"\x00\x00\x00\x00\x07payload"
    shapes = [
        [(b"k", b"v")],
        [(None, b"value"), (b"key", None), (b"", b"")],
        [(b"k%d" % i, schema) for i in range(5)],
        [(schema, b"x" * 300)],
    ]
    out = [(len(pairs), encode_pairs_py(pairs, b"\x00")) for pairs in shapes]
    out.append((2, encode_pairs_py([(b"a", b"b"), (None, b"c")], headers)))
    return out


def _produce_frames() -> list[bytes]:
    """Produce requests (header and body) of several versions, as clients send them: the
    bodies test_produce_request.py decodes, holding a records section of _sections()."""
    out = []
    for version in (3, 8, 9, 12, 13):
        body = encoded_produce(version, _sections()[1][1])
        frame = request_frame(0, version, version, "fuzz", body)[4:]
        out.append(bytes([version | (0x80 if version >= 9 else 0), 8]) + frame)
    return out


def _write_seeds(root: Path, target: str) -> None:
    seeds = root / "build" / "fuzz" / f"{target}-seeds"
    seeds.mkdir(parents=True, exist_ok=True)
    if target == "requestread":
        for i, data in enumerate(_produce_frames()):
            (seeds / f"seed-{i}").write_bytes(data)
        for version in (4, 7, 11, 12, 13, 15, 17, 18):
            fields = sessionless_fetch(
                [
                    {
                        "topic": "orders",
                        "topic_id": uuid.UUID(int=7),
                        "partitions": [fetch_partition(0, 5, 1 << 20)],
                    }
                ],
                max_wait=500,
                min_bytes=1,
                max_bytes=1 << 20,
            )
            frame = encode_request(build(load_request_schema(1, version), fields), 1, "fuzz")[4:]
            # Byte 0 as the target reads it: Fetch version 4 + (byte & 0x7f) % 15, and a
            # flexible header from v12.
            first = version - 4 | (0x80 if version >= 12 else 0)
            (seeds / f"fetch-{version}").write_bytes(bytes([first, 8]) + frame)
        for i, (_count, section) in enumerate(_sections()):
            # The records of a batch whose CRC field is 0: the target's stand-in checksum.
            batch = bytearray(encode_batch([(b"k", section)], 1))
            batch[CRC_OFFSET : CRC_OFFSET + 4] = bytes(4)
            (seeds / f"batch-{i}").write_bytes(bytes([0, 0xFF]) + batch * 2)
        return
    for i, (count, section) in enumerate(_sections()):
        if target == "recordwalk":
            data = bytes([count, 1, i & 1]) + section
        else:
            data = struct.pack("<I", count) + b"\x00" + section
        (seeds / f"seed-{i}").write_bytes(data)


def _fuzz(root: Path, target: str, *args: str) -> subprocess.CompletedProcess[str]:
    _write_seeds(root, target)
    return subprocess.run(
        ["bash", str(root / "fuzz" / "run.sh"), target, *args],
        env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module", autouse=True)
def clang() -> None:
    if shutil.which("clang") is None:
        pytest.fail(
            "clang is missing: scripts/install-test-tools.sh installs clang and its runtimes"
        )


@pytest.mark.parametrize("target", ["recordwalk", "recordcodec", "requestread"])
def test_target_survives_fuzzing(target: str) -> None:
    run = _fuzz(ROOT, target, "-runs=150000", "-seed=1")
    assert run.returncode == 0, run.stderr[-4000:]
    assert "Done 150000 runs" in run.stderr


@pytest.mark.parametrize(
    ("target", "source", "bound", "removed"),
    [
        # The record walk with its record-length bound removed reads past the section.
        ("recordwalk", "_recordwalk.c", "if (length > end - pos) {", "if (0) {"),
        # The request reader taking any length a client claims reads past the frame.
        ("requestread", "_requestread.c", "if (n < 0 || n > r->end - pos)", "if (n < 0)"),
    ],
)
def test_planted_bounds_bug_is_found(
    tmp_path: Path, target: str, source: str, bound: str, removed: str
) -> None:
    """A target run on its module with a bound removed must report the read past the
    input, or the fuzzing above proves nothing."""
    (tmp_path / "fuzz").mkdir()
    shutil.copy(ROOT / "fuzz" / "run.sh", tmp_path / "fuzz" / "run.sh")
    shutil.copy(ROOT / "fuzz" / f"{target}.c", tmp_path / "fuzz" / f"{target}.c")
    text = (ROOT / "kbroker" / "protocol" / source).read_text()
    assert bound in text
    broken = tmp_path / "kbroker" / "protocol" / source
    broken.parent.mkdir(parents=True)
    broken.write_text(text.replace(bound, removed))
    run = _fuzz(tmp_path, target, "-runs=2000000", "-seed=1")
    assert run.returncode != 0
    assert "ERROR: AddressSanitizer" in run.stderr, run.stderr[-4000:]
