"""What validating produced records costs: CPU time per MiB of batches, per codec.

Builds batches as librdkafka sends them (100 B values, no key, ~1 MiB of records per
batch) and times `record_validation.validate_records` over them, which is what a
client append adds to the produce path: inflating compressed batches (in C) and walking
every record (in C when the extension is built; `--python` times the reference walk).

    .venv/bin/python -m bench.validation_cost [--python] [--value-size 100]
"""

from __future__ import annotations

import argparse
import time

from kbroker.protocol import record_validation
from kbroker.protocol.batch import encode_batch, validate_batches
from kbroker.protocol.compression import CODEC_NAMES, compress
from kbroker.protocol.record_validation import RecordPolicy, validate_records

MIB = 1 << 20


def cost_ms_per_mib(codec: int, value_size: int, rounds: int = 20) -> tuple[float, float]:
    """(ms per MiB of uncompressed records, ratio of compressed to uncompressed size)."""
    now = int(time.time() * 1000)
    count = MIB // (value_size + 8)
    batch = encode_batch(
        [b"v" * value_size] * count, now, compression=codec, compress=lambda d: compress(codec, d)
    )
    plain_size = len(encode_batch([b"v" * value_size] * count, now))
    headers = validate_batches(batch, 1 << 30)
    policy = RecordPolicy()
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        validate_records(batch, headers, now, policy)
        best = min(best, time.perf_counter() - started)
    return best * 1000 * MIB / plain_size, len(batch) / plain_size


def append_us_per_batch(value_size: int, validate: bool, appends: int = 300) -> float:
    """Median microseconds of PartitionLog.append of one uncompressed ~1 MiB batch, with
    or without the record checks: what they add to the whole client append."""
    import statistics
    import tempfile
    from pathlib import Path

    from kbroker.storage import log as storage_log
    from kbroker.storage.log import LogConfig, PartitionLog

    now = int(time.time() * 1000)
    batch = bytes(encode_batch([b"v" * value_size] * (MIB // (value_size + 8)), now))
    original = storage_log.validate_records
    if not validate:
        storage_log.validate_records = lambda *args: None  # type: ignore[assignment]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            plog = PartitionLog.open(
                Path(tmp) / "t-0", LogConfig(segment_bytes=1 << 30, max_message_bytes=2 * MIB), now
            )
            times = []
            for _ in range(appends):
                started = time.perf_counter()
                plog.append(batch, 0, now)
                times.append(time.perf_counter() - started)
            plog.close()
    finally:
        storage_log.validate_records = original
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--python", action="store_true", help="time the Python reference walk")
    parser.add_argument("--value-size", type=int, default=100)
    args = parser.parse_args()
    if args.python:
        record_validation.walk = record_validation.walk_py
    print(f"walk: {'python' if record_validation.walk is record_validation.walk_py else 'C'}")
    print(f"{'codec':<8} {'ms/MiB':>8} {'ns/record':>10} {'size ratio':>10}")
    for codec, name in CODEC_NAMES.items():
        ms, ratio = cost_ms_per_mib(codec, args.value_size)
        per_record = ms * 1e6 / (MIB // (args.value_size + 8))
        print(f"{name:<8} {ms:>8.3f} {per_record:>10.1f} {ratio:>10.3f}")
    with_checks = append_us_per_batch(args.value_size, True)
    without = append_us_per_batch(args.value_size, False)
    print(
        f"append of one 1 MiB uncompressed batch: {with_checks:.0f} us with the record checks, "
        f"{without:.0f} us without (+{100 * (with_checks / without - 1):.1f}%)"
    )


if __name__ == "__main__":
    main()
