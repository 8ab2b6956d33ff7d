"""A Confluent-compatible Schema Registry served by every node, over the `_schemas` topic."""
