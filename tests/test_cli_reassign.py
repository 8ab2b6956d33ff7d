"""`kbroker topics reassign` / `reassignments`: what the command line accepts, and Kafka's
answers passed through from an in-process single broker (replicas can only stay on it)."""

from __future__ import annotations

import asyncio

import pytest
from inprocess import run_broker

from kbroker.cli import main


def run(capsys: pytest.CaptureFixture[str], port: int, *args: str) -> tuple[int, str, str]:
    code = main(["topics", *args, "--bootstrap", f"127.0.0.1:{port}"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    "args",
    [(), ("0=1,x",), ("0:1,2",)],
    ids=["nothing", "not-a-broker-id", "no-equals"],
)
def test_a_reassign_command_line_that_names_no_valid_move_is_refused(tmp_path, capsys, args):
    async def check(broker, port):
        code, _, err = await asyncio.to_thread(run, capsys, port, "reassign", "t", *args)
        assert code == 1
        assert "kbroker topics" in err

    run_broker(tmp_path, check)


def test_reassign_reports_kafkas_error_and_cancel_of_nothing(tmp_path, capsys):
    async def check(broker, port):
        await broker.controller.create_topic("t", 1, 1)
        code, _, err = await asyncio.to_thread(run, capsys, port, "reassign", "t", "0=7")
        assert code == 1 and "INVALID_REPLICA_ASSIGNMENT" in err
        code, _, err = await asyncio.to_thread(run, capsys, port, "reassign", "t", "--cancel", "0")
        assert code == 1 and "NO_REASSIGNMENT_IN_PROGRESS" in err
        code, out, _ = await asyncio.to_thread(run, capsys, port, "reassign", "t", "0=1")
        assert code == 0 and "Reassigning t-0 to 1." in out
        code, out, _ = await asyncio.to_thread(run, capsys, port, "reassignments", "-o", "json")
        assert code == 0 and out.strip() == "[]"

    run_broker(tmp_path, check)
