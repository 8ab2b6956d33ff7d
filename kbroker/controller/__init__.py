"""The metadata controller: cluster metadata as a Raft-replicated state machine (pysyncobj).

Handlers use `Controller` (asyncio) and read `controller.state`, an immutable
`MetadataState` snapshot; they learn of committed changes through `subscribe`.
"""

from kbroker.controller.controller import Controller, ControllerConfig, new_cluster_id
from kbroker.controller.errors import ControllerError, ControllerStartError
from kbroker.controller.events import (
    BrokerRegistered,
    GroupConfigsChanged,
    MetadataEvent,
    PartitionsCreated,
    TopicConfigsChanged,
    TopicCreated,
    TopicDeleted,
)
from kbroker.controller.state import BrokerInfo, MetadataState, PartitionInfo, TopicInfo

__all__ = [
    "BrokerInfo",
    "BrokerRegistered",
    "Controller",
    "ControllerConfig",
    "ControllerError",
    "ControllerStartError",
    "MetadataEvent",
    "MetadataState",
    "PartitionInfo",
    "PartitionsCreated",
    "TopicConfigsChanged",
    "GroupConfigsChanged",
    "TopicCreated",
    "TopicDeleted",
    "TopicInfo",
    "new_cluster_id",
]
