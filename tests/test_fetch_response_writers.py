"""The C Fetch-answer writer (kbroker/protocol/_responsewrite.c) and its Python reference
write the same parts, byte for byte and region for region, for thousands of random
answers of every version: null and empty lists, bytes and file regions, tags or none,
fields at the ends of their ranges."""

from __future__ import annotations

import random
import uuid

from kbroker.protocol import fetch_response
from kbroker.protocol.fetch_response import (
    FetchedPartition,
    FetchedTopic,
    NodeEndpoint,
    encode_fetch,
    encode_fetch_py,
    node_endpoints_field,
)
from tests.test_fetch_response_encode import VERSIONS, Region


def _random_partition(rng: random.Random) -> FetchedPartition:
    def number(bits: int) -> int:
        return rng.choice([0, -1, 1, rng.randrange(-(2 ** (bits - 1)), 2 ** (bits - 1))])

    records: object = rng.choice(
        [
            None,
            b"",
            bytes(rng.randrange(50)),
            bytearray(rng.randrange(1, 9)),
            Region(b"r" * rng.randrange(0, 70)),
        ]
    )
    return FetchedPartition(
        number(32),
        number(16),
        number(64),
        number(64),
        number(64),
        rng.choice([None, [], [(number(64), number(64)) for _ in range(rng.randrange(1, 4))]]),
        number(32),
        records,  # type: ignore[arg-type]
        rng.choice([None, (number(32), number(32))]),
        rng.choice([None, (number(32), number(64))]),
    )


def test_the_c_writer_and_the_python_reference_write_the_same_parts() -> None:
    assert fetch_response.encode_fetch is not fetch_response.encode_fetch_py, (
        "kbroker.protocol._responsewrite is not built (make .venv/.installed)"
    )
    rng = random.Random(2026)
    for _ in range(3000):
        version = rng.choice(VERSIONS)
        topics = [
            FetchedTopic(
                rng.choice(["", "t", "ü" * rng.randrange(1, 30)]),
                rng.choice([None, uuid.UUID(int=rng.getrandbits(128))]),
                [_random_partition(rng) for _ in range(rng.randrange(4))],
            )
            for _ in range(rng.randrange(4))
        ]
        nodes = [
            NodeEndpoint(n, f"h{n}", 9092 + n, rng.choice([None, "r"]))
            for n in range(rng.randrange(1, 3))
        ]
        endpoints = rng.choice([None, node_endpoints_field(nodes)])
        args = (rng.randrange(-1, 120), rng.randrange(2**31), rng.randrange(2**31), endpoints)
        c = encode_fetch(version, topics, *args)
        python = encode_fetch_py(version, topics, *args)
        assert c.size == python.size, (version, topics)
        assert len(c.parts) == len(python.parts)
        for ours, theirs in zip(c.parts, python.parts, strict=True):
            assert ours == theirs if isinstance(theirs, bytes) else ours is theirs
