"""What serving the old message formats costs per record: up-conversion of a Produce
v0-2 message set (v0/v1) into one v2 batch, and down-conversion of stored v2 batches
for a Fetch v0-3, per codec.

Message sets are built by kafka-python's own old-format encoder (100 B values with a
10 B key, ~1000 records a request), batches by kbroker's encoder; the best of 20 rounds
is reported. The v2 paths do not run this code: a Produce v3+ never looks for an old
magic, a Fetch v4+ never converts.

    .venv/bin/python -m bench.conversion_cost [--records 1000] [--value-size 100]
"""

from __future__ import annotations

import argparse
import time

from kafka.record import MemoryRecordsBuilder

from kbroker.protocol.batch import Record, encode_batch
from kbroker.protocol.compression import CODEC_NAMES, GZIP, LZ4, NONE, SNAPPY
from kbroker.protocol.legacy_records import down_convert, up_convert

KAFKA_PYTHON_CODEC = {NONE: 0, GZIP: 1, SNAPPY: 2, LZ4: 3}


def _best(fn: object, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        fn()  # type: ignore[operator]
        best = min(best, time.perf_counter() - started)
    return best


def up_ns_per_record(magic: int, codec: int, records: int, value_size: int, rounds: int) -> float:
    builder = MemoryRecordsBuilder(magic, KAFKA_PYTHON_CODEC[codec], 1 << 30)
    now = int(time.time() * 1000)
    for i in range(records):
        builder.append(now, b"k%09d" % i, b"v" * value_size, [])
    builder.close()
    data = bytes(builder.buffer())
    return _best(lambda: up_convert(data), rounds) * 1e9 / records


def down_ns_per_record(magic: int, codec: int, records: int, value_size: int, rounds: int) -> float:
    now = int(time.time() * 1000)
    per_batch = 100  # a stored log holds batches of what producers sent
    data = b"".join(
        bytes(
            encode_batch(
                [Record(b"k%09d" % i, b"v" * value_size, now) for i in range(per_batch)],
                now,
                base_offset=start,
                compression=codec,
            )
        )
        for start in range(0, records, per_batch)
    )
    return _best(lambda: down_convert(data, magic, 0), rounds) * 1e9 / records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    print("| direction | format | codec | ns per record |")
    print("| --- | --- | --- | ---: |")
    for codec in (NONE, GZIP, SNAPPY, LZ4):
        for magic in (0, 1):
            if magic == 0 and codec == LZ4:
                continue  # kafka-python writes v0's lz4 framing only with xxhash
            ns = up_ns_per_record(magic, codec, args.records, args.value_size, args.rounds)
            print(f"| up (produce) | v{magic} | {CODEC_NAMES[codec]} | {ns:,.0f} |")
    for codec in (NONE, GZIP, SNAPPY, LZ4):
        for magic in (0, 1):
            ns = down_ns_per_record(magic, codec, args.records, args.value_size, args.rounds)
            print(f"| down (fetch) | v{magic} | {CODEC_NAMES[codec]} | {ns:,.0f} |")


if __name__ == "__main__":
    main()
