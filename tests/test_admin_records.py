"""The admin client's pieces that need no broker: Kafka's partitioner hash, times, lines."""

from __future__ import annotations

import io
import os
import signal
import threading
import time

import pytest

from kbroker.admin.client import ClientError
from kbroker.admin.commands import parse_datetime
from kbroker.admin.producer import WAIT_SLICE_S, _ctrl_c_held, input_lines, read_available
from kbroker.admin.records import murmur2, parse_lines, partition_for


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        # The vectors of Kafka's own UtilsTest.testMurmur2.
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (b"abc", 479470107),
    ],
)
def test_murmur2_matches_kafkas_java_implementation(data, expected):
    assert murmur2(data) == expected


def test_unkeyed_records_take_the_fallback_partition():
    assert partition_for(None, 3, 7) == 1
    assert partition_for(b"21", 3, 7) == (-973932308 & 0x7FFFFFFF) % 3


def test_lines_split_at_the_first_key_separator():
    assert list(parse_lines(["a:b:c\n", "x:\n"], ":")) == [(b"a", b"b:c"), (b"x", b"")]
    assert list(parse_lines(["plain\n"], None)) == [(None, b"plain")]
    with pytest.raises(ClientError, match="no key separator"):
        list(parse_lines(["nokey\n"], ":"))


def test_datetimes_with_a_zone_are_exact():
    assert parse_datetime("2020-01-01T00:00:00+00:00") == 1577836800000
    assert parse_datetime("2020-01-01T01:00:00.500+01:00") == 1577836800500
    with pytest.raises(ClientError, match="bad --to-datetime"):
        parse_datetime("yesterday")


def test_default_bootstrap_is_where_serve_listens_and_what_the_readme_says():
    from pathlib import Path

    from kbroker.admin.commands import DEFAULT_BOOTSTRAP
    from kbroker.config import load_broker_config

    listener = load_broker_config(None, [], {}).get("listeners")
    assert listener == f"PLAINTEXT://{DEFAULT_BOOTSTRAP}"
    page = (Path(__file__).resolve().parent.parent / "docs/operations.md").read_text()
    assert f"`--bootstrap` (default `{DEFAULT_BOOTSTRAP}`" in page.replace("\n", " ")


def test_ctrl_c_ends_a_wait_for_input_whenever_it_comes() -> None:
    """`kbroker produce` waits for stdin: a Ctrl-C whose handler ran before the wait was
    entered (here: in another thread, so the wait's system call is not interrupted) still
    ends it, within one WAIT_SLICE_S, not when input next comes."""
    read_end, write_end = os.pipe()
    stream = os.fdopen(read_end, "rb")
    signalled, ended = threading.Event(), threading.Event()

    def ctrl_c_elsewhere() -> None:
        time.sleep(0.3)  # pacing: the main thread is waiting on the pipe by then
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)
        signalled.set()
        ended.wait(5)  # only then does input end: a wait in a blocking read ends here
        os.close(write_end)

    # Python's own Ctrl-C handler, as the command has it (a test before this one in the
    # same process may have left another: `kbroker dev` installs its own).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    helper = threading.Thread(target=ctrl_c_elsewhere, daemon=True)
    try:
        helper.start()
        began = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            read_available(stream, 1 << 20)
        assert signalled.is_set()
        assert time.monotonic() - began < 0.3 + 2 * WAIT_SLICE_S + 1.0
    finally:
        ended.set()
        helper.join()
        stream.close()
        signal.signal(signal.SIGINT, previous)


def test_ctrl_c_during_a_send_comes_once_the_batch_is_counted() -> None:
    """`kbroker produce` sends a batch and counts it as in flight under _ctrl_c_held: a
    Ctrl-C that comes between the two raises only after both, so the batch's answer is
    still read and the interrupted run reports it."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    steps: list[str] = []
    try:
        with pytest.raises(KeyboardInterrupt), _ctrl_c_held():
            steps.append("sent")
            signal.raise_signal(signal.SIGINT)
            steps.append("counted")
        assert steps == ["sent", "counted"]
        assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    finally:
        signal.signal(signal.SIGINT, previous)


def test_input_lines_are_the_lines_without_newlines_the_last_one_too() -> None:
    read_end, write_end = os.pipe()
    os.write(write_end, b"a=1\n\nb=2\nc=3")
    os.close(write_end)
    with os.fdopen(read_end, "rb") as stream:
        assert list(input_lines(stream)) == [b"a=1", b"", b"b=2", b"c=3"]
    assert list(input_lines(io.BytesIO(b"x\ny\n"))) == [b"x", b"y"]
