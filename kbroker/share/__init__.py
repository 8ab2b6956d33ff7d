"""Share groups (KIP-932): queue semantics over a partition's log, in Kafka's parts.

`partition` is the share-partition leader (share sessions, acquisition locks, delivery
counts: the in-flight state of the share-partitions a broker leads, each a
`partition_state.SharePartitionState`, pure, no I/O); `state_store` is the share
coordinator's `__share_group_state` (what Read/WriteShareGroupState read and write) and
`persister` the leaders' client of it; membership and assignment are the group
coordinator's (kbroker.coordinator.share_membership). `coordinator` joins the three with
the group configs and the clock, and `service` hosts it in the broker.
"""
