"""Share groups (KIP-932): queue semantics over a partition's log.

`partition_state` is the per-record state machine of one share-partition (pure, no
I/O); `group` holds membership and assignment; `coordinator` joins them with timers,
share sessions and the `__share_group_state` log; `service` hosts it in the broker.
"""
