from collections.abc import Sequence

def encode_lines(
    data: bytes,
    pos: int,
    final: bool,
    key_sep: bytes | None,
    headers: bytes,
    max_records: int,
    max_bytes: int,
    /,
) -> tuple[bytes, int, int]: ...
def encode_pairs(
    pairs: Sequence[tuple[bytes | None, bytes | None]], headers: bytes, /
) -> bytes: ...
def decode(
    section: bytes, count: int, min_delta: int, /
) -> list[tuple[int, int, bytes | None, bytes | None, tuple[tuple[bytes, bytes | None], ...]]]: ...
def join_values(
    section: bytes, count: int, min_delta: int, key_sep: bytes | None, end: bytes, /
) -> tuple[bytes, int]: ...
