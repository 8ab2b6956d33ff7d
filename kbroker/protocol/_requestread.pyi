import datetime
import uuid
from collections.abc import Callable

from kbroker.protocol.batch import (
    BatchHeader,
    BatchTooLargeError,
    InvalidRecordsError,
    UnsupportedMagicError,
)
from kbroker.protocol.errors import CorruptBatchError, MalformedRequest
from kbroker.protocol.fetch_request_decode import (
    FetchPartition,
    FetchRequest,
    FetchTopic,
    ForgottenTopic,
    ReplicaState,
)
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
def bind_batches(
    header: type[BatchHeader],
    corrupt: type[CorruptBatchError],
    unsupported_magic: type[UnsupportedMagicError],
    too_large: type[BatchTooLargeError],
    invalid_records: type[InvalidRecordsError],
    crc32c: Callable[..., int],
    /,
) -> None: ...
def batch_headers(
    buf: bytes | bytearray | memoryview, max_batch_bytes: int, check_record_count: bool, /
) -> list[BatchHeader]: ...
def bind_fetch(
    partition: type[FetchPartition],
    topic: type[FetchTopic],
    forgotten: type[ForgottenTopic],
    replica_state: type[ReplicaState],
    request: type[FetchRequest],
    malformed: type[MalformedRequest],
    no_replica_state: ReplicaState,
    wait: Callable[[int], datetime.timedelta],
    uuid_of: Callable[[int, int], uuid.UUID | None],
    no_high_watermark: int,
    /,
) -> None: ...
def decode_fetch(
    version: int, frame: bytes | memoryview, offset: int, max_elements: int, /
) -> FetchRequest: ...
