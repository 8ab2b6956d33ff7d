"""Property: whatever the sequence of appends, reads, reopens and crashes, reads return
exactly the batches that were appended (with their assigned offsets), and nothing else."""

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbroker.protocol.batch import encode_batch, read_header, validate_batches
from kbroker.storage import LogConfig, PartitionLog

pytestmark = pytest.mark.slow  # make test-fast leaves these out

NOW = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=6000, index_interval_bytes=256)

appends = st.tuples(
    st.just("append"),
    st.lists(st.integers(1, 4), min_size=1, max_size=3),  # records per batch
    st.integers(0, 150),  # value size
)
reads = st.tuples(st.just("read"), st.floats(0, 1), st.integers(1, 2000))
reopens = st.tuples(st.just("reopen"), st.sampled_from(["clean", "crash", "torn"]), st.just(0))
ops = st.lists(st.one_of(appends, appends, reads, reads, reopens), max_size=50)


def check_read(log: PartitionLog, model: list[tuple[int, bytes]], offset: int, max_bytes: int):
    s = log.read(offset, max_bytes)
    if offset == log.log_end_offset:
        assert s is None
        return
    data = s.read()
    headers = validate_batches(data, 1 << 30)
    first = next(
        i for i, (base, b) in enumerate(model) if base + read_header(b).last_offset_delta >= offset
    )
    expected = model[first : first + len(headers)]
    assert [bytes(data[h.position : h.position + h.total_size]) for h in headers] == [
        b for _, b in expected
    ]
    # Whole batches within max_bytes, or exactly one batch above it (KIP-74).
    assert len(data) <= max_bytes or len(headers) == 1


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_reads_return_exactly_the_appended_batches(operations):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t-0"
        log = PartitionLog.open(path, CONFIG, NOW)
        model: list[tuple[int, bytes]] = []  # (base offset, batch bytes as stored)
        for op, a, b in operations:
            if op == "append":
                blob = bytearray()
                for n in a:
                    blob += encode_batch([os.urandom(b) for _ in range(n)], NOW)
                result = log.append(blob, 3, NOW)
                for h in result.batches:
                    model.append(
                        (h.base_offset, bytes(blob[h.position : h.position + h.total_size]))
                    )
            elif op == "read":
                offset = int(a * log.log_end_offset)
                check_read(log, model, offset, b)
            else:
                if a == "clean":
                    log.close()
                else:
                    for seg in log.segments:
                        seg.close()
                    if a == "torn" and model:
                        # The last batch was only partly written when the process died.
                        active = log.active_segment.log_path
                        size = os.path.getsize(active)
                        if size:
                            os.truncate(active, size - 1)
                            model.pop()
                log = PartitionLog.open(path, CONFIG, NOW)
            expected_end = (
                model[-1][0] + read_header(model[-1][1]).last_offset_delta + 1 if model else None
            )
            if expected_end is not None:
                assert log.log_end_offset == expected_end
        # Everything, read back from the start in one pass.
        got = []
        offset = 0
        while (s := log.read(offset, 1 << 20)) is not None:
            data = s.read()
            for h in validate_batches(data, 1 << 30):
                got.append(bytes(data[h.position : h.position + h.total_size]))
                offset = h.last_offset + 1
        assert got == [b for _, b in model]
        log.close()
