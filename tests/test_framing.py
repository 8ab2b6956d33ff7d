"""FrameDecoder: how the broker cuts a TCP byte stream into Kafka requests.

Whatever the chunking, the same frames come out; a size prefix the broker will not
accept fails as soon as its four bytes are in, before any of the body is held; and no
byte sequence makes the decoder raise anything but FrameError.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbroker.protocol.framing import FrameDecoder, FrameError, frame

MAX_FRAME = 4096

payloads = st.lists(st.binary(max_size=300), max_size=12)


def encode_stream(frames: list[bytes]) -> bytes:
    return b"".join(frame(len(f)) + f for f in frames)


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


@given(payloads, st.lists(st.integers(min_value=0), max_size=40))
def test_any_chunking_yields_the_same_frames(frames: list[bytes], cuts: list[int]) -> None:
    decoder = FrameDecoder(MAX_FRAME)
    out: list[bytes] = []
    for chunk in split_at(encode_stream(frames), cuts):
        out.extend(decoder.feed(chunk))
    assert out == frames
    assert decoder.buffered == 0


@given(payloads)
def test_byte_at_a_time_yields_the_same_frames(frames: list[bytes]) -> None:
    decoder = FrameDecoder(MAX_FRAME)
    data = encode_stream(frames)
    out: list[bytes] = []
    for i in range(len(data)):
        out.extend(decoder.feed(data[i : i + 1]))
    assert out == frames


@given(payloads, st.binary(min_size=1, max_size=200))
def test_incomplete_tail_is_held_not_returned(frames: list[bytes], tail: bytes) -> None:
    decoder = FrameDecoder(MAX_FRAME)
    cut = tail[: len(tail) - 1]  # a frame of len(tail) bytes, one byte short
    out = decoder.feed(encode_stream(frames) + frame(len(tail)) + cut)
    assert out == frames
    assert decoder.buffered == 4 + len(cut)
    assert decoder.feed(tail[-1:]) == [tail]


def test_empty_frame_is_a_frame() -> None:
    assert FrameDecoder(MAX_FRAME).feed(frame(0) * 3) == [b"", b"", b""]


def test_frame_of_exactly_the_maximum_is_accepted() -> None:
    body = b"x" * MAX_FRAME
    assert FrameDecoder(MAX_FRAME).feed(frame(MAX_FRAME) + body) == [body]


@given(st.integers(min_value=-(2**31), max_value=-1))
def test_negative_size_fails_on_its_four_bytes(size: int) -> None:
    with pytest.raises(FrameError, match="outside"):
        FrameDecoder(MAX_FRAME).feed(struct.pack(">i", size))


@given(st.integers(min_value=MAX_FRAME + 1, max_value=2**31 - 1))
def test_oversized_size_fails_on_its_four_bytes(size: int) -> None:
    with pytest.raises(FrameError, match="socket.request.max.bytes"):
        FrameDecoder(MAX_FRAME).feed(struct.pack(">i", size))


def test_oversized_size_after_valid_frames_fails_when_reached() -> None:
    decoder = FrameDecoder(MAX_FRAME)
    assert decoder.feed(frame(2) + b"ok") == [b"ok"]
    with pytest.raises(FrameError):
        decoder.feed(frame(MAX_FRAME + 1))


def test_size_prefix_split_across_reads_is_still_checked() -> None:
    decoder = FrameDecoder(MAX_FRAME)
    prefix = struct.pack(">i", -1)
    assert decoder.feed(prefix[:3]) == []
    with pytest.raises(FrameError):
        decoder.feed(prefix[3:])


@settings(max_examples=300)
@given(st.lists(st.binary(max_size=64), max_size=20))
def test_random_bytes_raise_nothing_but_frame_error(chunks: list[bytes]) -> None:
    decoder = FrameDecoder(MAX_FRAME)
    try:
        for chunk in chunks:
            for f in decoder.feed(chunk):
                assert len(f) <= MAX_FRAME
    except FrameError:
        pass
    assert decoder.buffered <= sum(map(len, chunks))


def test_thousands_of_tiny_frames_in_one_read() -> None:
    count = 20_000
    frames = FrameDecoder(MAX_FRAME).feed((frame(1) + b"z") * count)
    assert len(frames) == count
    assert set(frames) == {b"z"}


def test_a_frame_joined_from_several_reads_is_writable() -> None:
    decoder = FrameDecoder(1 << 20)
    data = frame(6) + b"abcdef"
    assert decoder.feed(data[:5]) == []
    (joined,) = decoder.feed(data[5:])
    assert not joined.readonly
    assert bytes(joined) == b"abcdef"


def test_a_frame_from_one_read_is_a_view_of_that_read() -> None:
    decoder = FrameDecoder(1 << 20)
    (whole,) = decoder.feed(frame(3) + b"xyz")
    assert whole.readonly
    assert bytes(whole) == b"xyz"
