"""The KIP-584 feature levels this broker supports and the ones in force (KIP-778, KIP-1022).

ApiVersions v3+ carries them; `Admin.describeFeatures` and `kafka-features.sh describe`
read them there, and a Java producer 4.x reads `transaction.version` there to decide
whether to speak KIP-890 part 2 (an epoch bump per transaction). So the table claims only
what kbroker does:

- `metadata.version` 29 (4.2-IV1): the APIs served are Kafka 4.2's. kbroker cannot run at
  an older level, so the range is that one level, and it is always finalized.
- `group.version` 0-1: 1 is the KIP-848 consumer protocol, in force unless
  `group.coordinator.rebalance.protocols` leaves out `consumer`.
- `share.version` 0-1: 1 is KIP-932 share groups, in force while `group.share.enable`.
- `transaction.version` 0 only: EndTxn keeps the producer epoch (no KIP-890 part 2 bump,
  level 2) and the transaction log is kbroker's own (level 1 is Kafka's flexible format).
- `kraft.version` 0 only (a static `controller.quorum.voters`, no KIP-853 reconfiguration)
  and `eligible.leader.replicas.version` 0 only (no KIP-966 ELR).

As on Kafka, a finalized level 0 is left out, and features whose minimum is 0 are left out
of an ApiVersions answer below v4 (KAFKA-17011: older clients refuse a minimum of 0). Every
level follows from settings that a cluster's brokers share and from nothing else, so the
brokers of a cluster agree; UpdateFeatures (API 57) is not served, so they never change
while a broker runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

METADATA_VERSION = "metadata.version"
METADATA_VERSION_LEVEL = 29  # 4.2-IV1
FIRST_VERSION_SHOWING_LEVEL_0 = 4  # ApiVersions v4 (KAFKA-17011)


class SettingSource(Protocol):
    """The broker settings the feature levels are read from (a BrokerConfig)."""

    def get(self, name: str) -> Any: ...


@dataclass(frozen=True, slots=True)
class FeatureRange:
    name: str
    min_version: int
    max_version: int


SUPPORTED: tuple[FeatureRange, ...] = (
    FeatureRange(METADATA_VERSION, METADATA_VERSION_LEVEL, METADATA_VERSION_LEVEL),
    FeatureRange("kraft.version", 0, 0),
    FeatureRange("transaction.version", 0, 0),
    FeatureRange("group.version", 0, 1),
    FeatureRange("eligible.leader.replicas.version", 0, 0),
    FeatureRange("share.version", 0, 1),
)


def supported_features(api_version: int) -> list[FeatureRange]:
    """The supported ranges an ApiVersions answer of `api_version` carries."""
    if api_version >= FIRST_VERSION_SHOWING_LEVEL_0:
        return list(SUPPORTED)
    return [f for f in SUPPORTED if f.min_version > 0]


def finalized_features(config: SettingSource) -> dict[str, int]:
    """The levels in force under these settings, level-0 features left out."""
    protocols = {p.strip().lower() for p in config.get("group.coordinator.rebalance.protocols")}
    levels = {
        METADATA_VERSION: METADATA_VERSION_LEVEL,
        "group.version": 1 if "consumer" in protocols else 0,
        "share.version": 1 if config.get("group.share.enable") else 0,
    }
    return {name: level for name, level in levels.items() if level > 0}
