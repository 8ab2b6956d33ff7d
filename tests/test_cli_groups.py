"""`kbroker groups`: tables, assignment decoding, addresses, and the commands against an
in-process broker."""

from __future__ import annotations

import asyncio
import struct

import pytest
from inprocess import run_broker

from compat_tests.waiting import eventually
from kbroker.admin.client import BrokerConnection, ClientError, parse_address
from kbroker.admin.groups import (
    GroupDescription,
    GroupListing,
    MemberInfo,
    PartitionLag,
    decode_assignment,
    render_description,
    render_list,
)
from kbroker.cli import main

OFFSET_COMMIT, FIND_COORDINATOR = 8, 10


def assignment_bytes(topics: dict[str, list[int]], version: int = 3) -> bytes:
    out = struct.pack(">hi", version, len(topics))
    for topic, partitions in topics.items():
        out += struct.pack(">h", len(topic)) + topic.encode()
        out += struct.pack(">i", len(partitions)) + b"".join(
            struct.pack(">i", p) for p in partitions
        )
    return out + struct.pack(">i", -1)


def test_list_table_has_one_row_per_group():
    text = render_list([GroupListing("g1", "consumer", "Stable", "consumer")])
    assert text.splitlines()[1].split() == ["g1", "consumer", "Stable", "consumer"]


def test_description_collapses_partition_runs_and_totals_lag():
    member = MemberInfo(
        "m-1", "reader", "/10.0.0.1", epoch=4, assignment=(("t", 0), ("t", 1), ("t", 3))
    )
    d = GroupDescription(
        "g",
        "consumer",
        "Stable",
        (1, "localhost", 9092),
        epoch=4,
        assignment_epoch=4,
        assignor="uniform",
        members=[member],
        partitions=[PartitionLag("t", 0, 5, 9, member), PartitionLag("t", 1, None, 3, member)],
    )
    text = render_description(d)
    assert "t:0-1,3" in text
    assert "Group epoch 4, assignment epoch 4, assignor uniform, 1 members" in text
    assert text.splitlines()[-1] == "Total lag: 4"
    lag_rows = [line.split() for line in text.splitlines() if line.startswith("t ")]
    assert lag_rows[1][:5] == ["t", "1", "-", "3", "-"]


def test_classic_assignment_bytes_are_decoded():
    data = assignment_bytes({"a": [0, 2], "b": [1]})
    assert decode_assignment(data) == (("a", 0), ("a", 2), ("b", 1))
    assert decode_assignment(b"") == ()
    assert decode_assignment(data[:9]) == ()


@pytest.mark.parametrize(
    ("text", "expected"),
    [("host:9093", ("host", 9093)), ("host", ("host", 9092)), ("[::1]:9094", ("::1", 9094))],
)
def test_addresses_parse(text, expected):
    assert parse_address(text) == expected


def test_bad_port_is_a_client_error():
    with pytest.raises(ClientError):
        parse_address("host:http")


def test_commands_against_a_broker(tmp_path, capsys):
    outputs: dict[str, tuple[int, str]] = {}

    async def check(broker, port):
        loop = asyncio.get_running_loop()
        await broker.controller.create_topic("cli-t", 2, 1)
        bootstrap = f"127.0.0.1:{port}"

        def commit() -> None:
            """An offsets-only group; the first lookups create and load the offsets topic."""
            conn = BrokerConnection("127.0.0.1", port).negotiate()
            body = {
                "group_id": "cli-g",
                "generation_id_or_member_epoch": -1,
                "member_id": "",
                "topics": [
                    {"name": "cli-t", "partitions": [{"partition_index": 0, "committed_offset": 0}]}
                ],
            }
            lookup = {"key": "cli-g", "key_type": 0, "coordinator_keys": ["cli-g"]}

            def committed() -> bool:
                conn.call(FIND_COORDINATOR, lookup, (0, 4))
                resp = conn.call(OFFSET_COMMIT, body, (2, 8))
                return int(resp.topics[0].partitions[0].error_code) == 0

            try:
                eventually(committed, timeout=10, what="the offset commit")
            finally:
                conn.close()

        def run(*args: str) -> tuple[int, str]:
            code = main(["groups", *args, "--bootstrap", bootstrap])
            return code, capsys.readouterr().out

        await loop.run_in_executor(None, commit)
        outputs["list"] = await loop.run_in_executor(None, run, "list")
        outputs["describe"] = await loop.run_in_executor(None, run, "describe", "cli-g")

    run_broker(tmp_path, check)
    code, out = outputs["list"]
    assert code == 0
    assert ["cli-g", "classic", "Empty"] in [line.split() for line in out.splitlines()]
    code, out = outputs["describe"]
    assert code == 0
    assert ["cli-t", "0", "0", "0", "0", "-", "-"] in [line.split() for line in out.splitlines()]
