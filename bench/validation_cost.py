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


if __name__ == "__main__":
    main()
