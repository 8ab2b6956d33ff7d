"""Value parsing and printing as Kafka's ConfigDef does it."""

import pytest

from kbroker.config.types import ConfigType, format_value, java_double_str, parse_value


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.5, "0.5"),
        (100.0, "100.0"),
        (0.001, "0.001"),
        (1e7, "1.0E7"),
        (0.0001, "1.0E-4"),
        (1.7976931348623157e308, "1.7976931348623157E308"),
        (-2.5e10, "-2.5E10"),
        (0.0, "0.0"),
    ],
)
def test_doubles_print_like_java(value, text):
    assert java_double_str(value) == text


def test_int_range_is_java_int():
    assert parse_value(ConfigType.INT, "2147483647") == 2**31 - 1
    with pytest.raises(ValueError, match="^Not a number of type INT$"):
        parse_value(ConfigType.INT, "2147483648")


def test_short_range_is_java_short():
    with pytest.raises(ValueError, match="^Not a number of type SHORT$"):
        parse_value(ConfigType.SHORT, "40000")


@pytest.mark.parametrize("text", ["1_000", "1.0", "0x10", "", "ten"])
def test_integers_reject_python_only_spellings(text):
    with pytest.raises(ValueError):
        parse_value(ConfigType.LONG, text)


@pytest.mark.parametrize("text", ["nan", "inf", "1_0.0", "x"])
def test_doubles_must_be_finite_numbers(text):
    with pytest.raises(ValueError):
        parse_value(ConfigType.DOUBLE, text)


def test_list_splits_on_commas_and_trims():
    assert parse_value(ConfigType.LIST, " a , b,c ") == ["a", "b", "c"]
    assert parse_value(ConfigType.LIST, "  ") == []
    assert format_value(ConfigType.LIST, ["a", "b"]) == "a,b"


def test_boolean_round_trip():
    assert parse_value(ConfigType.BOOLEAN, " True ") is True
    assert format_value(ConfigType.BOOLEAN, False) == "false"
    with pytest.raises(ValueError):
        parse_value(ConfigType.BOOLEAN, "1")
