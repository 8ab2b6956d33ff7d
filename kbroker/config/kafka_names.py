"""Kafka 4.3's broker settings that kbroker does not have, by name: those Kafka changes
at run time (AlterConfigs on a BROKER resource) and those it does not.

A name kbroker does not know is otherwise stored when an operator sets it dynamically,
as Kafka stores a custom name for a plugin to read. A name of Kafka's own is no plugin's:
set on kbroker it would be stored and do nothing. So AlterConfigs refuses it, with
Kafka's message for a read-only one and with its own for one kbroker does not apply
(kbroker.config.broker.refuse_unapplied_kafka_names). Taken from the DescribeConfigs
answer of a Kafka 4.3.1 broker (every setting, with its read-only flag), less the names
kbroker's settings table has.
"""

from __future__ import annotations

KAFKA_DYNAMIC_NOT_APPLIED: frozenset[str] = frozenset(
    {
        "config.providers",
        "cordoned.log.dirs",
        "follower.fetch.last.tiered.offset.enable",
        "group.consumer.assignment.interval.ms",
        "group.coordinator.cached.buffer.max.bytes",
        "group.share.assignment.interval.ms",
        "max.connection.creation.rate",
        "metric.reporters",
        "principal.builder.class",
        "remote.fetch.max.wait.ms",
        "remote.list.offsets.request.timeout.ms",
        "remote.log.index.file.cache.total.size.bytes",
        "remote.log.manager.copier.thread.pool.size",
        "remote.log.manager.copy.max.bytes.per.second",
        "remote.log.manager.expiration.thread.pool.size",
        "remote.log.manager.fetch.max.bytes.per.second",
        "remote.log.manager.follower.thread.pool.size",
        "remote.log.reader.threads",
        "share.coordinator.cached.buffer.max.bytes",
        "ssl.engine.factory.class",
        "ssl.keymanager.algorithm",
        "ssl.keystore.password",
        "ssl.provider",
        "ssl.secure.random.implementation",
        "ssl.trustmanager.algorithm",
        "ssl.truststore.password",
    }
)
"""Dynamic on Kafka 4.3; kbroker has no such behaviour (no plugin, no tiered storage, no
SSL provider of Java's...), so setting one would promise what nothing does. (Kerberos and
login-refresh settings are in kbroker's table, inert: they do nothing on a Kafka broker
without GSSAPI or OAUTHBEARER either.)"""

KAFKA_READ_ONLY_UNKNOWN: frozenset[str] = frozenset(
    {
        "alter.config.policy.class.name",
        "alter.log.dirs.replication.quota.window.num",
        "alter.log.dirs.replication.quota.window.size.seconds",
        "client.quota.callback.class",
        "controller.quorum.append.linger.ms",
        "controller.quorum.auto.join.enable",
        "controller.quorum.election.backoff.max.ms",
        "controller.quorum.fetch.max.bytes",
        "controller.quorum.fetch.snapshot.max.bytes",
        "controller.quorum.request.timeout.ms",
        "controller.quorum.retry.backoff.ms",
        "controller.quota.window.num",
        "controller.quota.window.size.seconds",
        "controller.socket.timeout.ms",
        "create.topic.policy.class.name",
        "delete.records.purgatory.purge.interval.requests",
        "early.start.listeners",
        "group.consumer.max.assignment.interval.ms",
        "group.consumer.min.assignment.interval.ms",
        "group.coordinator.append.linger.ms",
        "group.coordinator.background.threads",
        "group.coordinator.threads",
        "group.share.assignors",
        "group.share.max.assignment.interval.ms",
        "group.share.min.assignment.interval.ms",
        "kafka.metrics.polling.interval.secs",
        "kafka.metrics.reporters",
        "log.dir.failure.timeout.ms",
        "max.request.partition.size.limit",
        "metadata.log.max.record.bytes.between.snapshots",
        "metadata.log.max.snapshot.interval.ms",
        "metadata.log.segment.bytes",
        "metadata.log.segment.ms",
        "metadata.max.idle.interval.ms",
        "metadata.max.retention.bytes",
        "metadata.max.retention.ms",
        "metrics.num.samples",
        "metrics.recording.level",
        "metrics.sample.window.ms",
        "remote.log.manager.copy.quota.window.num",
        "remote.log.manager.copy.quota.window.size.seconds",
        "remote.log.manager.fetch.quota.window.num",
        "remote.log.manager.fetch.quota.window.size.seconds",
        "remote.log.manager.task.interval.ms",
        "remote.log.manager.thread.pool.size",
        "remote.log.metadata.custom.metadata.max.bytes",
        "remote.log.metadata.manager.class.name",
        "remote.log.metadata.manager.class.path",
        "remote.log.metadata.manager.impl.prefix",
        "remote.log.metadata.manager.listener.name",
        "remote.log.reader.max.pending.tasks",
        "remote.log.storage.manager.class.name",
        "remote.log.storage.manager.class.path",
        "remote.log.storage.manager.impl.prefix",
        "request.timeout.ms",
        "sasl.client.callback.handler.class",
        "sasl.login.class",
        "sasl.mechanism.controller.protocol",
        "sasl.oauthbearer.assertion.algorithm",
        "sasl.oauthbearer.assertion.claim.aud",
        "sasl.oauthbearer.assertion.claim.exp.seconds",
        "sasl.oauthbearer.assertion.claim.iss",
        "sasl.oauthbearer.assertion.claim.jti.include",
        "sasl.oauthbearer.assertion.claim.nbf.seconds",
        "sasl.oauthbearer.assertion.claim.sub",
        "sasl.oauthbearer.assertion.file",
        "sasl.oauthbearer.assertion.private.key.file",
        "sasl.oauthbearer.assertion.private.key.passphrase",
        "sasl.oauthbearer.assertion.template.file",
        "sasl.oauthbearer.jwt.retriever.class",
        "sasl.oauthbearer.jwt.validator.class",
        "security.providers",
        "share.coordinator.append.linger.ms",
        "share.coordinator.load.buffer.size",
        "share.coordinator.snapshot.update.records.per.snapshot",
        "share.coordinator.state.topic.compression.codec",
        "share.coordinator.threads",
        "share.coordinator.write.timeout.ms",
        "share.fetch.purgatory.purge.interval.requests",
        "socket.connection.setup.timeout.max.ms",
        "socket.connection.setup.timeout.ms",
        "ssl.allow.dn.changes",
        "ssl.allow.san.changes",
        "transaction.two.phase.commit.enable",
    }
)
"""Read-only on Kafka 4.3 (refused there too: "Cannot update these configs
dynamically")."""
