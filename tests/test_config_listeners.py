"""Listener, address and peer strings."""

import pytest

from kbroker.config.listeners import (
    Endpoint,
    parse_address,
    parse_http_listener,
    parse_listeners,
    parse_peer,
    parse_protocol_map,
)


def test_single_listener_unpacks_as_name_host_port():
    [(name, host, port)] = parse_listeners("PLAINTEXT://127.0.0.1:9092")
    assert (name, host, port) == ("PLAINTEXT", "127.0.0.1", 9092)


def test_comma_list_with_spaces_and_lower_case_names():
    assert parse_listeners(" plaintext://a:1 , INTERNAL://b.example:2 ") == [
        Endpoint("PLAINTEXT", "a", 1),
        Endpoint("INTERNAL", "b.example", 2),
    ]


def test_empty_host_binds_every_interface():
    [endpoint] = parse_listeners("PLAINTEXT://:9092")
    assert endpoint.host == "" and endpoint.bind_host is None and endpoint.is_wildcard


def test_ipv6_host_in_brackets():
    [endpoint] = parse_listeners("PLAINTEXT://[::1]:9092")
    assert endpoint.host == "::1"
    assert str(endpoint) == "PLAINTEXT://[::1]:9092"


@pytest.mark.parametrize(
    "text",
    ["PLAINTEXT:/a:1", "a:1", "PLAINTEXT://a", "PLAINTEXT://a:port", "PLAINTEXT://a:70000"],
)
def test_malformed_listener_is_rejected(text):
    with pytest.raises(ValueError):
        parse_listeners(text)


def test_duplicate_listener_names_are_rejected():
    with pytest.raises(ValueError, match="more than once"):
        parse_listeners("PLAINTEXT://a:1,plaintext://b:2")


def test_protocol_map_parses_pairs():
    assert parse_protocol_map("internal:plaintext, CONTROLLER:PLAINTEXT") == {
        "INTERNAL": "PLAINTEXT",
        "CONTROLLER": "PLAINTEXT",
    }


def test_protocol_map_rejects_unknown_protocol():
    with pytest.raises(ValueError, match="not one of"):
        parse_protocol_map("A:TLS")


def test_http_listener():
    assert parse_http_listener("http://0.0.0.0:9644") == Endpoint("HTTP", "0.0.0.0", 9644)
    with pytest.raises(ValueError):
        parse_http_listener("https://a:1")


def test_address_and_peer():
    assert parse_address("host:1") == ("host", 1)
    assert parse_peer("3@node3:19093") == (3, "node3", 19093)
    with pytest.raises(ValueError):
        parse_peer("node3:19093")
