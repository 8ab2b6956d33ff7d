"""Request handlers: thin functions joining decoded requests to storage and the controller.

Importing this package registers every handler in `registry.APIS`.
"""

from kbroker.handlers import (  # noqa: F401
    acls,
    api_versions,
    cluster,
    configs,
    consumer_groups,
    delegation_tokens,
    elections,
    features,
    fetch,
    groups,
    leader_epoch,
    list_offsets,
    log_dirs,
    metadata,
    produce,
    producers,
    quorum,
    quotas,
    reassignments,
    records,
    sasl,
    scram,
    share_groups,
    share_state,
    streams_groups,
    telemetry,
    topics,
    transactions,
)
