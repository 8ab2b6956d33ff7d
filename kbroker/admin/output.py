"""How admin commands print: rich tables for people, JSON for scripts, progress on stderr.

A command builds its answer as plain data and hands it to an `Output`; with
`--output json` the data is printed as one JSON document, otherwise as tables. Tables
have no borders (columns two spaces apart, as kafka-topics and kafka-consumer-groups
print them) so `awk` and `split()` still work on them. Progress bars go to stderr and
only when it is a terminal, so pipes and tests see clean output.
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:  # rich is imported when a table or a bar is drawn: a pipe needs neither
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

WIDE = 100_000  # off a terminal, never wrap or truncate a row


def _cell(value: object) -> str:
    return "-" if value is None else str(value)


def _rich_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> Table:
    from rich.table import Table

    table = Table(
        box=None, pad_edge=False, padding=(0, 2, 0, 0), show_edge=False, header_style="bold"
    )
    for header in headers:
        table.add_column(header, no_wrap=True, overflow="ignore")
    for row in rows:
        table.add_row(*(_cell(c) for c in row))
    return table


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """The table as plain text: columns padded to their widest cell, two spaces apart."""
    from rich.console import Console

    buffer = io.StringIO()
    Console(file=buffer, width=WIDE, color_system=None, highlight=False).print(
        _rich_table(headers, rows)
    )
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines())


@dataclass
class Output:
    """Where one command's answer goes: `format` is "table" or "json"."""

    format: str = "table"
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)

    @property
    def json(self) -> bool:
        return self.format == "json"

    def _console(self, stream: TextIO) -> Console:
        from rich.console import Console

        terminal = stream.isatty()
        return Console(
            file=stream, width=None if terminal else WIDE, highlight=False, soft_wrap=True
        )

    def table(self, headers: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
        if self.out.isatty():
            self._console(self.out).print(_rich_table(headers, rows))
        else:
            print(table(headers, rows), file=self.out)

    def text(self, line: str = "") -> None:
        print(line, file=self.out)

    def write_bytes(self, data: bytes) -> None:
        """Raw record bytes to stdout (through its binary layer when it has one), flushed
        so a reader down a pipe sees each batch as it comes."""
        if not data:
            return
        buffer = getattr(self.out, "buffer", None)
        if buffer is not None:
            self.out.flush()
            buffer.write(data)
            buffer.flush()
        else:
            self.out.write(data.decode("utf-8", errors="backslashreplace"))
            self.out.flush()

    def data(self, value: Any) -> None:
        """One JSON document (the whole answer of a command run with --output json)."""
        print(json.dumps(value, indent=2, sort_keys=False, default=str), file=self.out)

    def note(self, line: str) -> None:
        """A remark for the person at the terminal (stderr, so JSON on stdout stays clean)."""
        print(line, file=self.err)

    @contextmanager
    def progress(
        self, description: str, total: int | None, printing: bool = False
    ) -> Iterator[Progress | None]:
        """A progress bar on stderr while the block runs; none (None) off a terminal, and
        when the block `printing` results to stdout on the same terminal (a bar redrawn
        between the lines would garble them: piped output gets the bar)."""
        if not self.err.isatty() or (printing and self.out.isatty()):
            yield None
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(file=self.err),
            transient=True,
        )
        with bar:
            bar.add_task(description, total=total)
            yield bar


def advance(bar: Progress | None, n: int = 1) -> None:
    """Move the bar's only task on by `n` (nothing without a bar)."""
    if bar is not None:
        bar.advance(bar.task_ids[0], n)
