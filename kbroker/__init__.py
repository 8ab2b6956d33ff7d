"""kbroker: a Kafka-wire-compatible message broker."""

__version__ = "0.1.0"
