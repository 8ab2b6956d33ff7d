"""A failing disk's error, injected by replacing the one call that meets it (a real
disk's EIO cannot be made on demand): monkeypatch the call with `eio`."""

from __future__ import annotations

import errno
from typing import NoReturn


def eio(*args: object, **kwargs: object) -> NoReturn:
    """Any call replaced by this fails as a disk's read, write, fsync or unlink does."""
    raise OSError(errno.EIO, "Input/output error")
