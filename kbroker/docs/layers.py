"""The layer list of docs/architecture.md, from the import contract in pyproject.toml.

`make lint` holds the code to pyproject's [tool.importlinter] layers; the page shows
those layers, top to bottom, with what each holds, so it cannot drift from what is
enforced. A layer added to the contract without a line here fails `make docs`.
"""

from __future__ import annotations

import re
import textwrap
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent.parent / "pyproject.toml"
BEGIN = "<!-- BEGIN generated layers (make docs) -->"
END = "<!-- END generated layers -->"
NAMES_WIDTH = 36  # module names wrap here
COLUMN = 40  # where the text starts, after the block's indent
TEXT_WIDTH = 46

# What each layer holds, by the first module of the layer.
WHAT = {
    "__main__": "",
    "cli": "the `kbroker` command, these pages' generators, the local dev cluster, the "
    "pytest plugin",
    "broker": "wiring a node together, the admin commands and their Kafka client, logging, "
    "kbroker format",
    "server": "connections and their states, TLS transport, HTTP endpoints, metrics",
    "handlers": "decode → call → typed response; no policy here",
    "coordinator": "groups (classic, consumer, streams, and share-group membership), "
    "transactions, share-partition "
    "leaders and the share coordinator, the schema registry's store, feature levels, "
    "client telemetry (KIP-714)",
    "coordinator_runtime": "what the coordinators share: their internal topics, loading, writes",
    "replica": "Partition, ReplicaManager, fetchers | the Raft metadata machine",
    "security": "listeners, TLS, SASL, ACLs, quotas",
    "config": "the settings tables, typed settings",
    "protocol": "framing, headers, kio codecs, record batches | segments, indexes, log "
    "loading and recovery, retention, compaction, producer state",
    "tasks": "small helpers for asyncio tasks and the GC",
}


def contract_layers(pyproject: Path = PYPROJECT) -> list[list[str]]:
    """The contract's layers, top first, each its modules without the `kbroker.`."""
    settings = tomllib.loads(pyproject.read_text())["tool"]["importlinter"]
    [layers] = [c["layers"] for c in settings["contracts"] if c["type"] == "layers"]
    return [
        [m.removeprefix("kbroker.") for m in re.findall(r"kbroker\.[\w.]+", layer)]
        for layer in layers
    ]


def render_block(pyproject: Path = PYPROJECT) -> str:
    lines: list[str] = []
    for modules in contract_layers(pyproject):
        what = WHAT.get(modules[0])
        if what is None:
            raise ValueError(f"kbroker/docs/layers.py says nothing of the layer {modules}")
        names = textwrap.wrap(
            ", ".join(modules), NAMES_WIDTH, subsequent_indent="  ", break_on_hyphens=False
        )
        text = textwrap.wrap(what, TEXT_WIDTH, break_on_hyphens=False) if what else []
        for i in range(max(len(names), len(text))):
            left = names[i] if i < len(names) else ""
            right = text[i] if i < len(text) else ""
            lines.append(f"    {left:<{COLUMN}}{right}".rstrip())
    return "\n".join(lines)


def with_section(page: str) -> str:
    """``page`` with the text between its markers replaced by the current layers."""
    start, end = page.find(BEGIN), page.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the page has no {BEGIN} ... {END} section")
    return page[:start] + BEGIN + "\n\n" + render_block() + "\n\n" + page[end:]
