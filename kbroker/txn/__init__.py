"""Transactions: the transaction coordinator, its `__transaction_state` log, markers.

`coordinator` is the state machine of transactional ids (no I/O of its own); `log`
stores its records; `markers` writes commit/abort markers into partitions; `offsets`
holds transactional offset commits until their transaction ends; `service` ties
them to a running broker. The per-partition side (sequences, open and aborted
transactions) is `kbroker.storage.producer_state`.
"""
