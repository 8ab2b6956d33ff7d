"""The pysyncobj that kbroker's Raft is built on, and every private member it relies on.

kbroker/controller/raft*.py override and read members of pysyncobj that are not its
public API (name-mangled fields such as `_SyncObj__raftCurrentTerm`, hooks such as
`_TcpConnection__processParseMessage`, the journal's `ResizableFile`). Another pysyncobj
release may rename any of them, and a renamed member would not fail loudly: an override
would silently stop being called, or every Raft tick would raise. So the version is
pinned exactly (pyproject.toml), and `check()` runs when raft.py is imported: it refuses
any other version, and names each member it cannot find, in one line.

A member counts as present when the class (or a base) has it as an attribute, or when one
of its functions stores or loads it (instance fields are only set in `__init__`, so they
appear in the compiled code's names, not on the class).
"""

from __future__ import annotations

import importlib.metadata
import types
from collections.abc import Iterable, Mapping

PINNED_VERSION = "0.3.17"

# module path, class name -> the private members kbroker reads, writes or overrides.
REQUIRED: Mapping[tuple[str, str], tuple[str, ...]] = {
    ("pysyncobj.syncobj", "SyncObj"): (
        "_SyncObj__conf",
        "_SyncObj__connectedToAnyone",
        "_SyncObj__doApplyCommand",
        "_SyncObj__doChangeCluster",
        "_SyncObj__generateRaftTimeout",
        "_SyncObj__getCurrentLogIndex",
        "_SyncObj__getCurrentLogTerm",
        "_SyncObj__getEntries",
        "_SyncObj__onLeaderChanged",
        "_SyncObj__onMessageReceived",
        "_SyncObj__otherNodes",
        "_SyncObj__raftCommitIndex",
        "_SyncObj__raftCurrentTerm",
        "_SyncObj__raftElectionDeadline",
        "_SyncObj__raftLastApplied",
        "_SyncObj__raftLeader",
        "_SyncObj__raftMatchIndex",
        "_SyncObj__raftState",
        "_SyncObj__selfNode",
        "_SyncObj__setCurrentTerm",
        "_SyncObj__setState",
        "_SyncObj__transferInProgress",
        "_SyncObj__transport",
        "_SyncObj__updateClusterConfiguration",
        "_doDestroy",
        "_getLeader",
        "_isLeader",
        "_onTick",
        "_poller",
    ),
    ("pysyncobj.transport", "TCPTransport"): (
        "_connections",
        "_createServer",
        "_lastConnectAttempt",
        "_nodeAddrToNode",
        "_nodes",
        "_onIncomingMessageReceived",
        "_onNewIncomingConnection",
        "_onMessageReceived",
        "_onNodeDisconnected",
        "_onReadonlyNodeConnected",
        "_onTick",
        "_preventConnectNodes",
        "_readonlyNodes",
        "_readonlyNodesCounter",
        "_selfNode",
        "_sendSelfAddress",
        "_server",
        "_shouldConnect",
        "_syncObj",
        "_unknownConnections",
    ),
    ("pysyncobj.tcp_connection", "TcpConnection"): (
        "_TcpConnection__processParseMessage",
        "_TcpConnection__readBuffer",
        "_TcpConnection__socket",
    ),
    ("pysyncobj.tcp_server", "TcpServer"): (
        "_TcpServer__connectionTimeout",
        "_TcpServer__keepalive",
        "_TcpServer__onNewConnection",
        "_TcpServer__onNewConnectionCallback",
        "_TcpServer__poller",
        "_TcpServer__recvBufferSize",
        "_TcpServer__sendBufferSize",
        "_TcpServer__socket",
    ),
    ("pysyncobj.journal", "ResizableFile"): (
        "_ResizableFile__f",
        "_ResizableFile__mm",
        "_ResizableFile__resizeFactor",
    ),
}


class UnsupportedPysyncobj(RuntimeError):
    """The installed pysyncobj is not the one kbroker's Raft code was written against."""


def _code_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def names_used_by(cls: type) -> set[str]:
    """Attributes of `cls` and its bases, and every attribute name their functions touch."""
    found = set(dir(cls))
    for klass in cls.__mro__:
        for value in vars(klass).values():
            func = getattr(value, "__func__", value)
            code = getattr(func, "__code__", None)
            if isinstance(code, types.CodeType):
                found |= _code_names(code)
    return found


def missing_members(required: Mapping[tuple[str, str], Iterable[str]] = REQUIRED) -> list[str]:
    """`Class.member` for each required member the installed pysyncobj lacks."""
    missing = []
    for (module_name, class_name), members in required.items():
        module = importlib.import_module(module_name)
        cls = getattr(module, class_name, None)
        if not isinstance(cls, type):
            missing.append(f"{module_name}.{class_name}")
            continue
        present = names_used_by(cls)
        missing += [f"{class_name}.{m}" for m in members if m not in present]
    return missing


def check(version: str | None = None) -> None:
    """Raise UnsupportedPysyncobj, in one line, unless the pinned pysyncobj is installed
    with every member kbroker relies on."""
    installed = version if version is not None else importlib.metadata.version("pysyncobj")
    if installed != PINNED_VERSION:
        raise UnsupportedPysyncobj(
            f"kbroker's Raft needs pysyncobj=={PINNED_VERSION}, found {installed}: "
            f"pip install pysyncobj=={PINNED_VERSION}"
        )
    missing = missing_members()
    if missing:
        raise UnsupportedPysyncobj(
            f"pysyncobj {installed} lacks members kbroker's Raft relies on: {', '.join(missing)}"
        )
