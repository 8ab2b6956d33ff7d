"""Types of the C extension _tlsread.c (reading many TLS records in one call)."""

from typing import Final

DRAINED: Final[int]
FULL: Final[int]
CLOSED: Final[int]
FAILED: Final[int]
OPENSSL_VERSION_NUMBER: Final[int]

def ssl_of(sslsocket: object, /) -> int | None: ...
def read_records(sslsocket: object, /) -> tuple[bytes, int, str | None]: ...
def set_ciphersuites(sslsocket: object, suites: str, /) -> None: ...
