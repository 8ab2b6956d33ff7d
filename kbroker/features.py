"""The KIP-584 feature levels this broker supports and the ones in force (KIP-778, KIP-1022).

ApiVersions v3+ carries them; `Admin.describeFeatures` and `kafka-features.sh describe`
read them there, and a Java producer 4.x reads `transaction.version` there to decide
whether to speak KIP-890 part 2 (an epoch bump per transaction). UpdateFeatures (API 57,
`kafka-features.sh upgrade|downgrade`) changes the levels kbroker can run at, recorded in
the metadata log. So the table claims only what kbroker does:

- `metadata.version` 29 (4.2-IV1): the APIs served are Kafka 4.2's. kbroker cannot run at
  an older level, so the range is that one level, and it is always finalized.
- `group.version` 0-1: 1 is the KIP-848 consumer protocol, in force unless
  `group.coordinator.rebalance.protocols` leaves out `consumer`.
- `share.version` 0-1: 1 is KIP-932 share groups, in force while `group.share.enable`.
  Both follow their settings, which every broker of a cluster shares; UpdateFeatures
  accepts for them only the level the settings give.
- `streams.version` 0-1: 1 is the KIP-1071 streams rebalance protocol, in force unless
  `group.coordinator.rebalance.protocols` leaves out `streams`.
- `eligible.leader.replicas.version` 0-1: 1 keeps Eligible Leader Replicas (KIP-966).
  A new cluster starts at 1, as Kafka 4.1+ formats one; UpdateFeatures moves it (a
  downgrade needs the SAFE_DOWNGRADE or UNSAFE_DOWNGRADE upgrade type, as on Kafka).
- `transaction.version` 0-2: 1 writes the transaction log's values in Kafka's flexible
  format (value version 1); 2 is KIP-890 part 2, read by clients: a Java producer 4.x
  then adds no partitions itself (the leader of a partition its Produce v12+ writes, and
  the group coordinator its TxnOffsetCommit v5 reaches, add them) and each EndTxn v5
  bumps its epoch. A new cluster starts at 2, as Kafka 4.x formats one; UpdateFeatures
  moves it either way (a downgrade with SAFE_DOWNGRADE or UNSAFE_DOWNGRADE). Clients
  already running keep the version they started with, as on Kafka.
- `kraft.version` 0 only (a static `controller.quorum.voters`, no KIP-853 reconfiguration).

As on Kafka, a finalized level 0 is left out, and features whose minimum is 0 are left out
of an ApiVersions answer below v4 (KAFKA-17011: older clients refuse a minimum of 0).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kbroker.config import BrokerConfig

METADATA_VERSION = "metadata.version"
METADATA_VERSION_LEVEL = 29  # 4.2-IV1
FIRST_VERSION_SHOWING_LEVEL_0 = 4  # ApiVersions v4 (KAFKA-17011)
ELR = "eligible.leader.replicas.version"
KRAFT_VERSION = "kraft.version"
TRANSACTION_VERSION = "transaction.version"

# FeatureUpdateKey.upgrade_type (UpdateFeatures v1+)
UNKNOWN_UPGRADE, UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 0, 1, 2, 3


@dataclass(frozen=True, slots=True)
class FeatureRange:
    name: str
    min_version: int
    max_version: int


SUPPORTED: tuple[FeatureRange, ...] = (
    FeatureRange(METADATA_VERSION, METADATA_VERSION_LEVEL, METADATA_VERSION_LEVEL),
    # 0: static voters (controller.quorum.voters); 1: voters kept in the metadata log
    # (KIP-853), finalized when a dynamic quorum's cluster is created.
    FeatureRange(KRAFT_VERSION, 0, 1),
    FeatureRange(TRANSACTION_VERSION, 0, 2),
    FeatureRange("group.version", 0, 1),
    FeatureRange(ELR, 0, 1),
    FeatureRange("share.version", 0, 1),
    FeatureRange("streams.version", 0, 1),
)
_BY_NAME = {f.name: f for f in SUPPORTED}
_FROM_SETTINGS = {
    "group.version": "group.coordinator.rebalance.protocols",
    "share.version": "group.share.enable",
    "streams.version": "group.coordinator.rebalance.protocols",
}


def supported_features(api_version: int) -> list[FeatureRange]:
    """The supported ranges an ApiVersions answer of `api_version` carries."""
    if api_version >= FIRST_VERSION_SHOWING_LEVEL_0:
        return list(SUPPORTED)
    return [f for f in SUPPORTED if f.min_version > 0]


def _from_settings(config: BrokerConfig) -> dict[str, int]:
    protocols = {p.strip().lower() for p in config.group_coordinator_rebalance_protocols}
    return {
        METADATA_VERSION: METADATA_VERSION_LEVEL,
        "group.version": 1 if "consumer" in protocols else 0,
        "share.version": 1 if config.group_share_enable else 0,
        "streams.version": 1 if "streams" in protocols else 0,
    }


def finalized_features(
    config: BrokerConfig, recorded: Mapping[str, int] | None = None
) -> dict[str, int]:
    """The levels in force: those the settings give, then those the metadata records
    (UpdateFeatures, a new cluster's); level-0 features left out."""
    levels = {**(recorded or {}), **_from_settings(config)}
    return {name: level for name, level in sorted(levels.items()) if level > 0}


def _range_text(supported: FeatureRange) -> str:
    return f"[{supported.min_version}-{supported.max_version}]"


def update_refusal(
    config: BrokerConfig,
    recorded: Mapping[str, int],
    name: str,
    level: int,
    upgrade_type: int,
    node_id: int,
) -> str | None:
    """Why UpdateFeatures may not finalize `name` at `level` (Kafka's
    FeatureControlManager messages, INVALID_UPDATE_VERSION), None when it may."""

    def invalid(reason: str) -> str:
        return f"Invalid update version {level} for feature {name}. {reason}"

    if upgrade_type not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        return invalid("The controller does not support the given upgrade type.")
    current = finalized_features(config, recorded).get(name, 0)
    if level < 0:
        return invalid("A feature version cannot be less than 0.")
    supported = _BY_NAME.get(name)
    if supported is None or supported.max_version == 0 and level != 0:
        return invalid(f"Local controller {node_id} does not support this feature.")
    if not supported.min_version <= level <= supported.max_version:
        return invalid(
            f"Local controller {node_id} only supports versions {_range_text(supported)}"
        )
    if level < current and upgrade_type == UPGRADE:
        return invalid(
            "Can't downgrade the version of this feature without setting the upgrade type "
            "to either safe or unsafe downgrade."
        )
    if level > current and upgrade_type != UPGRADE:
        return invalid("Can't downgrade to a newer version.")
    if name == KRAFT_VERSION and level != current:
        return invalid(
            f"Local controller {node_id} does not support this feature's change: kbroker "
            "sets kraft.version when the cluster is created (1 for a dynamic quorum formatted "
            "with kbroker format, else 0) and never changes it."
        )
    setting = _FROM_SETTINGS.get(name)
    if setting is not None and level != current:
        return invalid(
            f"kbroker runs this feature at the level {setting} gives ({current}); "
            "change that setting on every broker instead."
        )
    return None
