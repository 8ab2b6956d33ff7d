"""The broker's metrics as Prometheus families, computed when scraped (prometheus-client).

Names follow what Prometheus' JMX exporter makes of Kafka's MBeans, so dashboards and
alerts written for Kafka work unchanged: `kafka.server:type=BrokerTopicMetrics,
name=MessagesInPerSec,topic=T` becomes `kafka_server_brokertopicmetrics_messagesin_total
{topic="T"}` (the all-topics MBean is the same name without the label), RequestMetrics
become `kafka_network_requestmetrics_*{request="Produce"}`, `kafka.log:type=Log,name=Size`
becomes `kafka_log_log_size{topic,partition}`. Consumer lag, which Kafka brokers do not
export, uses kafka_exporter's names (`kafka_consumergroup_lag{consumergroup,topic,
partition}`). kbroker's own `kbroker_*` series stay alongside for what Kafka has no name
for.

The request path only adds to plain counters (kbroker.metrics.counters); this custom
collector reads them, the replica manager and the controller's metadata at scrape time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from kbroker.metrics.counters import RequestCounters
from kbroker.protocol.messages import API_NAMES

if TYPE_CHECKING:
    from kbroker.metrics.broker_view import MeteredBroker

MetricsSource = Callable[[], Iterable[Metric]]
"""What a part of the broker publishes: a callable returning metric families."""


def kafka_request_name(api_key: int) -> str:
    """Kafka's name for an API as its request metrics label it ("Produce", "ApiVersions")."""
    name = API_NAMES.get(api_key)
    if name is None:
        return str(api_key)
    return "".join(word.capitalize() for word in name.split("_"))


def request_time_families() -> list[tuple[str, HistogramMetricFamily]]:
    """Kafka's RequestMetrics time histograms, empty, each with its kind in RequestTimes."""
    return [
        (
            "queue",
            HistogramMetricFamily(
                "kafka_network_requestmetrics_requestqueuetimems",
                "Milliseconds from the read that brought a request to its handler starting, "
                "by API (Kafka's RequestMetrics RequestQueueTimeMs): behind earlier requests "
                "of the same read, or held while its connection was throttled.",
                labels=["request"],
            ),
        ),
        (
            "local",
            HistogramMetricFamily(
                "kafka_network_requestmetrics_localtimems",
                "Milliseconds in the request's handler on the event loop, by API "
                "(Kafka's RequestMetrics LocalTimeMs).",
                labels=["request"],
            ),
        ),
        (
            "remote",
            HistogramMetricFamily(
                "kafka_network_requestmetrics_remotetimems",
                "Milliseconds waiting on others, by API (Kafka's RequestMetrics RemoteTimeMs): "
                "followers' acknowledgements, a parked fetch's data or max wait, a "
                "coordinator's write.",
                labels=["request"],
            ),
        ),
        (
            "send",
            HistogramMetricFamily(
                "kafka_network_requestmetrics_responsesendtimems",
                "Milliseconds from the answer being ready to its bytes handed to the socket, "
                "by API (Kafka's RequestMetrics ResponseSendTimeMs): encoding it, and "
                "waiting for earlier answers on the same connection.",
                labels=["request"],
            ),
        ),
        (
            "total",
            HistogramMetricFamily(
                "kafka_network_requestmetrics_totaltimems",
                "Milliseconds from the read that brought a request to its answer written, by "
                "API (Kafka's RequestMetrics TotalTimeMs): the sum of the other four.",
                labels=["request"],
            ),
        ),
    ]


class BrokerCollector:
    """Everything one broker exports; one per broker (tests run several in a process)."""

    def __init__(self, broker: MeteredBroker) -> None:
        self.broker = broker

    def collect(self) -> Iterator[Metric]:
        broker = self.broker
        yield from self._requests(broker.counters)
        yield from self._topics(broker)
        yield from self._partitions(broker)
        yield from self._kbroker(broker)
        for source in list(broker.extra_metrics):
            yield from source()

    def _requests(self, counters: RequestCounters) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "kafka_network_requestmetrics_requests",
            "Requests received, by API (Kafka's RequestMetrics RequestsPerSec).",
            labels=["request"],
        )
        for key, n in sorted(counters.requests.items()):
            requests.add_metric([kafka_request_name(key)], n)
        yield requests
        for kind, family in request_time_families():
            for key, times in sorted(counters.times.items()):
                histogram = times.histogram(kind)
                family.add_metric(
                    [kafka_request_name(key)], histogram.buckets(), histogram.total_ms
                )
            yield family

    def _topics(self, broker: MeteredBroker) -> Iterator[Metric]:
        counters = broker.counters
        existing = broker.controller.state.topics
        for gone in [t for t in counters.topics if t not in existing]:
            del counters.topics[gone]  # a deleted topic's series end with it
        families = {
            "messages_in": CounterMetricFamily(
                "kafka_server_brokertopicmetrics_messagesin",
                "Records appended by producers, by topic and in all (MessagesInPerSec).",
                labels=["topic"],
            ),
            "bytes_in": CounterMetricFamily(
                "kafka_server_brokertopicmetrics_bytesin",
                "Record batch bytes appended by producers, by topic and in all (BytesInPerSec).",
                labels=["topic"],
            ),
            "bytes_out": CounterMetricFamily(
                "kafka_server_brokertopicmetrics_bytesout",
                "Record batch bytes sent to consumers, by topic and in all (BytesOutPerSec).",
                labels=["topic"],
            ),
        }
        for attribute, family in families.items():
            # The all-topics MBean has no topic label; as with the JMX exporter, sum
            # either the labelled series or the unlabelled one, not both.
            total = sum(getattr(t, attribute) for t in counters.topics.values())
            family.add_sample(family.name + "_total", {}, total)
            for name, topic in sorted(counters.topics.items()):
                family.add_metric([name], getattr(topic, attribute))
            yield family

    def _partitions(self, broker: MeteredBroker) -> Iterator[Metric]:
        node = broker.node_id
        state = broker.controller.state
        size = GaugeMetricFamily(
            "kafka_log_log_size", "Bytes on disk, by partition.", labels=["topic", "partition"]
        )
        end = GaugeMetricFamily(
            "kafka_log_log_logendoffset",
            "Next offset to be written, by partition.",
            labels=["topic", "partition"],
        )
        start = GaugeMetricFamily(
            "kafka_log_log_logstartoffset",
            "First offset kept, by partition.",
            labels=["topic", "partition"],
        )
        leaders = under_min_isr = 0
        for (topic, partition), replica in sorted(broker.replicas.hosted.items()):
            labels = [topic, str(partition)]
            plog = replica.log
            size.add_metric(labels, plog.size_bytes())
            end.add_metric(labels, plog.log_end_offset)
            start.add_metric(labels, plog.log_start_offset)
            if replica.is_leader:
                leaders += 1
                if len(replica.isr) < replica.min_insync_replicas:
                    under_min_isr += 1
        yield from (size, end, start)
        under = offline = reassigning = 0
        for info in state.topics.values():
            for p in info.partitions:
                if p.leader == node and p.is_reassigning:
                    reassigning += 1
                if p.leader < 0:
                    offline += 1
                # A move in flight counts against the replicas it started with, as in
                # Kafka: the adding replicas are not yet expected in the ISR.
                elif p.leader == node and len(p.isr) < len(p.replicas) - len(p.adding):
                    under += 1
        yield GaugeMetricFamily(
            "kafka_log_logmanager_offlinelogdirectorycount",
            "Log directories an I/O error was met in (Kafka's OfflineLogDirectoryCount).",
            value=len(broker.logs.offline_dirs),
        )
        yield GaugeMetricFamily(
            "kbroker_partition_logs_failed",
            "Partitions assigned here whose logs could not be made or opened (offline here).",
            value=len(broker.logs.failed),
        )
        yield GaugeMetricFamily(
            "kafka_server_replicamanager_partitioncount",
            "Partitions this broker holds a replica of.",
            value=len(broker.replicas.hosted),
        )
        yield GaugeMetricFamily(
            "kafka_server_replicamanager_leadercount",
            "Partitions this broker leads.",
            value=leaders,
        )
        yield GaugeMetricFamily(
            "kafka_server_replicamanager_underreplicatedpartitions",
            "Partitions this broker leads whose ISR is smaller than their replica set.",
            value=under,
        )
        yield GaugeMetricFamily(
            "kafka_server_replicamanager_underminisrpartitioncount",
            "Partitions this broker leads whose ISR is smaller than min.insync.replicas, "
            "so producers with acks=all are refused (UnderMinIsrPartitionCount).",
            value=under_min_isr,
        )
        lag = GaugeMetricFamily(
            "kafka_server_fetcherlagmetrics_consumerlag",
            "Offsets a followed partition is behind its leader's high watermark (ConsumerLag).",
            labels=["clientId", "topic", "partition"],
        )
        fetchers = broker.replicas.fetchers
        lags = fetchers.lags() if fetchers is not None else {}
        for (topic, partition), behind in sorted(lags.items()):
            lag.add_metric(["Replica", topic, str(partition)], behind)
        yield lag
        max_lag = GaugeMetricFamily(
            "kafka_server_replicafetchermanager_maxlag",
            "The largest lag of any partition this broker follows (MaxLag).",
            labels=["clientId"],
        )
        max_lag.add_metric(["Replica"], max(lags.values(), default=0))
        yield max_lag
        isr = broker.replicas.isr_changes_seen
        yield CounterMetricFamily(
            "kafka_server_replicamanager_isrshrinks",
            "ISR shrinks of partitions this broker leads (IsrShrinksPerSec).",
            value=isr.shrinks,
        )
        yield CounterMetricFamily(
            "kafka_server_replicamanager_isrexpands",
            "ISR expansions of partitions this broker leads (IsrExpandsPerSec).",
            value=isr.expands,
        )
        yield CounterMetricFamily(
            "kafka_server_replicamanager_failedisrupdates",
            "ISR changes this broker proposed that were not committed (FailedIsrUpdatesPerSec).",
            value=isr.failed_updates,
        )
        yield GaugeMetricFamily(
            "kafka_server_replicamanager_reassigningpartitions",
            "Partitions this broker leads whose replicas are being reassigned.",
            value=reassigning,
        )
        yield GaugeMetricFamily(
            "kafka_controller_kafkacontroller_offlinepartitionscount",
            "Partitions without a leader, cluster-wide.",
            value=offline,
        )
        yield GaugeMetricFamily(
            "kafka_controller_kafkacontroller_activecontrollercount",
            "1 on the broker whose controller leads the metadata quorum.",
            value=1 if state.controller_id == node else 0,
        )

    def _kbroker(self, broker: MeteredBroker) -> Iterator[Metric]:
        counters = broker.counters
        requests = CounterMetricFamily(
            "kbroker_requests", "Requests received, by API.", labels=["api"]
        )
        for key, n in sorted(counters.requests.items()):
            requests.add_metric([API_NAMES.get(key, str(key))], n)
        yield requests
        yield CounterMetricFamily(
            "kbroker_bad_requests",
            "Connections closed over bad input.",
            value=counters.bad_requests,
        )
        yield CounterMetricFamily(
            "kafka_server_socket_server_metrics_successful_authentication",
            "Connections that authenticated with SASL.",
            value=counters.successful_authentications,
        )
        yield CounterMetricFamily(
            "kafka_server_socket_server_metrics_failed_authentication",
            "Connections whose SASL login or client certificate was refused.",
            value=counters.failed_authentications,
        )
        yield CounterMetricFamily(
            "kbroker_tls_handshake_failures",
            "TLS handshakes that failed.",
            value=counters.failed_tls_handshakes,
        )
        network = CounterMetricFamily(
            "kbroker_network_bytes", "Bytes received and sent.", labels=["direction"]
        )
        network.add_metric(["in"], counters.bytes_in)
        network.add_metric(["out"], counters.bytes_out)
        yield network
        yield GaugeMetricFamily(
            "kbroker_connections", "Open client connections.", value=len(broker.connections)
        )
        yield GaugeMetricFamily(
            "kbroker_parked_requests",
            "Fetch and ShareFetch requests waiting for data (Kafka's fetch purgatories).",
            value=broker.waiters.parked_requests(),
        )
        awake = broker.keep_awake
        answers = CounterMetricFamily(
            "kbroker_busy_poll_answers",
            "Answers by whether a request followed within socket.busy.poll.us.",
            labels=["outcome"],
        )
        answers.add_metric(["hit"], awake.hits)
        answers.add_metric(["miss"], awake.misses)
        yield answers
        yield CounterMetricFamily(
            "kbroker_busy_poll_spins", "Busy-polling spells started.", value=awake.spins
        )
        yield CounterMetricFamily(
            "kbroker_produced_bytes",
            "Record bytes appended by producers.",
            value=counters.produced_bytes,
        )
        yield GaugeMetricFamily(
            "kbroker_partitions",
            "Partitions held by this broker.",
            value=len(broker.replicas.hosted),
        )
        end = GaugeMetricFamily(
            "kbroker_log_end_offset",
            "Next offset to be written, by partition.",
            labels=["topic", "partition"],
        )
        start = GaugeMetricFamily(
            "kbroker_log_start_offset",
            "First offset kept, by partition.",
            labels=["topic", "partition"],
        )
        size = GaugeMetricFamily(
            "kbroker_log_size_bytes", "Bytes on disk, by partition.", labels=["topic", "partition"]
        )
        for (topic, partition), replica in sorted(broker.replicas.hosted.items()):
            labels = [topic, str(partition)]
            end.add_metric(labels, replica.log.log_end_offset)
            start.add_metric(labels, replica.log.log_start_offset)
            size.add_metric(labels, replica.log.size_bytes())
        yield from (end, start, size)


def broker_registry(broker: MeteredBroker) -> CollectorRegistry:
    """A registry of this broker's collector and the process's CPU, memory and fds."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(broker))
    ProcessCollector(registry=registry)
    return registry


def render(registry: CollectorRegistry) -> str:
    """The text exposition format (0.0.4) of everything in the registry."""
    return generate_latest(registry).decode()


def render_families(families: Iterable[Metric]) -> str:
    """Families as exposition text (for /metrics, which collects them on the event loop
    and writes them out in a worker thread; for tests and for sources checked alone)."""
    registry = CollectorRegistry(auto_describe=False)

    class _Fixed:
        def collect(self) -> Iterable[Metric]:
            return families

    registry.register(_Fixed())
    return render(registry)
