"""Java .properties syntax as java.util.Properties.load reads it."""

from pathlib import Path

import pytest

from kbroker.config import ConfigError
from kbroker.config.properties import parse_properties, read_properties


def pairs(text: str) -> list[tuple[str, str]]:
    return [(e.key, e.value) for e in parse_properties(text)]


def test_equals_colon_and_space_separate_key_from_value():
    assert pairs("a=1\nb: 2\nc 3\nd\t=\t4\n") == [("a", "1"), ("b", "2"), ("c", "3"), ("d", "4")]


def test_hash_and_bang_lines_are_comments():
    assert pairs("# comment\n  ! also\nkey=value # not a comment\n") == [
        ("key", "value # not a comment")
    ]


def test_blank_lines_are_skipped_and_line_numbers_kept():
    entries = parse_properties("\n\n  \na=1\n\nb=2")
    assert [(e.key, e.line) for e in entries] == [("a", 4), ("b", 6)]


def test_trailing_backslash_continues_value_dropping_leading_blanks():
    assert pairs("listeners=PLAINTEXT://a:1,\\\n    PLAINTEXT2://b:2\n") == [
        ("listeners", "PLAINTEXT://a:1,PLAINTEXT2://b:2")
    ]


def test_continued_entry_reports_its_first_line():
    entries = parse_properties("x=1\ny=a\\\n  b\\\n  c\nz=3")
    assert [(e.key, e.value, e.line) for e in entries] == [
        ("x", "1", 1),
        ("y", "abc", 2),
        ("z", "3", 5),
    ]


def test_even_backslashes_at_end_do_not_continue():
    assert pairs("a=c:\\\\\nb=2") == [("a", "c:\\"), ("b", "2")]


def test_escapes_in_keys_and_values():
    assert pairs("a\\=b\\:c=x\\ty\\u0041\\q") == [("a=b:c", "x\tyAq")]


def test_escaped_space_in_key():
    assert pairs("my\\ key = v") == [("my key", "v")]


def test_key_without_value_has_empty_value():
    assert pairs("lonely\nother=") == [("lonely", ""), ("other", "")]


def test_crlf_and_cr_line_endings():
    assert pairs("a=1\r\nb=2\rc=3") == [("a", "1"), ("b", "2"), ("c", "3")]


def test_trailing_whitespace_of_value_is_kept():
    assert pairs("a=1  ") == [("a", "1  ")]


def test_comment_line_ending_in_backslash_does_not_continue():
    assert pairs("# note \\\na=1") == [("a", "1")]


def test_malformed_unicode_escape_names_line():
    with pytest.raises(ConfigError, match=r"cfg:2: malformed"):
        parse_properties("a=1\nb=\\u12", origin="cfg")


def test_missing_file_is_a_config_error(tmp_path: Path):
    with pytest.raises(ConfigError, match="cannot read config file"):
        read_properties(tmp_path / "absent.properties")
