import uuid

from kbroker.protocol.errors import MalformedRequest
from kbroker.protocol.header import RequestHeader
from kbroker.protocol.produce_request import PartitionData, ProduceRequest, TopicData

def bind_header(header: type[RequestHeader], malformed: type[MalformedRequest], /) -> None: ...
def bind_produce(
    partition: type[PartitionData],
    topic: type[TopicData],
    request: type[ProduceRequest],
    malformed: type[MalformedRequest],
    uuid_class: type[uuid.UUID],
    /,
) -> None: ...
def parse_header(frame: bytes | memoryview, flexible: bool, /) -> tuple[RequestHeader, int]: ...
def decode_produce(
    version: int, frame: bytes | memoryview, offset: int, max_elements: int, /
) -> ProduceRequest: ...
