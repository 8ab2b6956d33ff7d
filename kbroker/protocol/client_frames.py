"""A client's side of the framing (no I/O): requests out, responses in.

The admin client, the replica fetcher (a follower is a client of its leader) and the
tests frame their requests and read the answers with these; the sockets around them
are theirs.
"""

from __future__ import annotations

import functools
import struct
from typing import Any

from kio.index import load_response_schema
from kio.serial import entity_reader

from kbroker.protocol.messages import API_NAMES, encode, is_flexible, known_versions

API_VERSIONS = 18


def request_frame(
    api_key: int, version: int, correlation: int, client_id: str, body: bytes
) -> bytes:
    """A whole size-prefixed request; unknown keys and versions get a v1 header."""
    client = client_id.encode()
    head = struct.pack(">hhih", api_key, version, correlation, len(client)) + client
    known = api_key in API_NAMES and version in known_versions(api_key)
    if known and is_flexible(api_key, version):
        head += b"\x00"  # no tagged fields in the header
    payload = head + body
    return struct.pack(">i", len(payload)) + payload


def encode_request(entity: Any, correlation: int, client_id: str) -> bytes:
    """A kio request entity framed for the wire."""
    key, version = int(entity.__api_key__), int(entity.__version__)
    return request_frame(key, version, correlation, client_id, encode(entity))


def decode_response(api_key: int, version: int, frame: bytes | memoryview) -> tuple[int, Any]:
    """(correlation id, kio response entity) of one response frame (without its size)."""
    (correlation,) = struct.unpack_from(">i", frame, 0)
    offset, read = _response_reader(api_key, version)
    response, _ = read(frame, offset)
    return correlation, response


@functools.cache
def _response_reader(api_key: int, version: int) -> tuple[int, Any]:
    """Where a response's body starts and kio's reader of it: looked up once, not per
    answer (a follower reads one Fetch answer after another)."""
    # ApiVersions answers with a v0 header even in its flexible versions.
    offset = 5 if is_flexible(api_key, version) and api_key != API_VERSIONS else 4
    return offset, entity_reader(load_response_schema(api_key, version))
