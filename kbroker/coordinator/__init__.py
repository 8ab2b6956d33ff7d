"""Group coordination: committed offsets and the membership of classic and
consumer-protocol groups.

`GroupCoordinator` is the state machine (no I/O) hosting `ClassicGroupCoordinator` and
`ConsumerGroupCoordinator`; `store` persists its records in the `__consumer_offsets`
log; `service` ties them to a running broker.
"""

from kbroker.coordinator.classic_coordinator import (
    JoinRequest,
    LeaveResult,
    LeavingMember,
    SyncRequest,
)
from kbroker.coordinator.coordinator import GroupCoordinator, ListedGroup
from kbroker.coordinator.group import GroupState, JoinResult, OffsetAndMetadata, SyncResult
from kbroker.coordinator.host import CoordinatorConfig

__all__ = [
    "CoordinatorConfig",
    "GroupCoordinator",
    "GroupState",
    "JoinRequest",
    "JoinResult",
    "LeaveResult",
    "LeavingMember",
    "ListedGroup",
    "OffsetAndMetadata",
    "SyncRequest",
    "SyncResult",
]
