"""Consumer-group coordination: classic group membership and committed offsets.

`GroupCoordinator` is the state machine (no I/O); `store` persists its records in the
`__consumer_offsets` log; `service` ties both to a running broker.
"""

from kbroker.coordinator.coordinator import (
    CoordinatorConfig,
    GroupCoordinator,
    JoinRequest,
    LeaveResult,
    LeavingMember,
    ListedGroup,
    SyncRequest,
)
from kbroker.coordinator.group import GroupState, JoinResult, OffsetAndMetadata, SyncResult

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
