"""The answer a handler describes: per API, a TypedDict of every version's response
fields (generated into protocol.response_types by scripts/message_types.py).

Handlers import this module and annotate with `responses.<Api>Response`. Creating the
few hundred TypedDicts costs tens of milliseconds, so at run time they are created only
when one is asked for (typing.get_type_hints on a handler, a test), never at broker start.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kbroker.protocol.response_types import *  # noqa: F403
else:

    def __getattr__(name: str) -> object:
        from kbroker.protocol import response_types

        try:
            value = getattr(response_types, name)
        except AttributeError:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
        globals()[name] = value
        return value
