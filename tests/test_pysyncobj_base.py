"""kbroker's Raft rests on private members of one pysyncobj release: any other release is
refused at import in one line, every private member the code touches is checked, and a
Raft tick that keeps failing stops the node in one line instead of retrying forever."""

from __future__ import annotations

import asyncio
import logging
import re
from pathlib import Path

import pytest
from inprocess import controller_only_config

from compat_tests.waiting import eventually_async
from kbroker.controller import pysyncobj_base, raft
from kbroker.controller_node import ControllerNode

CONTROLLER_SOURCES = sorted((Path(raft.__file__).parent).glob("*.py"))
MANGLED = re.compile(r"\b_(SyncObj|TcpConnection|TcpServer|ResizableFile)__\w+")


def test_the_installed_pysyncobj_is_the_pinned_one_with_every_member_kbroker_uses() -> None:
    pysyncobj_base.check()


def test_another_pysyncobj_version_is_refused_in_one_line_naming_the_pin() -> None:
    with pytest.raises(pysyncobj_base.UnsupportedPysyncobj) as refused:
        pysyncobj_base.check(version="0.3.18")
    message = str(refused.value)
    assert "\n" not in message
    assert "pysyncobj==0.3.17" in message and "0.3.18" in message


def test_a_member_the_installed_pysyncobj_lacks_is_named() -> None:
    required = {("pysyncobj.syncobj", "SyncObj"): ("_SyncObj__raftCurrentTerm", "_SyncObj__gone")}
    assert pysyncobj_base.missing_members(required) == ["SyncObj._SyncObj__gone"]
    assert pysyncobj_base.missing_members({("pysyncobj.syncobj", "Gone"): ("_x",)}) == [
        "pysyncobj.syncobj.Gone"
    ]


def test_every_name_mangled_pysyncobj_member_in_the_controller_is_checked() -> None:
    checked = {m for members in pysyncobj_base.REQUIRED.values() for m in members}
    used = {
        match.group(0)
        for source in CONTROLLER_SOURCES
        if source.name != "pysyncobj_base.py"
        for match in MANGLED.finditer(source.read_text())
    }
    assert used, "the scan found no pysyncobj member at all"
    assert used <= checked, sorted(used - checked)


def test_a_raft_tick_that_keeps_failing_halts_a_controller_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    config = controller_only_config(tmp_path / "meta")
    halts: list[int] = []

    def broken_tick(self: object, timeToWait: float = 0.0) -> None:  # noqa: N803
        raise AttributeError("'_RaftNode' object has no attribute '_SyncObj__renamed'")

    async def main() -> None:
        node = ControllerNode(config)
        node.halt = halts.append
        await node.start()
        try:
            monkeypatch.setattr(raft._RaftNode, "_onTick", broken_tick)
            await eventually_async(lambda: halts, timeout=10, what="the node to halt")
            assert halts == [1]
            monkeypatch.undo()
        finally:
            await node.controller.stop()

    with caplog.at_level(logging.WARNING):
        asyncio.run(main())
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("kbroker.controller")]
    critical = [r.getMessage() for r in caplog.records if r.levelno == logging.CRITICAL]
    assert critical == [
        "Shutdown controller because its Raft node stopped: "
        "'_RaftNode' object has no attribute '_SyncObj__renamed'"
    ]
    assert not [line for line in lines if "tick failed" in line], lines
