"""How admin commands print: borderless tables, one JSON document, progress on a terminal."""

from __future__ import annotations

import io
import json

from kbroker.admin.output import Output, advance, table


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_tables_pad_columns_two_spaces_apart_and_show_none_as_a_dash():
    assert table(["A", "LONGER"], [("x", None), ("wide-cell", 7)]).splitlines() == [
        "A          LONGER",
        "x          -",
        "wide-cell  7",
    ]


def test_a_long_row_is_never_wrapped_off_a_terminal():
    out = io.StringIO()
    Output("table", out=out).table(["K", "V"], [("k", "v" * 500)])
    assert len(out.getvalue().splitlines()) == 2


def test_json_output_is_one_parseable_document():
    out = io.StringIO()
    Output("json", out=out).data({"topics": [{"name": "t", "partitions": 3}]})
    assert json.loads(out.getvalue()) == {"topics": [{"name": "t", "partitions": 3}]}


def test_progress_is_drawn_on_a_terminal_stderr_only():
    err = Terminal()
    with Output(out=io.StringIO(), err=err).progress("producing", total=4) as bar:
        advance(bar, 4)
        assert bar is not None and not bar.disable
        assert bar.tasks[0].completed == 4
    quiet = io.StringIO()
    with Output(out=io.StringIO(), err=quiet).progress("producing", total=4) as bar:
        assert bar is None
        advance(bar, 4)
    assert quiet.getvalue() == ""


def test_progress_stays_off_while_records_print_to_the_same_terminal():
    with Output(out=Terminal(), err=Terminal()).progress("consuming", 4, printing=True) as bar:
        assert bar is None
    with Output(out=io.StringIO(), err=Terminal()).progress("consuming", 4, printing=True) as bar:
        assert bar is not None and not bar.disable
