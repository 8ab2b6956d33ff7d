"""FrameDecoder: how the broker cuts a TCP byte stream into Kafka requests.

Whatever the chunking, the same frames come out, whether the bytes are fed or read
into the buffers the decoder gives; a size prefix the broker will not accept fails as
soon as its four bytes are in, before any of the body is held; a frame too big for
the scratch buffer is read into one of its own; and no byte sequence makes the decoder
raise anything but FrameError.
"""

from __future__ import annotations

import os
import struct
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbroker.protocol import framing
from kbroker.protocol.framing import (
    MAPPED_FROM,
    SCRATCH_BYTES,
    FrameDecoder,
    FrameError,
    frame,
    scratch_buffer,
)

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
    assert {bytes(f) for f in frames} == {b"z"}


def test_a_frame_joined_from_several_reads_is_writable() -> None:
    decoder = FrameDecoder(1 << 20)
    data = frame(6) + b"abcdef"
    assert decoder.feed(data[:5]) == []
    (joined,) = decoder.feed(data[5:])
    assert not joined.readonly
    assert bytes(joined) == b"abcdef"


def test_every_frame_is_writable_and_its_own() -> None:
    """Storage patches offsets into a produce request's batches, and a request may wait
    for its answer while later reads land: no frame shares memory with the buffer the
    next read lands in, or with another frame."""
    decoder = FrameDecoder(1 << 20)
    first, second = decoder.feed(frame(3) + b"xyz" + frame(3) + b"abc")
    assert not first.readonly and not second.readonly
    first[0:1] = b"X"
    decoder.feed(frame(3) + b"123")  # lands where the first two did
    assert (bytes(first), bytes(second)) == (b"Xyz", b"abc")


def read_through_buffers(decoder: FrameDecoder, data: bytes, most: list[int]) -> list[bytes]:
    """Read `data` as a socket would: into each buffer the decoder gives, at most the
    next of `most` bytes at a time (cycled)."""
    out: list[bytes] = []
    pos = 0
    turn = 0
    while pos < len(data):
        target = decoder.get_buffer()
        assert len(target) > 0
        n = min(len(target), len(data) - pos, most[turn % len(most)] if most else len(data))
        target[:n] = data[pos : pos + n]
        pos += n
        turn += 1
        out.extend(bytes(f) for f in decoder.buffer_updated(n))
    return out


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.binary(max_size=300),
            st.integers(min_value=SCRATCH_BYTES - 8, max_value=3 * SCRATCH_BYTES).map(
                lambda n: bytes([n % 251]) * n
            ),
        ),
        max_size=8,
    ),
    st.lists(st.integers(min_value=1, max_value=2 * SCRATCH_BYTES), max_size=6),
)
def test_reads_into_the_decoders_buffers_yield_the_same_frames(
    frames: list[bytes], most: list[int]
) -> None:
    decoder = FrameDecoder(4 * SCRATCH_BYTES)
    # Small reads go with a larger one now and then, so that big frames stay quick.
    assert read_through_buffers(decoder, encode_stream(frames), [*most, 4096]) == frames
    assert decoder.buffered == 0 and decoder.reading == 0 and not decoder.inside_frame


@pytest.fixture(params=["c", "python"])
def big_buffers(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Frames bigger than the scratch buffer get the extension's buffer, whose bytes are
    not zeroed first (what an earlier frame left there is overwritten), or, without the
    extension, a zeroed bytearray."""
    if request.param == "python":
        monkeypatch.setattr(framing, "_frame_buffer", bytearray)
    return str(request.param)


def test_the_extension_gives_big_frames_a_buffer_it_does_not_zero() -> None:
    from kbroker.protocol._recordwalk import frame_buffer

    assert framing._frame_buffer is frame_buffer
    buffer = frame_buffer(5 * SCRATCH_BYTES)
    assert type(buffer) is bytearray and len(buffer) == 5 * SCRATCH_BYTES
    assert len(frame_buffer(0)) == 0
    with pytest.raises(ValueError, match="negative"):
        frame_buffer(-1)


def test_big_frames_hold_only_their_own_bytes(big_buffers: str) -> None:
    """A buffer made from memory an earlier frame used holds this frame's bytes and
    nothing of the earlier one's, however its reads are cut."""
    size = 4 * SCRATCH_BYTES
    decoder = FrameDecoder(1 << 20)
    for fill in (b"\xaa", b"\x55", b"\x00"):
        body = fill * size
        cuts = [1, 3, 5000, SCRATCH_BYTES, 7, 100_000]
        (whole,) = read_through_buffers(decoder, frame(size) + body, cuts)
        assert whole == body


def test_a_big_frame_is_read_into_a_buffer_of_its_own(big_buffers: str) -> None:
    """Once its size is in, the rest of a frame bigger than the scratch buffer lands
    straight in the frame's own buffer, and never past its end."""
    size = 3 * SCRATCH_BYTES
    body = bytes(range(256)) * (size // 256)
    data = frame(size) + body + frame(2) + b"ok"
    decoder = FrameDecoder(1 << 20)
    first = decoder.get_buffer()
    first[:100] = data[:100]
    assert decoder.buffer_updated(100) == []
    assert decoder.inside_frame and decoder.reading == 4 + size and decoder.buffered == 100
    rest = decoder.get_buffer()
    assert len(rest) == size - 96  # exactly what the frame lacks
    rest[:] = data[100 : 4 + size]
    (whole,) = decoder.buffer_updated(len(rest))
    assert bytes(whole) == body and not whole.readonly
    assert decoder.reading == 0
    assert [bytes(f) for f in decoder.feed(data[4 + size :])] == [b"ok"]


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_a_huge_declared_frame_holds_only_what_arrived() -> None:
    """A frame of MAPPED_FROM bytes or more is read into an anonymous mapping: the size
    a client declares costs no memory until its bytes come."""
    declared = 48 << 20
    assert declared >= MAPPED_FROM
    decoder = FrameDecoder(64 << 20)
    before = resident_bytes()
    decoder.feed(frame(declared) + b"x" * 10)
    grown = resident_bytes() - before
    assert grown < 4 << 20, f"declaring {declared} bytes made the decoder hold {grown}"
    assert decoder.reading == 4 + declared
    assert decoder.buffered == 14
    assert len(decoder.get_buffer()) == declared - 10


@settings(max_examples=200, deadline=None)
@given(
    payloads,
    payloads,
    st.lists(st.tuples(st.booleans(), st.integers(min_value=1, max_value=700)), max_size=60),
)
def test_connections_of_one_thread_interleave_reads_and_keep_their_own_frames(
    first: list[bytes], second: list[bytes], turns: list[tuple[bool, int]]
) -> None:
    """The connections of a thread read into one scratch buffer, one read at a time; a
    frame one read left unfinished is its connection's, whatever the other read since."""
    streams = [encode_stream(first), encode_stream(second)]
    decoders = [FrameDecoder(MAX_FRAME), FrameDecoder(MAX_FRAME)]
    positions = [0, 0]
    out: list[list[bytes]] = [[], []]

    def read(which: int, most: int) -> None:
        data, pos = streams[which], positions[which]
        target = decoders[which].get_buffer()
        n = min(len(target), len(data) - pos, most)
        target[:n] = data[pos : pos + n]
        positions[which] = pos + n
        out[which].extend(bytes(f) for f in decoders[which].buffer_updated(n))

    for which_second, most in turns:
        which = int(which_second)
        if positions[which] < len(streams[which]):
            read(which, most)
    for which in (0, 1):  # the rest, in reads of 97 bytes
        while positions[which] < len(streams[which]):
            read(which, 97)
    assert out == [first, second]


def test_an_idle_connection_holds_no_read_buffer() -> None:
    """Thousands of connections cost their frame decoders next to nothing: the 64 KiB
    scratch buffer is the thread's, not each connection's."""
    scratch_buffer()  # this thread's, made once
    tracemalloc.start()
    try:
        decoders = [FrameDecoder(MAX_FRAME) for _ in range(1000)]
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(decoders) == 1000
    assert held < 1000 * 1024, f"1000 decoders hold {held} bytes"
