"""kill -9 of a process in the middle of log cleaning loses nothing.

A child process cleans a compacted log and is killed at a chosen step of the swap (every
rename of the commit, the unlinks after it, the fsync of the cleaned copy) or at random
moments while it appends and cleans; the parent reopens the log and checks that every
record still present is the one written at its offset and that the latest value of
every key survived.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from test_storage_cleaner import read_all

from kbroker.protocol.batch import Record, encode_batch
from kbroker.storage.cleaner import LogCleaner
from kbroker.storage.config import LogConfig
from kbroker.storage.log import PartitionLog

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]  # slow: make test-fast leaves it out

T0 = 1_700_000_000_000
KEYS = 30
ONCE = 25  # offsets 0..24 hold keys written once: their only value sits in the first segment
CONFIG = LogConfig(cleanup_policy="compact", segment_bytes=8 * 1024)

CHILD_PRELUDE = (
    textwrap.dedent(
        """
    import os, signal, sys
    from pathlib import Path
    from kbroker.protocol.batch import Record, encode_batch
    from kbroker.storage import cleaner as cleaner_module, compaction, segment_swap
    from kbroker.storage.cleaner import LogCleaner
    from kbroker.storage.config import LogConfig
    from kbroker.storage.log import PartitionLog

    T0 = @T0@
    KEYS = @KEYS@
    ONCE = @ONCE@
    CONFIG = LogConfig(cleanup_policy="compact", segment_bytes=8 * 1024)
    directory = Path(sys.argv[1])

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    def kill_on_call(module, name, at):
        original = getattr(module, name)
        calls = [0]
        def wrapper(*args, **kwargs):
            calls[0] += 1
            if calls[0] == at:
                die()
            return original(*args, **kwargs)
        setattr(module, name, wrapper)

    def key_of(offset):
        return b"once-%d" % offset if offset < ONCE else b"key-%d" % (offset % KEYS)

    def update(plog, first, count):
        records = [Record(key_of(i), b"v%d" % i, T0 + i) for i in range(first, first + count)]
        plog.append(encode_batch(records, T0 + first), 0, T0)
        plog.high_watermark = plog.log_end_offset
    """
    )
    .replace("@T0@", str(T0))
    .replace("@KEYS@", str(KEYS))
    .replace("@ONCE@", str(ONCE))
)

STEP_CHILD = CHILD_PRELUDE + textwrap.dedent(
    """
    kind, at = sys.argv[2], int(sys.argv[3])
    if kind == "rename":
        kill_on_call(segment_swap, "_rename", at)
    elif kind == "unlink":
        kill_on_call(cleaner_module, "remove_file", at)
    elif kind == "finish":
        kill_on_call(compaction._CleanedWriter, "finish", at)
    plog = PartitionLog.open(directory, CONFIG, T0)
    LogCleaner(lambda: []).clean_now(plog, T0 + 100_000, force=True)
    print("completed")
    """
)

LOOP_CHILD = CHILD_PRELUDE + textwrap.dedent(
    """
    plog = PartitionLog.open(directory, CONFIG, T0)
    cleaner = LogCleaner(lambda: [])
    print("ready", flush=True)
    while True:
        for _ in range(20):
            update(plog, plog.log_end_offset, 25)
        plog.roll(T0)
        cleaner.clean_now(plog, T0 + 10_000_000, force=True)
    """
)


def run_child(script: str, *args: str, wait: bool = True) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    if wait:
        proc.wait(timeout=60)
    return proc


def write_updates(directory: Path, updates: int) -> None:
    plog = PartitionLog.open(directory, CONFIG, T0)
    for first in range(0, updates, 25):
        records = [Record(key_of(i), b"v%d" % i, T0 + i) for i in range(first, first + 25)]
        plog.append(encode_batch(records, T0 + first), 0, T0)
    plog.high_watermark = plog.log_end_offset  # committed: the reopened log starts there
    plog.roll(T0)
    plog.close()


def key_of(offset: int) -> bytes:
    return b"once-%d" % offset if offset < ONCE else b"key-%d" % (offset % KEYS)


def check_nothing_lost(directory: Path) -> PartitionLog:
    """Every record is the one written at its offset, offsets ascend, and each key's
    latest update below the log end offset is present."""
    plog = PartitionLog.open(directory, CONFIG, T0)
    plog.high_watermark = plog.log_end_offset
    records = read_all(plog)
    offsets = [r.offset for r in records]
    assert offsets == sorted(set(offsets))
    for r in records:
        assert r.key == key_of(r.offset)
        assert r.value == b"v%d" % r.offset
    end = plog.log_end_offset
    present = set(offsets)
    for o in range(min(ONCE, end)):
        assert o in present, f"the only update {o} of once-{o} lost"
    for k in range(KEYS):
        last = max((o for o in range(k, end, KEYS) if o >= ONCE), default=None)
        if last is not None:
            assert last in present, f"latest update {last} of key-{k} lost"
    leftovers = [n for n in os.listdir(directory) if n.endswith((".cleaned", ".swap", ".deleted"))]
    assert leftovers == []
    return plog


def clean_and_check_latest(plog: PartitionLog) -> None:
    plog.roll(T0)
    LogCleaner(lambda: []).clean_now(plog, T0 + 100_000, force=True)
    records = read_all(plog)
    assert len({r.key for r in records}) == len(records) == KEYS + ONCE
    plog.close()


@pytest.mark.parametrize(
    ("kind", "at"),
    [("rename", n) for n in range(1, 13)] + [("unlink", 1), ("unlink", 4), ("finish", 1)],
)
def test_kill_during_swap_loses_nothing(tmp_path, kind, at):
    directory = tmp_path / "topic-0"
    write_updates(directory, 3_000)
    before = os.listdir(directory)
    assert len([n for n in before if n.endswith(".log")]) >= 4  # several segments to merge
    proc = run_child(STEP_CHILD, str(directory), kind, str(at))
    stdout = proc.stdout.read() if proc.stdout else b""
    stderr = proc.stderr.read() if proc.stderr else b""
    # Every chosen step exists in this pass: the child dies there, mid-swap.
    assert proc.returncode == -signal.SIGKILL, (stdout + stderr).decode()
    if kind == "rename":
        names = os.listdir(directory)
        assert any(n.endswith((".swap", ".cleaned")) for n in names) or at > 3
    plog = check_nothing_lost(directory)
    clean_and_check_latest(plog)


def test_kill_at_random_moments_while_appending_and_cleaning(tmp_path):
    directory = tmp_path / "topic-0"
    directory.mkdir()
    rng = random.Random(20240601)
    kills = 0
    for _ in range(5):
        proc = run_child(LOOP_CHILD, str(directory), wait=False)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == b"ready", proc.stderr.read().decode() if proc.stderr else ""
        time.sleep(rng.uniform(0.2, 1.5))  # the input: a random moment to kill the cleaner at
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()
        check_nothing_lost(directory).close()
    assert kills == 5
    plog = PartitionLog.open(directory, CONFIG, T0)
    plog.high_watermark = plog.log_end_offset
    assert plog.log_end_offset > 0
    clean_and_check_latest(plog)
