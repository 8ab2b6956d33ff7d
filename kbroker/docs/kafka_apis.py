"""Kafka 4.3's API keys and request versions, the yardstick of docs/compatibility.md.

Taken from Kafka 4.3.0 (kafka-clients-4.3.0.jar, commit a9ce3221537b8653): its
``ApiMessageType`` carries, for every API key, the ``validVersions`` of
clients/src/main/resources/common/message/<Name>Request.json in apache/kafka at 4.3,
whether the newest of them is still unstable (not advertised by default), and which
listeners serve it (BROKER: a broker's client listeners; CONTROLLER: the KRaft
controllers' own). ``scripts/KafkaApiRanges.java`` prints them again from a jar.
Keys Kafka 4 removed (the ZooKeeper-era LeaderAndIsr, StopReplica, UpdateMetadata and
ControlledShutdown) have no versions and no listener.
"""

from __future__ import annotations

from dataclasses import dataclass

KAFKA_VERSION = "4.3.0"


@dataclass(frozen=True, slots=True)
class KafkaApi:
    key: int
    name: str
    min_version: int
    max_version: int  # -1: removed
    max_stable_version: int
    listeners: tuple[str, ...]

    @property
    def removed(self) -> bool:
        return self.max_version < 0


KAFKA_APIS: tuple[KafkaApi, ...] = (
    KafkaApi(0, "Produce", 3, 13, 13, ("BROKER",)),
    KafkaApi(1, "Fetch", 4, 18, 18, ("BROKER", "CONTROLLER")),
    KafkaApi(2, "ListOffsets", 1, 11, 11, ("BROKER",)),
    KafkaApi(3, "Metadata", 0, 13, 13, ("BROKER",)),
    KafkaApi(4, "LeaderAndIsr", 0, -1, -1, ()),
    KafkaApi(5, "StopReplica", 0, -1, -1, ()),
    KafkaApi(6, "UpdateMetadata", 0, -1, -1, ()),
    KafkaApi(7, "ControlledShutdown", 0, -1, -1, ()),
    KafkaApi(8, "OffsetCommit", 2, 10, 10, ("BROKER",)),
    KafkaApi(9, "OffsetFetch", 1, 10, 10, ("BROKER",)),
    KafkaApi(10, "FindCoordinator", 0, 6, 6, ("BROKER",)),
    KafkaApi(11, "JoinGroup", 0, 9, 9, ("BROKER",)),
    KafkaApi(12, "Heartbeat", 0, 4, 4, ("BROKER",)),
    KafkaApi(13, "LeaveGroup", 0, 5, 5, ("BROKER",)),
    KafkaApi(14, "SyncGroup", 0, 5, 5, ("BROKER",)),
    KafkaApi(15, "DescribeGroups", 0, 6, 6, ("BROKER",)),
    KafkaApi(16, "ListGroups", 0, 5, 5, ("BROKER",)),
    KafkaApi(17, "SaslHandshake", 0, 1, 1, ("BROKER", "CONTROLLER")),
    KafkaApi(18, "ApiVersions", 0, 4, 4, ("BROKER", "CONTROLLER")),
    KafkaApi(19, "CreateTopics", 2, 7, 7, ("BROKER", "CONTROLLER")),
    KafkaApi(20, "DeleteTopics", 1, 6, 6, ("BROKER", "CONTROLLER")),
    KafkaApi(21, "DeleteRecords", 0, 2, 2, ("BROKER",)),
    KafkaApi(22, "InitProducerId", 0, 6, 5, ("BROKER",)),
    KafkaApi(23, "OffsetForLeaderEpoch", 2, 4, 4, ("BROKER",)),
    KafkaApi(24, "AddPartitionsToTxn", 0, 5, 5, ("BROKER",)),
    KafkaApi(25, "AddOffsetsToTxn", 0, 4, 4, ("BROKER",)),
    KafkaApi(26, "EndTxn", 0, 5, 5, ("BROKER",)),
    KafkaApi(27, "WriteTxnMarkers", 1, 2, 2, ("BROKER",)),
    KafkaApi(28, "TxnOffsetCommit", 0, 5, 5, ("BROKER",)),
    KafkaApi(29, "DescribeAcls", 1, 3, 3, ("BROKER", "CONTROLLER")),
    KafkaApi(30, "CreateAcls", 1, 3, 3, ("BROKER", "CONTROLLER")),
    KafkaApi(31, "DeleteAcls", 1, 3, 3, ("BROKER", "CONTROLLER")),
    KafkaApi(32, "DescribeConfigs", 1, 4, 4, ("BROKER", "CONTROLLER")),
    KafkaApi(33, "AlterConfigs", 0, 2, 2, ("BROKER", "CONTROLLER")),
    KafkaApi(34, "AlterReplicaLogDirs", 1, 2, 2, ("BROKER",)),
    KafkaApi(35, "DescribeLogDirs", 1, 5, 5, ("BROKER",)),
    KafkaApi(36, "SaslAuthenticate", 0, 2, 2, ("BROKER", "CONTROLLER")),
    KafkaApi(37, "CreatePartitions", 0, 3, 3, ("BROKER", "CONTROLLER")),
    KafkaApi(38, "CreateDelegationToken", 1, 3, 3, ("BROKER", "CONTROLLER")),
    KafkaApi(39, "RenewDelegationToken", 1, 2, 2, ("BROKER", "CONTROLLER")),
    KafkaApi(40, "ExpireDelegationToken", 1, 2, 2, ("BROKER", "CONTROLLER")),
    KafkaApi(41, "DescribeDelegationToken", 1, 3, 3, ("BROKER", "CONTROLLER")),
    KafkaApi(42, "DeleteGroups", 0, 2, 2, ("BROKER",)),
    KafkaApi(43, "ElectLeaders", 0, 2, 2, ("BROKER", "CONTROLLER")),
    KafkaApi(44, "IncrementalAlterConfigs", 0, 1, 1, ("BROKER", "CONTROLLER")),
    KafkaApi(45, "AlterPartitionReassignments", 0, 1, 1, ("BROKER", "CONTROLLER")),
    KafkaApi(46, "ListPartitionReassignments", 0, 0, 0, ("BROKER", "CONTROLLER")),
    KafkaApi(47, "OffsetDelete", 0, 0, 0, ("BROKER",)),
    KafkaApi(48, "DescribeClientQuotas", 0, 1, 1, ("BROKER",)),
    KafkaApi(49, "AlterClientQuotas", 0, 1, 1, ("BROKER", "CONTROLLER")),
    KafkaApi(50, "DescribeUserScramCredentials", 0, 0, 0, ("BROKER", "CONTROLLER")),
    KafkaApi(51, "AlterUserScramCredentials", 0, 0, 0, ("BROKER", "CONTROLLER")),
    KafkaApi(52, "Vote", 0, 2, 2, ("CONTROLLER",)),
    KafkaApi(53, "BeginQuorumEpoch", 0, 1, 1, ("CONTROLLER",)),
    KafkaApi(54, "EndQuorumEpoch", 0, 1, 1, ("CONTROLLER",)),
    KafkaApi(55, "DescribeQuorum", 0, 2, 2, ("BROKER", "CONTROLLER")),
    KafkaApi(56, "AlterPartition", 2, 3, 3, ("CONTROLLER",)),
    KafkaApi(57, "UpdateFeatures", 0, 2, 2, ("BROKER", "CONTROLLER")),
    KafkaApi(58, "Envelope", 0, 0, 0, ("CONTROLLER",)),
    KafkaApi(59, "FetchSnapshot", 0, 1, 1, ("CONTROLLER",)),
    KafkaApi(60, "DescribeCluster", 0, 2, 2, ("BROKER", "CONTROLLER")),
    KafkaApi(61, "DescribeProducers", 0, 0, 0, ("BROKER",)),
    KafkaApi(62, "BrokerRegistration", 0, 4, 4, ("CONTROLLER",)),
    KafkaApi(63, "BrokerHeartbeat", 0, 2, 2, ("CONTROLLER",)),
    KafkaApi(64, "UnregisterBroker", 0, 0, 0, ("BROKER", "CONTROLLER")),
    KafkaApi(65, "DescribeTransactions", 0, 0, 0, ("BROKER",)),
    KafkaApi(66, "ListTransactions", 0, 2, 2, ("BROKER",)),
    KafkaApi(67, "AllocateProducerIds", 0, 0, 0, ("CONTROLLER",)),
    KafkaApi(68, "ConsumerGroupHeartbeat", 0, 1, 1, ("BROKER",)),
    KafkaApi(69, "ConsumerGroupDescribe", 0, 1, 1, ("BROKER",)),
    KafkaApi(70, "ControllerRegistration", 0, 0, 0, ("CONTROLLER",)),
    KafkaApi(71, "GetTelemetrySubscriptions", 0, 0, 0, ("BROKER",)),
    KafkaApi(72, "PushTelemetry", 0, 0, 0, ("BROKER",)),
    KafkaApi(73, "AssignReplicasToDirs", 0, 0, 0, ("CONTROLLER",)),
    KafkaApi(74, "ListConfigResources", 0, 1, 1, ("BROKER",)),
    KafkaApi(75, "DescribeTopicPartitions", 0, 0, 0, ("BROKER",)),
    KafkaApi(76, "ShareGroupHeartbeat", 1, 1, 1, ("BROKER",)),
    KafkaApi(77, "ShareGroupDescribe", 1, 1, 1, ("BROKER",)),
    KafkaApi(78, "ShareFetch", 1, 2, 2, ("BROKER",)),
    KafkaApi(79, "ShareAcknowledge", 1, 2, 2, ("BROKER",)),
    KafkaApi(80, "AddRaftVoter", 0, 1, 1, ("BROKER", "CONTROLLER")),
    KafkaApi(81, "RemoveRaftVoter", 0, 0, 0, ("BROKER", "CONTROLLER")),
    KafkaApi(82, "UpdateRaftVoter", 0, 0, 0, ("CONTROLLER",)),
    KafkaApi(83, "InitializeShareGroupState", 0, 0, 0, ("BROKER",)),
    KafkaApi(84, "ReadShareGroupState", 0, 0, 0, ("BROKER",)),
    KafkaApi(85, "WriteShareGroupState", 0, 1, 1, ("BROKER",)),
    KafkaApi(86, "DeleteShareGroupState", 0, 0, 0, ("BROKER",)),
    KafkaApi(87, "ReadShareGroupStateSummary", 0, 1, 1, ("BROKER",)),
    KafkaApi(88, "StreamsGroupHeartbeat", 0, 0, 0, ("BROKER",)),
    KafkaApi(89, "StreamsGroupDescribe", 0, 0, 0, ("BROKER",)),
    KafkaApi(90, "DescribeShareGroupOffsets", 0, 1, 1, ("BROKER",)),
    KafkaApi(91, "AlterShareGroupOffsets", 0, 0, 0, ("BROKER",)),
    KafkaApi(92, "DeleteShareGroupOffsets", 0, 0, 0, ("BROKER",)),
)
