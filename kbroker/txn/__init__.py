"""Transactions: the transaction coordinator, its `__transaction_state` log, markers.

`coordinator` is the state machine of transactional ids (no I/O of its own); `records`
lays out its records; `markers` writes commit/abort markers into partitions; `offsets`
holds transactional offset commits until their transaction ends; `service` ties
them to a running broker and stores the records (through `kbroker.coordinator_runtime.internal_topics`,
as the group coordinator does). The per-partition side (sequences, open and aborted
transactions) is `kbroker.storage.producer_state`.
"""
