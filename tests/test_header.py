"""Request header parsing: valid headers round-trip, anything else is MalformedRequest.

Header v1 is api key, version, correlation id and a nullable int16-length client id;
header v2 (flexible requests) adds a tagged-field section, whose contents the broker
skips. Random bytes must never produce any other exception. Each test runs the C parse
the broker uses and the Python one it follows, and both agree on any bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbroker.protocol import _requestread
from kbroker.protocol import header as header_module
from kbroker.protocol.header import (
    MalformedRequest,
    RequestHeader,
    parse_request_header_py,
    peek_api,
    response_header,
    skip_tagged_fields,
)
from kbroker.protocol.varint import read_uvarint

Parse = Callable[[bytes | memoryview, bool], tuple[RequestHeader, int]]
PARSERS = [
    pytest.param(_requestread.parse_header, id="c"),
    pytest.param(parse_request_header_py, id="python"),
]


def uvarint(value: int) -> bytes:
    """An encoder written apart from kbroker's, so that the tests check its decoder."""
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def header_bytes(api_key: int, version: int, correlation: int, client_id: bytes | None) -> bytes:
    head = struct.pack(">hhi", api_key, version, correlation)
    if client_id is None:
        return head + struct.pack(">h", -1)
    return head + struct.pack(">h", len(client_id)) + client_id


def tagged_section(fields: list[tuple[int, bytes]]) -> bytes:
    out = uvarint(len(fields))
    for tag, data in fields:
        out += uvarint(tag) + uvarint(len(data)) + data
    return out


i16 = st.integers(-(2**15), 2**15 - 1)
i32 = st.integers(-(2**31), 2**31 - 1)
client_ids = st.none() | st.text(max_size=40)
tagged = st.lists(st.tuples(st.integers(0, 2**31), st.binary(max_size=30)), max_size=4)


@given(i16, i16, i32, client_ids, st.binary(max_size=50))
@pytest.mark.parametrize("parse", PARSERS)
def test_v1_header_round_trips(
    parse: Parse, api_key: int, version: int, correlation: int, client_id: str | None, body: bytes
) -> None:
    raw = header_bytes(
        api_key, version, correlation, None if client_id is None else client_id.encode()
    )
    header, offset = parse(raw + body, False)
    assert header == RequestHeader(api_key, version, correlation, client_id)
    assert offset == len(raw)


@given(i16, i16, i32, client_ids, tagged, st.binary(max_size=50))
@pytest.mark.parametrize("parse", PARSERS)
def test_v2_header_skips_its_tagged_fields(
    parse: Parse,
    api_key: int,
    version: int,
    correlation: int,
    client_id: str | None,
    fields: list[tuple[int, bytes]],
    body: bytes,
) -> None:
    raw = header_bytes(
        api_key, version, correlation, None if client_id is None else client_id.encode()
    )
    raw += tagged_section(fields)
    header, offset = parse(raw + body, True)
    assert header.correlation_id == correlation
    assert header.client_id == client_id
    assert offset == len(raw)


@settings(max_examples=500)
@given(st.binary(max_size=80), st.booleans())
@pytest.mark.parametrize("parse", PARSERS)
def test_random_bytes_give_a_header_or_malformed_request(
    parse: Parse, data: bytes, flexible: bool
) -> None:
    try:
        header, offset = parse(data, flexible)
    except MalformedRequest:
        return
    assert isinstance(header, RequestHeader)
    assert 10 <= offset <= len(data)


@settings(max_examples=300)
@given(st.binary(max_size=40))
def test_random_tagged_sections_skip_within_bounds_or_raise(data: bytes) -> None:
    try:
        end = skip_tagged_fields(data, 0)
    except MalformedRequest:
        return
    assert 1 <= end <= len(data)


@pytest.mark.parametrize("length", [1, 9])
@pytest.mark.parametrize("parse", PARSERS)
def test_too_short_for_a_header(parse: Parse, length: int) -> None:
    with pytest.raises(MalformedRequest, match="shorter than a header"):
        parse(b"\0" * length, False)


def test_peek_needs_eight_bytes() -> None:
    with pytest.raises(MalformedRequest):
        peek_api(b"\0" * 7)
    assert peek_api(struct.pack(">hhi", 18, 3, 77)) == (18, 3, 77)


@pytest.mark.parametrize("parse", PARSERS)
def test_client_id_longer_than_the_request(parse: Parse) -> None:
    raw = struct.pack(">hhih", 3, 1, 1, 100) + b"short"
    with pytest.raises(MalformedRequest, match="client id runs past"):
        parse(raw, False)


@pytest.mark.parametrize("length", [-2, -32768])
@pytest.mark.parametrize("parse", PARSERS)
def test_negative_client_id_length_other_than_null(parse: Parse, length: int) -> None:
    with pytest.raises(MalformedRequest, match="client id length"):
        parse(struct.pack(">hhih", 3, 1, 1, length), False)


@pytest.mark.parametrize("parse", PARSERS)
def test_client_id_with_invalid_utf8_is_kept_readable(parse: Parse) -> None:
    header, _ = parse(header_bytes(3, 1, 1, b"\xff\xfeok"), False)
    assert header.client_id is not None and header.client_id.endswith("ok")


@pytest.mark.parametrize("parse", PARSERS)
def test_flexible_header_without_its_tagged_section(parse: Parse) -> None:
    with pytest.raises(MalformedRequest, match="truncated varint"):
        parse(header_bytes(18, 3, 1, b"c"), True)


@pytest.mark.parametrize("parse", PARSERS)
def test_tagged_field_longer_than_the_request(parse: Parse) -> None:
    raw = header_bytes(18, 3, 1, b"c") + uvarint(1) + uvarint(0) + uvarint(1000) + b"abc"
    with pytest.raises(MalformedRequest, match="past the end"):
        parse(raw, True)


@pytest.mark.parametrize("parse", PARSERS)
def test_tagged_field_count_larger_than_the_request(parse: Parse) -> None:
    raw = header_bytes(18, 3, 1, b"c") + uvarint(2**32)
    with pytest.raises(MalformedRequest):
        parse(raw, True)


def test_varint_of_six_bytes_is_refused() -> None:
    with pytest.raises(MalformedRequest, match="longer than 5 bytes"):
        read_uvarint(b"\xff" * 6, 0)


@given(st.integers(0, 2**35 - 1))
def test_varints_of_up_to_five_bytes_decode(value: int) -> None:
    encoded = uvarint(value)
    assert read_uvarint(encoded + b"tail", 0) == (value, len(encoded))


def test_response_headers() -> None:
    assert response_header(7, flexible=False) == struct.pack(">i", 7)
    assert response_header(7, flexible=True) == struct.pack(">i", 7) + b"\0"


def test_the_broker_parses_headers_in_c() -> None:
    assert header_module.parse_request_header is _requestread.parse_header


@settings(max_examples=2000)
@given(st.binary(max_size=60), st.booleans())
def test_c_and_python_agree_on_any_bytes(data: bytes, flexible: bool) -> None:
    outcomes = []
    for parse in (_requestread.parse_header, parse_request_header_py):
        try:
            outcomes.append(parse(data, flexible))
        except MalformedRequest as exc:
            outcomes.append(str(exc))
    assert outcomes[0] == outcomes[1]
