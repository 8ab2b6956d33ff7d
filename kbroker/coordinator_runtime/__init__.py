"""The runtime every coordinator shares (Kafka's coordinator-common CoordinatorRuntime):
placing a coordinator's state on the partitions of its internal topic, loading them when
this broker becomes their leader, and writing its records through the replica manager
(`internal_topics`). The group, transaction and share coordinators and the schema
registry sit above it; the replica layer below."""
