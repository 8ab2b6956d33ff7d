"""The C Fetch walk and decode_fetch_request_py, the Python it follows, agree: on every
cut of a request with every field and tag (test_fetch_request_decode.encoded) and on
thousands of it with bytes changed, both give the same request or the same refusal."""

from __future__ import annotations

import random
from typing import Any

import pytest
from test_fetch_request_decode import VERSIONS, encoded, varied

from kbroker.protocol import _requestread
from kbroker.protocol.fetch_request_decode import decode_fetch_request_py
from kbroker.protocol.header import MalformedRequest


def _outcome(decode: Any, version: int, data: bytes) -> Any:
    """The request, or the refusal's message; a field cut short is worded by each walk
    its own way (Python's exception text, or where the C walk stopped)."""
    try:
        return decode(version, data, 0, 60)
    except MalformedRequest as exc:
        message = str(exc)
        if message.startswith("fetch request ends inside a field (") and "codec" not in message:
            return "ends inside a field"
        return message


@pytest.mark.parametrize("version", VERSIONS)
def test_c_and_python_agree_on_cut_and_flipped_requests(version: int) -> None:
    rng = random.Random(version)
    whole = encoded(version, varied())
    cases = [whole[:cut] for cut in range(len(whole) + 1)]
    for _ in range(1500):
        data = bytearray(whole)
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(len(data))] = rng.choice(
                (0, 1, 2, 0x7F, 0x80, 0xFF, rng.randrange(256))
            )
        cases.append(bytes(data))
    for data in cases:
        c = _outcome(_requestread.decode_fetch, version, data)
        assert c == _outcome(decode_fetch_request_py, version, data), data.hex()
