"""`kbroker log-dirs describe` / `move` against an in-process broker with two log
directories: what each directory holds, a replica moved from one to the other, and
Kafka's errors passed through."""

from __future__ import annotations

import asyncio
import json

import pytest
from inprocess import run_broker

from compat_tests.waiting import eventually_async
from kbroker.cli import main


def run(capsys: pytest.CaptureFixture[str], port: int, *args: str) -> tuple[int, str, str]:
    code = main(["log-dirs", *args, "--bootstrap", f"127.0.0.1:{port}"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_describe_then_move_a_replica_to_the_other_directory(tmp_path, capsys):
    disks = [str(tmp_path / "disk-a"), str(tmp_path / "disk-b")]

    async def check(broker, port):
        await broker.controller.create_topic("t", 1, 1)
        await broker.partitions_opened("t")
        code, out, _ = await asyncio.to_thread(run, capsys, port, "describe", "-o", "json")
        assert code == 0
        before = {d["path"]: [r["topic"] for r in d["replicas"]] for d in json.loads(out)}
        assert sorted(before) == disks
        source = next(p for p, topics in before.items() if "t" in topics)
        destination = next(p for p in disks if p != source)

        code, out, _ = await asyncio.to_thread(
            run, capsys, port, "move", "t", "0", "--broker", "1", "--dir", destination
        )
        assert code == 0 and f"Moving t-0 on broker 1 to {destination}" in out
        await eventually_async(
            lambda: broker.logs.log_dir_of(broker.logs.get("t", 0)).as_posix() == destination,
            timeout=10,
            what="t-0 moved",
        )
        code, out, _ = await asyncio.to_thread(run, capsys, port, "describe", "--topic", "t")
        assert code == 0
        rows = [line.split() for line in out.splitlines() if " t " in f" {line} "]
        assert [(row[1], row[2], row[3]) for row in rows] == [(destination, "t", "0")]

    run_broker(tmp_path, check, [f"log.dirs={','.join(disks)}"])


def test_moving_to_a_directory_the_broker_does_not_have_is_log_dir_not_found(tmp_path, capsys):
    async def check(broker, port):
        await broker.controller.create_topic("t", 1, 1)
        code, _, err = await asyncio.to_thread(
            run, capsys, port, "move", "t", "0", "--broker", "1", "--dir", "/nowhere"
        )
        assert code == 1 and "LOG_DIR_NOT_FOUND" in err

    run_broker(tmp_path, check)
