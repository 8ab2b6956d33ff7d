"""The broker's parts are typed, so no code probes them with getattr: a part that
might be missing is an Optional in a Protocol, and mypy checks every use."""

from __future__ import annotations

import ast
from pathlib import Path

import kbroker

PARTS = {"broker", "_broker", "ctx", "replica", "replicas", "partitions", "service"}


def _names(node: ast.expr) -> set[str]:
    return {
        n.id if isinstance(n, ast.Name) else n.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Name | ast.Attribute)
    }


def probes() -> list[str]:
    found = []
    root = Path(kbroker.__file__).parent
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr")
                and node.args
                and _names(node.args[0]) & PARTS
            ):
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_no_getattr_probes_on_the_brokers_parts() -> None:
    assert probes() == []
