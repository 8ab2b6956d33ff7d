"""Administration over the wire: a small Kafka client and the `kbroker groups` commands.

Everything here talks to brokers as any client would (ApiVersions, Metadata,
FindCoordinator, ...), so the commands work against any Kafka-compatible cluster and need
nothing beyond the broker's own dependencies.
"""
