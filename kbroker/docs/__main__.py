"""``python -m kbroker.docs``: rewrite the generated pages; ``--check``: fail when stale."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from kbroker.docs import cli_reference, compatibility, configuration, layers, metrics

DOCS = Path(__file__).resolve().parent.parent.parent / "docs"


def pages(docs: Path | None = None) -> dict[Path, Callable[[str], str]]:
    """Each generated page and how to make it from its current text."""
    docs = DOCS if docs is None else docs
    return {
        docs / "configuration.md": lambda _old: configuration.render(),
        docs / "compatibility.md": compatibility.with_section,
        docs / "operations.md": metrics.with_section,
        docs / "cli.md": cli_reference.with_reference,
        docs / "architecture.md": layers.with_section,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kbroker.docs", description=__doc__)
    parser.add_argument("--check", action="store_true", help="only report stale pages")
    args = parser.parse_args(argv)
    stale = []
    for path, make in pages().items():
        old = path.read_text() if path.exists() else ""
        new = make(old)
        if new == old:
            continue
        stale.append(path)
        if not args.check:
            path.write_text(new)
    for path in stale:
        verb = "is stale (run make docs)" if args.check else "rewritten"
        print(f"{path.name} {verb}", file=sys.stderr)
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
