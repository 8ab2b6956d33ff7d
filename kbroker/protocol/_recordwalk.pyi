from collections.abc import Container

def walk(
    section: bytes | bytearray | memoryview, count: int, last_offset_delta: int, /
) -> tuple[int, int, int]: ...
def invalid_schema_ids(
    section: bytes | bytearray | memoryview, count: int, field: int, valid: Container[int], /
) -> list[int]: ...
