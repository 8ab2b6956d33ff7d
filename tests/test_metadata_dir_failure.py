"""A failure of the metadata log directory halts the broker, as Kafka halts when its
`metadata.log.dir` fails: here the directory is left to its default, the first of
`log.dirs`, so an I/O error in that log directory (EIO from fsync, injected: a real
disk's cannot be made on demand) is a failure of the metadata log directory too, while
the same error in another log directory only takes that one offline. A controller-only
node halts when its metadata journal cannot grow."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
from pathlib import Path

import pytest
from disk_faults import eio
from inprocess import RawClient, controller_only_config, run_broker

from kbroker.broker import Broker
from kbroker.controller import ControllerError
from kbroker.controller.machine import MetadataMachine
from kbroker.controller_node import ControllerNode
from kbroker.storage import LogManager
from kbroker.storage import log as log_module

KAFKA_STORAGE_ERROR = 56


def test_an_io_error_in_the_log_directory_holding_the_metadata_journal_halts_the_broker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    halts: list[int] = []
    first, second = tmp_path / "data", tmp_path / "data2"

    async def check(broker: Broker, port: int) -> None:
        client = await RawClient.connect(port)
        await client.create_topic("on-first", {"flush.messages": "1"})
        await client.create_topic("on-second", {"flush.messages": "1"})
        placed = {
            topic: broker.logs.log_dir_of(broker.logs.get(topic, 0))  # type: ignore[arg-type]
            for topic in ("on-first", "on-second")
        }
        assert placed == {"on-first": first, "on-second": second}
        monkeypatch.setattr(log_module, "_fdatasync", eio)
        assert (await client.produce("on-first", b"x")).error_code == KAFKA_STORAGE_ERROR
        assert list(broker.logs.offline_dirs) == [str(first)]
        assert halts == [1]
        monkeypatch.undo()
        client.close()

    with caplog.at_level(logging.CRITICAL):
        run_broker(tmp_path, check, [f"log.dirs={first},{second}"], halts=halts)
    critical = [r.getMessage() for r in caplog.records if r.levelno == logging.CRITICAL]
    assert len(critical) == 1, critical
    assert critical[0].startswith(
        f"Shutdown broker because the metadata log dir {first} has failed: OSError"
    )


def test_a_controller_only_node_whose_journal_cannot_grow_halts_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    config = controller_only_config(tmp_path / "meta")
    halts: list[int] = []

    async def main() -> None:
        node = ControllerNode(config)
        node.halt = halts.append
        await node.start()
        try:
            # The disk refuses the journal's next block: every growth fails as ENOSPC does.
            monkeypatch.setattr(os, "posix_fallocate", no_space)
            for attempt in range(500):
                if halts:
                    break
                # The entry that met the error is never committed: do not wait it out.
                with contextlib.suppress(ControllerError, TimeoutError):
                    await asyncio.wait_for(
                        node.controller.register_broker(2, "h", 9000 + attempt), 1.0
                    )
            assert halts == [1]
            monkeypatch.undo()
        finally:
            await node.controller.stop()

    with caplog.at_level(logging.CRITICAL):
        asyncio.run(main())
    critical = [r.getMessage() for r in caplog.records if r.levelno == logging.CRITICAL]
    assert critical == [
        f"Shutdown controller because the metadata log dir {tmp_path / 'meta'} has failed: "
        "[Errno 28] No space left on device"
    ]


def no_space(*args: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_metadata_snapshot_that_cannot_be_written_is_reported_before_pysyncobj_drops_it(
    tmp_path: Path,
) -> None:
    # pysyncobj swallows a serializer's exception and tries again later: the machine
    # hands the error on first, so the node can halt.
    errors: list[OSError] = []
    machine = MetadataMachine(on_write_error=errors.append)
    with pytest.raises(FileNotFoundError):
        machine.write_snapshot(str(tmp_path / "gone" / "raft.snapshot"), (None, None, []))
    assert [type(e) for e in errors] == [FileNotFoundError]


def test_a_broker_does_not_start_while_the_log_directory_holding_its_metadata_is_unusable(
    tmp_path: Path,
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.write_text("a file where the directory should be")
    logs = LogManager([first, second])
    logs.metadata_dir = str(first)
    with pytest.raises(OSError, match="metadata log directory .*first cannot be used"):
        logs.check_directories("cluster", 1)
    # Another unusable directory is only offline: the broker starts on the rest.
    others = LogManager([second, first])
    others.metadata_dir = str(second)
    others.check_directories("cluster", 1)
    assert list(others.offline_dirs) == [str(first)]
