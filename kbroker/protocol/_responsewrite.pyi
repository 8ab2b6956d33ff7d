from kbroker.protocol.encoded import EncodedBody
from kbroker.protocol.fetch_response import FetchedTopic

def bind_fetch_response(encoded_body: type[EncodedBody], /) -> None: ...
def encode_fetch(
    version: int,
    topics: list[FetchedTopic],
    error_code: int,
    session_id: int,
    throttle_time_ms: int,
    endpoints: bytes | None,
    /,
) -> EncodedBody: ...
