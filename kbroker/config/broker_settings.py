"""The table of broker settings: Kafka's names, types and defaults, plus kbroker's own.

Defaults follow Kafka 3.9's documentation except where a single-node broker started
with no configuration needs otherwise (listeners on 127.0.0.1, data in ./data, node id
1, internal topics with replication factor 1). Settings a server.properties commonly
carries but kbroker has no use for (thread counts, ZooKeeper, KRaft quorum) are
accepted and reported so copied files load; they change nothing, are marked
``SettingRole.INERT`` and are listed at start-up when set. Settings whose value
is the broker-wide default of a topic config are updatable dynamically
(``read_only=False``), the rest only by restart.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kbroker.config.connection_overrides import parse_ip_overrides
from kbroker.config.listeners import (
    DEFAULT_PROTOCOL_MAP,
    SECURITY_PROTOCOLS,
    parse_address,
    parse_http_listener,
    parse_listeners,
    parse_peer,
    parse_protocol_map,
    parse_registry_listener,
)
from kbroker.config.logger_levels import validate_levels
from kbroker.config.principal_rules import parse_mapping_rules
from kbroker.config.types import (
    DOUBLE_MAX,
    INT_MAX,
    LONG_MAX,
    ConfigDef,
    ConfigType,
    SettingRole,
    UpdateMode,
    Validator,
    at_least,
    between,
    described,
    each_of,
    one_of,
    table,
    valid_values,
)

BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST, CLASS, PASSWORD = (
    ConfigType.BOOLEAN,
    ConfigType.STRING,
    ConfigType.INT,
    ConfigType.SHORT,
    ConfigType.LONG,
    ConfigType.DOUBLE,
    ConfigType.LIST,
    ConfigType.CLASS,
    ConfigType.PASSWORD,
)

COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
CLEANUP_POLICIES = ("compact", "delete")
LOGGING_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
CLIENT_AUTH_MODES = ("none", "requested", "required")
TLS_PROTOCOLS = ("TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3")
INERT, SYNONYM = SettingRole.INERT, SettingRole.SYNONYM
# Kafka 4.0 (KIP-1030): the smallest segment.bytes and log.segment.bytes; smaller segments
# only through the internal topic config internal.segment.bytes (tests).
MIN_SEGMENT_BYTES = 1024 * 1024


# The authorizer.class.name values that mean kbroker's StandardAuthorizer (Kafka's name too).
AUTHORIZER_NAMES = (
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kbroker.security.acl.StandardAuthorizer",
)


def _parsed_by(parser: Any, shape: str) -> Validator:
    """Validate a string setting by running the parser that will later consume it;
    ``shape`` says what it accepts, for the documentation."""

    def check(value: Any) -> None:
        parser(value)

    return described(check, shape)


def _each_parsed_by(parser: Any, shape: str) -> Validator:
    def check(value: Any) -> None:
        for item in value:
            parser(item)

    return described(check, f"a list of {shape}")


def _gzip_level(value: int) -> None:
    if value != -1 and not 1 <= value <= 9:
        raise ValueError("must be -1 or between 1 and 9")


def _message_format_version(value: str) -> None:
    head = value.split("-", 1)[0].split(".")
    if not (2 <= len(head) <= 3 and all(part.isdigit() for part in head)):
        raise ValueError("must be a Kafka version such as 3.0-IV1 or 2.8")


def _no_tiered_storage(value: bool) -> None:
    if value:
        raise ValueError("kbroker has no tiered storage")


def _non_empty_items(value: list[str]) -> None:
    if any(not item for item in value):
        raise ValueError("must not contain empty entries")


# Empty is allowed, as on Kafka 4: no retention and no compaction, the log kept whole.
cleanup_policy_validator = each_of(*CLEANUP_POLICIES)
compression_validator = one_of(*COMPRESSION_TYPES)
timestamp_type_validator = one_of(*TIMESTAMP_TYPES)
gzip_level_validator = described(_gzip_level, "[-1, 1,...,9]")


def _known_authorizer(value: str) -> None:
    if value and value not in AUTHORIZER_NAMES:
        raise ValueError(
            f"kbroker's authorizer is {AUTHORIZER_NAMES[0]} (or {AUTHORIZER_NAMES[1]}); "
            "it will not run without the checks another class would make"
        )


lz4_level_validator = between(1, 17)
zstd_level_validator = between(-131072, 22)
message_format_version_validator = described(
    _message_format_version, "a Kafka version such as 3.0-IV1 or 2.8"
)
no_tiered_storage_validator = described(_no_tiered_storage, "false (no tiered storage)")


def _optional_at_least(minimum: int) -> Validator:
    check = at_least(minimum)

    def optional(value: Any) -> None:
        if value is not None:
            check(value)

    return described(optional, f"unset, or {valid_values(check)}")


def _optional_one_of(*allowed: str) -> Validator:
    """A class-name setting that may be unset, else one of the classes kbroker has."""
    check = one_of(*allowed)

    def optional(value: Any) -> None:
        if value is not None:
            check(value)

    return described(optional, f"unset, or one of {valid_values(check)}")


def _d(
    name: str,
    config_type: ConfigType,
    default: Any,
    documentation: str,
    validator: Validator | None = None,
    *,
    dynamic: bool | UpdateMode = False,
    role: SettingRole = SettingRole.APPLIED,
) -> ConfigDef:
    """One setting; ``dynamic=True`` is Kafka's cluster-wide update mode, ``PER_BROKER``
    one that only a broker's own resource may change."""
    mode = (
        dynamic
        if isinstance(dynamic, UpdateMode)
        else (UpdateMode.CLUSTER_WIDE if dynamic else UpdateMode.READ_ONLY)
    )
    return ConfigDef(
        name,
        config_type,
        default,
        documentation,
        validator,
        read_only=mode is UpdateMode.READ_ONLY,
        role=role,
        update_mode=mode,
    )


def _p(name: str, documentation: str, *, dynamic: UpdateMode | None = None) -> ConfigDef:
    """A secret (Kafka's PASSWORD type): never shown by DescribeConfigs or in logs."""
    mode = dynamic or UpdateMode.READ_ONLY
    return ConfigDef(
        name,
        PASSWORD,
        None,
        documentation,
        None,
        is_sensitive=True,
        read_only=mode is UpdateMode.READ_ONLY,
        update_mode=mode,
    )


BROKER_CONFIG_DEFS: tuple[ConfigDef, ...] = (
    # -- identity and cluster ------------------------------------------------------------
    _d(
        "node.id",
        INT,
        1,
        "Id of this broker in the cluster. broker.id is accepted as a synonym.",
        at_least(0),
    ),
    _d(
        "broker.id",
        INT,
        None,
        "Synonym of node.id kept for ZooKeeper-era configuration files; "
        "when both are set they must agree.",
        at_least(0),
        role=SYNONYM,
    ),
    _d(
        "broker.rack",
        STRING,
        None,
        "Rack of this broker, reported in Metadata responses for rack-aware clients, used "
        "to spread replicas over racks and, with the RackAwareReplicaSelector, to send "
        "consumers of the same rack to this broker's replicas.",
    ),
    _d(
        "replica.selector.class",
        STRING,
        None,
        "Which replica a consumer reads from (KIP-392). Unset or "
        "org.apache.kafka.common.replica.LeaderSelector: the leader. "
        "org.apache.kafka.common.replica.RackAwareReplicaSelector: a leader sends a "
        "consumer whose client.rack matches an in-sync follower's broker.rack (and not the "
        "leader's own) to that follower. Other classes are refused.",
        _optional_one_of(
            "org.apache.kafka.common.replica.LeaderSelector",
            "org.apache.kafka.common.replica.RackAwareReplicaSelector",
        ),
    ),
    _d(
        "cluster.peers",
        LIST,
        [],
        "kbroker's older spelling of controller.quorum.voters (id@host:port of each voter's "
        "Raft address); set only one of the two.",
        _each_parsed_by(parse_peer, "id@host:port"),
        role=SYNONYM,
    ),
    _d(
        "controller.raft.listener",
        STRING,
        None,
        "kbroker's older spelling of the CONTROLLER listener: host:port this voter's Raft "
        "server binds. Unset means the controller listener in listeners, else this node's "
        "entry in controller.quorum.voters; a single node needs no socket at all.",
        _parsed_by(parse_address, "host:port"),
        role=SYNONYM,
    ),
    _d(
        "process.roles",
        LIST,
        [],
        "What this node is: broker, controller, or both. A controller is a voter of the "
        "metadata quorum; a broker-only node follows the quorum as a non-voting observer. "
        "Unset means both (a single node when controller.quorum.voters is unset too). "
        "Every kbroker node serves the Kafka API, so controller alone is refused.",
        each_of("broker", "controller"),
    ),
    _d(
        "controller.quorum.voters",
        LIST,
        [],
        "The voters of the metadata quorum as id@host:port of each one's CONTROLLER listener. "
        "Unset means a single-node cluster.",
        _each_parsed_by(parse_peer, "id@host:port"),
    ),
    _d(
        "controller.quorum.bootstrap.servers",
        LIST,
        [],
        "host:port of the controllers a node finds the quorum through when "
        "controller.quorum.voters is not given. A controller given them (with "
        "cluster.secret) joins a dynamic quorum (KIP-853) whose voters live in the "
        "metadata log: format its metadata directory with kbroker format first. A "
        "controller given one address and no cluster.secret (Kafka 4's shipped file) runs "
        "as a single node.",
        _each_parsed_by(parse_address, "host:port"),
    ),
    _d(
        "controller.listener.names",
        STRING,
        None,
        "Names of the listeners the controller quorum uses (its Raft traffic); they never "
        "serve the Kafka API.",
    ),
    ConfigDef(
        "cluster.secret",
        PASSWORD,
        None,
        "kbroker: shared secret of the controller quorum. pysyncobj authenticates and "
        "encrypts every Raft message with it; a peer without it is disconnected. Required "
        "whenever the quorum uses the network; the same on every node.",
        is_sensitive=True,
    ),
    _d(
        "controller.quorum.election.timeout.ms",
        INT,
        1000,
        "Maximum time without a leader before a voter starts an election; kbroker draws "
        "each election timeout between half of this and this.",
        at_least(10),
    ),
    _d(
        "controller.quorum.fetch.timeout.ms",
        INT,
        2000,
        "Kafka: longest a follower voter waits for the leader; a kbroker voter follows the "
        "election timeout.",
        role=INERT,
    ),
    _d(
        "zookeeper.connect",
        STRING,
        None,
        "ZooKeeper connection of a pre-KRaft broker; kbroker does not use ZooKeeper.",
        role=INERT,
    ),
    _d(
        "zookeeper.connection.timeout.ms",
        INT,
        None,
        "ZooKeeper connection of a pre-KRaft broker; kbroker does not use ZooKeeper.",
        role=INERT,
    ),
    _d(
        "metadata.log.dir",
        STRING,
        None,
        "Directory of the controller's metadata log. Unset means the first log directory. "
        "An I/O error in it halts the node, as in Kafka.",
    ),
    # -- listeners and sockets -----------------------------------------------------------
    _d(
        "listeners",
        STRING,
        "PLAINTEXT://127.0.0.1:9092",
        "Comma-separated NAME://host:port "
        "listeners to accept Kafka clients on, each served with the security protocol "
        "listener.security.protocol.map gives its name. An empty host binds every interface.",
        _parsed_by(parse_listeners, "NAME://host:port, comma-separated"),
    ),
    _d(
        "advertised.listeners",
        STRING,
        None,
        "Listeners published to clients in Metadata when "
        "they differ from listeners. Unset means listeners, with a wildcard host replaced by "
        "this machine's host name.",
    ),
    _d(
        "listener.security.protocol.map",
        STRING,
        DEFAULT_PROTOCOL_MAP,
        "Map from listener name to security protocol, as NAME:PROTOCOL pairs.",
        _parsed_by(parse_protocol_map, "NAME:PROTOCOL, comma-separated"),
    ),
    _d(
        "inter.broker.listener.name",
        STRING,
        None,
        "Listener brokers reach each other on (replica fetches, transaction markers), "
        "with its security protocol: TLS with the listener's ssl.* settings, SASL with "
        "sasl.mechanism.inter.broker.protocol and the username/password of the "
        "listener's JAAS line. Unset means the PLAINTEXT listener, else the first.",
    ),
    _d(
        "security.inter.broker.protocol",
        STRING,
        "PLAINTEXT",
        "Security protocol between brokers (Kafka's older spelling): the inter-broker "
        "listener is the one of that name. Set it or inter.broker.listener.name, not both.",
        one_of(*SECURITY_PROTOCOLS),
    ),
    _d(
        "http.listeners",
        LIST,
        ["http://127.0.0.1:9644"],
        "kbroker: http://host:port addresses "
        "serving /metrics (Prometheus), /health and /ready from the first moment of a "
        "start; one that cannot bind stops the start. Empty disables them.",
        _each_parsed_by(parse_http_listener, "http://host:port"),
    ),
    _d(
        "schema.registry.listeners",
        LIST,
        [],
        "kbroker: http://host:port or https://host:port addresses serving Confluent Schema "
        "Registry's REST API (v1) from this node. Empty (the default) serves none: a "
        "registry is opt-in, so a broker opens no port it was not asked to, and 8081 stays "
        "free for a registry already running beside it. https uses the listener "
        "SCHEMA_REGISTRY's ssl.* settings (listener.name.schema_registry.ssl.*).",
        _each_parsed_by(parse_registry_listener, "http://host:port or https://host:port"),
    ),
    _d(
        "schema.registry.advertised.listener",
        STRING,
        None,
        "kbroker: the URL the other nodes forward registry writes to when this node is "
        "the registry's writer. Unset means the first schema.registry.listeners entry "
        "(with this node's advertised host when that entry binds every address).",
        _parsed_by(parse_registry_listener, "http://host:port or https://host:port"),
    ),
    _d(
        "schema.registry.request.timeout.ms",
        INT,
        30000,
        "kbroker: how long a registry client may take to send a request's head, and again "
        "its body; a slower one is disconnected, so stalled clients hold no connection.",
        at_least(1),
    ),
    _d(
        "schema.registry.authentication.method",
        STRING,
        "NONE",
        "kbroker: NONE; BASIC for HTTP basic authentication of registry requests "
        "against the broker's SASL/PLAIN users (listener JAAS lines) and SCRAM users; or "
        "BEARER for OAuth bearer tokens, checked as an OAUTHBEARER listener named "
        "SCHEMA_REGISTRY would check them (listener.name.schema_registry.oauthbearer.*).",
        one_of("NONE", "BASIC", "BEARER", ignore_case=True),
    ),
    _d(
        "socket.send.buffer.bytes",
        INT,
        102400,
        "SO_SNDBUF of client sockets; -1 keeps the OS default.",
        role=INERT,
    ),
    _d(
        "socket.receive.buffer.bytes",
        INT,
        102400,
        "SO_RCVBUF of client sockets; -1 keeps the OS default.",
        role=INERT,
    ),
    _d(
        "socket.request.max.bytes",
        INT,
        104857600,
        "Largest request a client may send; a larger size prefix closes the connection.",
        at_least(1),
    ),
    _d(
        "socket.busy.poll.us",
        INT,
        200,
        "kbroker: microseconds the event loop keeps polling its sockets after an answer "
        "instead of sleeping, while clients answer within that time (one-at-a-time "
        "producers); 0 never spins.",
        between(0, 10000),
    ),
    _d(
        "socket.listen.backlog.size",
        INT,
        50,
        "Connections the kernel queues for each listener until the broker accepts them.",
        at_least(1),
    ),
    _d(
        "connections.max.idle.ms",
        LONG,
        600000,
        "Idle client connections are closed after this long.",
    ),
    _d(
        "max.connections",
        INT,
        INT_MAX,
        "Most client connections open at once; one over it is closed when accepted. "
        "Connections on the inter-broker listener are exempt (Kafka's KIP-402). "
        "listener.name.<listener>.max.connections caps one listener, the inter-broker one "
        "included.",
        at_least(0),
    ),
    _d(
        "max.connections.per.ip",
        INT,
        INT_MAX,
        "Most connections open from one IP address; one over it is closed when accepted.",
        at_least(0),
    ),
    _d(
        "max.connections.per.ip.overrides",
        STRING,
        "",
        "Per-address exceptions to max.connections.per.ip as host:count pairs, "
        "comma-separated (127.0.0.1:200,client-host:10); a host name is resolved at start.",
        _parsed_by(parse_ip_overrides, "host:count, comma-separated"),
    ),
    _d(
        "queued.max.requests",
        INT,
        500,
        "Requests read ahead of processing before the broker stops reading from sockets.",
        at_least(1),
        role=INERT,
    ),
    _d(
        "queued.max.request.bytes",
        LONG,
        209715200,
        "Bytes of requests being read or handled, across all connections, before the "
        "broker stops reading new requests from sockets (a request already begun is read "
        "whole); -1 means no limit. kbroker's default is 200 MiB, where Kafka's is -1: "
        "without a bound, a few clients sending socket.request.max.bytes each exhaust memory.",
    ),
    _d(
        "num.network.threads",
        INT,
        3,
        "Kafka's network threads; kbroker serves sockets from one event loop.",
        at_least(1),
        role=INERT,
    ),
    _d(
        "num.io.threads",
        INT,
        8,
        "Kafka's request handler threads; kbroker handles requests on its event loop.",
        at_least(1),
        role=INERT,
    ),
    _d("background.threads", INT, 10, "Kafka's background task threads.", at_least(1), role=INERT),
    _d(
        "logging.level",
        STRING,
        "INFO",
        "kbroker: level of the broker's own log: DEBUG, INFO, WARNING, ERROR or CRITICAL.",
        one_of(*LOGGING_LEVELS, ignore_case=True),
    ),
    _d(
        "logging.format",
        STRING,
        "text",
        "kbroker: 'text' for human-readable log lines, 'json' for one JSON object per line.",
        one_of("text", "json"),
    ),
    _d(
        "logging.levels",
        LIST,
        [],
        "kbroker: levels of single loggers over logging.level, as LOGGER=LEVEL items "
        "(kbroker.request=INFO,kbroker.controller=WARNING).",
        described(validate_levels, "LOGGER=LEVEL, comma-separated"),
    ),
    _d(
        "logging.requests.enable",
        BOOLEAN,
        False,
        "kbroker: log every answered request (API, version, correlation id, client, peer, "
        "milliseconds) on the kbroker.request logger at INFO.",
    ),
    # -- topics and the log --------------------------------------------------------------
    _d(
        "log.dirs",
        LIST,
        None,
        "Comma-separated directories holding partition data. Unset means log.dir.",
        described(_non_empty_items, "a list without empty entries"),
    ),
    _d(
        "log.dir",
        STRING,
        "./data",
        "Directory holding partition data when log.dirs is not set.",
        role=SYNONYM,
    ),
    _d("num.partitions", INT, 1, "Partitions of an automatically created topic.", at_least(1)),
    _d(
        "default.replication.factor",
        INT,
        1,
        "Replication factor of automatically created "
        "topics and of CreateTopics requests that leave it to the broker.",
        at_least(1),
    ),
    _d(
        "auto.create.topics.enable",
        BOOLEAN,
        True,
        "Create a topic with the defaults when a client's Metadata request names one that does "
        "not exist; as on Kafka 4 that request is answered UNKNOWN_TOPIC_OR_PARTITION while the "
        "controller creates it, and the client's next one finds it.",
    ),
    _d("delete.topic.enable", BOOLEAN, True, "Allow DeleteTopics."),
    _d(
        "message.max.bytes",
        INT,
        1048588,
        "Largest record batch a topic accepts, after compression. Default of max.message.bytes.",
        at_least(0),
        dynamic=True,
    ),
    _d(
        "log.segment.bytes",
        INT,
        1073741824,
        "Size at which a segment file is rolled. Default of segment.bytes.",
        at_least(MIN_SEGMENT_BYTES),
        dynamic=True,
    ),
    _d(
        "log.roll.ms",
        LONG,
        None,
        "Age at which a segment is rolled even if not full; wins over "
        "log.roll.hours. Default of segment.ms.",
        at_least(1),
        dynamic=True,
    ),
    _d(
        "log.roll.hours",
        INT,
        168,
        "Age in hours at which a segment is rolled when log.roll.ms is not set.",
        at_least(1),
        role=SYNONYM,
    ),
    _d(
        "log.roll.jitter.ms",
        LONG,
        None,
        "Random jitter subtracted from the roll time; wins over "
        "log.roll.jitter.hours. Default of segment.jitter.ms.",
        at_least(0),
        dynamic=True,
    ),
    _d(
        "log.roll.jitter.hours",
        INT,
        0,
        "Roll jitter in hours when log.roll.jitter.ms is not set.",
        at_least(0),
        role=SYNONYM,
    ),
    _d(
        "log.retention.ms",
        LONG,
        None,
        "How long data is kept; -1 keeps it forever. Wins over "
        "log.retention.minutes and log.retention.hours. Default of retention.ms.",
        dynamic=True,
    ),
    _d(
        "log.retention.minutes",
        INT,
        None,
        "Retention in minutes when log.retention.ms is not set; wins over log.retention.hours.",
        role=SYNONYM,
    ),
    _d(
        "log.retention.hours",
        INT,
        168,
        "Retention in hours when neither log.retention.ms nor log.retention.minutes is set.",
        role=SYNONYM,
    ),
    _d(
        "log.retention.bytes",
        LONG,
        -1,
        "Size a partition may grow to before old segments are "
        "deleted; -1 means no limit. Default of retention.bytes.",
        dynamic=True,
    ),
    _d(
        "log.retention.check.interval.ms",
        LONG,
        300000,
        "How often segments are checked for deletion by retention.",
        at_least(1),
    ),
    _d(
        "log.cleanup.policy",
        LIST,
        ["delete"],
        "What happens to old segments: delete, compact, both, or neither (empty: every "
        "segment kept). Default of cleanup.policy.",
        cleanup_policy_validator,
        dynamic=True,
    ),
    _d(
        "log.index.size.max.bytes",
        INT,
        10485760,
        "Largest size of an offset or time index file. Default of segment.index.bytes.",
        at_least(4),
        dynamic=True,
    ),
    _d(
        "log.index.interval.bytes",
        INT,
        4096,
        "Bytes of log between two offset index entries. Default of index.interval.bytes.",
        at_least(0),
        dynamic=True,
    ),
    _d(
        "log.flush.interval.messages",
        LONG,
        LONG_MAX,
        "Messages appended to a partition before it is fsynced. Default of flush.messages.",
        at_least(1),
        dynamic=True,
    ),
    _d(
        "log.flush.interval.ms",
        LONG,
        None,
        "Longest a message stays unflushed; unset means "
        "log.flush.scheduler.interval.ms. Default of flush.ms.",
        at_least(0),
        dynamic=True,
    ),
    _d(
        "log.flush.scheduler.interval.ms",
        LONG,
        LONG_MAX,
        "How often the flusher checks for "
        "partitions due a flush, and the flush interval when log.flush.interval.ms is unset.",
        role=SYNONYM,
    ),
    _d(
        "log.flush.offset.checkpoint.interval.ms",
        INT,
        60000,
        "How often the recovery point checkpoint is written.",
        at_least(0),
        role=INERT,
    ),
    _d(
        "log.flush.start.offset.checkpoint.interval.ms",
        INT,
        60000,
        "How often the log start offset checkpoint is written.",
        at_least(0),
        role=INERT,
    ),
    _d(
        "log.segment.delete.delay.ms",
        LONG,
        60000,
        "Delay before a segment removed from the log "
        "is deleted from disk. Default of file.delete.delay.ms.",
        at_least(0),
        dynamic=True,
    ),
    _d(
        "log.preallocate",
        BOOLEAN,
        False,
        "Allocate the active segment's file ahead of its data (1 MiB at a time, "
        "given back when the segment rolls or the log closes). Default of preallocate.",
        dynamic=True,
    ),
    _d(
        "log.message.format.version",
        STRING,
        "3.0-IV1",
        "Deprecated and ignored: kbroker "
        "stores record batch format v2. Default of message.format.version.",
        message_format_version_validator,
        dynamic=True,
        role=INERT,
    ),
    _d(
        "log.message.timestamp.type",
        STRING,
        "CreateTime",
        "Timestamp kept in stored batches: "
        "the producer's (CreateTime) or the broker's (LogAppendTime). Default of "
        "message.timestamp.type.",
        timestamp_type_validator,
        dynamic=True,
    ),
    _d(
        "log.message.timestamp.difference.max.ms",
        LONG,
        LONG_MAX,
        "Deprecated: see "
        "log.message.timestamp.before.max.ms and log.message.timestamp.after.max.ms.",
        at_least(0),
        dynamic=True,
        role=INERT,
    ),
    _d(
        "log.message.timestamp.before.max.ms",
        LONG,
        LONG_MAX,
        "How far a CreateTime timestamp "
        "may lie before the broker's clock. Default of message.timestamp.before.max.ms.",
        at_least(0),
        dynamic=True,
    ),
    _d(
        "log.message.timestamp.after.max.ms",
        LONG,
        3_600_000,
        "How far a CreateTime timestamp "
        "may lie after the broker's clock. Default of message.timestamp.after.max.ms.",
        at_least(0),
        dynamic=True,
    ),
    _d(
        "log.message.downconversion.enable",
        BOOLEAN,
        True,
        "Whether fetches by old clients may "
        "be down-converted. Default of message.downconversion.enable.",
        dynamic=True,
    ),
    _d(
        "log.local.retention.ms",
        LONG,
        -2,
        "Tiered storage only (unsupported); -2 means "
        "log.retention.ms. Default of local.retention.ms.",
        at_least(-2),
        dynamic=True,
        role=INERT,
    ),
    _d(
        "log.local.retention.bytes",
        LONG,
        -2,
        "Tiered storage only (unsupported); -2 means "
        "log.retention.bytes. Default of local.retention.bytes.",
        at_least(-2),
        dynamic=True,
        role=INERT,
    ),
    _d(
        "remote.log.storage.system.enable",
        BOOLEAN,
        False,
        "Tiered storage; kbroker has none, so only false is accepted.",
        no_tiered_storage_validator,
        role=INERT,
    ),
    _d(
        "num.recovery.threads.per.data.dir",
        INT,
        1,
        "Kafka's threads per log directory for recovery at start; kbroker loads logs on one.",
        at_least(1),
        role=INERT,
    ),
    _d(
        "min.insync.replicas",
        INT,
        1,
        "Fewest in-sync replicas for an acks=all produce to "
        "succeed. Default of the topic config of the same name.",
        at_least(1),
        dynamic=True,
    ),
    _d(
        "unclean.leader.election.enable",
        BOOLEAN,
        False,
        "Allow an out-of-sync replica to "
        "become leader, losing data, when no in-sync replica is left.",
        dynamic=True,
    ),
    _d(
        "unclean.leader.election.interval.ms",
        LONG,
        300000,
        "How often the active controller checks for partitions with no leader whose topic "
        "allows unclean election (unclean.leader.election.enable, the topic's or the "
        "cluster's, set at any time), and elects one of their live replicas.",
        at_least(1),
    ),
    _d(
        "compression.type",
        STRING,
        "producer",
        "Codec batches are stored in (a batch in another is rewritten on append); "
        "'producer' keeps each as sent. Default of the topic config compression.type.",
        compression_validator,
        dynamic=True,
    ),
    _d(
        "compression.gzip.level",
        INT,
        -1,
        "gzip level when compression.type is gzip.",
        gzip_level_validator,
        dynamic=True,
    ),
    _d(
        "compression.lz4.level",
        INT,
        9,
        "lz4 level when compression.type is lz4.",
        lz4_level_validator,
        dynamic=True,
    ),
    _d(
        "compression.zstd.level",
        INT,
        3,
        "zstd level when compression.type is zstd.",
        zstd_level_validator,
        dynamic=True,
    ),
    # -- log cleaner (compaction) --------------------------------------------------------
    _d(
        "log.cleaner.enable",
        BOOLEAN,
        True,
        "Run the log cleaner, which compacts topics with cleanup.policy=compact.",
    ),
    _d("log.cleaner.threads", INT, 1, "Cleaner workers.", at_least(0), dynamic=True),
    _d(
        "log.cleaner.dedupe.buffer.size",
        LONG,
        134217728,
        "Memory for the key-to-offset map of one cleaning pass.",
        dynamic=True,
    ),
    _d(
        "log.cleaner.io.buffer.size",
        INT,
        524288,
        "I/O buffer of the cleaner.",
        at_least(0),
        dynamic=True,
        role=INERT,
    ),
    _d(
        "log.cleaner.io.buffer.load.factor",
        DOUBLE,
        0.9,
        "Fill factor of the cleaner's key map.",
        dynamic=True,
    ),
    _d(
        "log.cleaner.io.max.bytes.per.second",
        DOUBLE,
        DOUBLE_MAX,
        "Throttle on cleaner I/O.",
        dynamic=True,
    ),
    _d(
        "log.cleaner.backoff.ms",
        LONG,
        15000,
        "Sleep when no log needs cleaning.",
        at_least(0),
        dynamic=True,
    ),
    _d(
        "log.cleaner.min.cleanable.ratio",
        DOUBLE,
        0.5,
        "Dirty share of a log at which it is compacted. Default of min.cleanable.dirty.ratio.",
        between(0, 1),
        dynamic=True,
    ),
    _d(
        "log.cleaner.delete.retention.ms",
        LONG,
        86400000,
        "How long tombstones survive compaction. Default of delete.retention.ms.",
        at_least(0),
        dynamic=True,
    ),
    _d(
        "log.cleaner.min.compaction.lag.ms",
        LONG,
        0,
        "Youngest a message may be and still be compacted. Default of min.compaction.lag.ms.",
        at_least(0),
        dynamic=True,
    ),
    _d(
        "log.cleaner.max.compaction.lag.ms",
        LONG,
        LONG_MAX,
        "Oldest an uncompacted message may get. Default of max.compaction.lag.ms.",
        at_least(1),
        dynamic=True,
    ),
    # -- replication and leadership ------------------------------------------------------
    _d(
        "leader.replication.throttled.rate",
        LONG,
        LONG_MAX,
        "Bytes a second this broker sends to followers out of the ISR for the replicas "
        "topics list in leader.replication.throttled.replicas (KIP-73; set by "
        "kafka-reassign-partitions --throttle).",
        at_least(0),
        dynamic=True,
    ),
    _d(
        "follower.replication.throttled.rate",
        LONG,
        LONG_MAX,
        "Bytes a second this broker fetches, while out of the ISR, for the replicas topics "
        "list in follower.replication.throttled.replicas (KIP-73).",
        at_least(0),
        dynamic=True,
    ),
    _d(
        "replica.alter.log.dirs.io.max.bytes.per.second",
        LONG,
        LONG_MAX,
        "Bytes a second this broker's moves of replicas between its log directories "
        "(AlterReplicaLogDirs) copy together, before the last step of each.",
        at_least(0),
        dynamic=True,
    ),
    _d(
        "replication.quota.window.num",
        INT,
        11,
        "Samples the replication throttles' rates are measured over.",
        at_least(1),
    ),
    _d(
        "replication.quota.window.size.seconds",
        INT,
        1,
        "Length of each replication throttle sample.",
        at_least(1),
    ),
    _d(
        "replica.lag.time.max.ms",
        LONG,
        30000,
        "A follower that has not caught up for this long leaves the ISR.",
    ),
    _d(
        "replica.fetch.max.bytes",
        INT,
        1048576,
        "Bytes a follower asks for per partition.",
        at_least(0),
    ),
    _d("replica.fetch.min.bytes", INT, 1, "Bytes a follower's fetch waits for."),
    _d(
        "replica.fetch.wait.max.ms",
        INT,
        500,
        "Longest a follower's fetch waits on the leader.",
    ),
    _d(
        "replica.fetch.backoff.ms",
        INT,
        1000,
        "Pause after a failed follower fetch.",
        at_least(0),
    ),
    _d(
        "replica.fetch.response.max.bytes",
        INT,
        10485760,
        "Bytes a follower asks for per fetch.",
        at_least(0),
    ),
    _d("replica.socket.timeout.ms", INT, 30000, "Socket timeout of follower fetches."),
    _d(
        "replica.socket.receive.buffer.bytes",
        INT,
        65536,
        "SO_RCVBUF of follower connections.",
        role=INERT,
    ),
    _d(
        "replica.high.watermark.checkpoint.interval.ms",
        LONG,
        5000,
        "How often each replicated partition's high watermark is checkpointed to disk "
        "(also on clean shutdown); a restart starts from it, not from the log end.",
        at_least(1),
    ),
    _d("num.replica.fetchers", INT, 1, "Fetcher connections per source broker.", role=INERT),
    _d(
        "num.replica.alter.log.dirs.threads",
        INT,
        None,
        "Threads copying replicas between log directories (AlterReplicaLogDirs); unset "
        "means one per log directory, as on Kafka.",
        _optional_at_least(1),
    ),
    _d(
        "auto.leader.rebalance.enable",
        BOOLEAN,
        True,
        "Every leader.imbalance.check.interval.seconds the active controller gives each "
        "partition back to its preferred (first) replica when that replica is in the ISR "
        "and live but does not lead.",
    ),
    _d(
        "leader.imbalance.check.interval.seconds",
        LONG,
        300,
        "How often leadership balance is checked.",
        at_least(1),
    ),
    _d(
        "leader.imbalance.per.broker.percentage",
        INT,
        10,
        "As on KRaft, any partition away from its preferred leader is rebalanced.",
        role=INERT,
    ),
    _d(
        "broker.heartbeat.interval.ms",
        INT,
        2000,
        "How often a broker heartbeats to the active controller.",
        at_least(1),
    ),
    _d(
        "initial.broker.registration.timeout.ms",
        INT,
        60000,
        "How long after its start a node with a broker part keeps trying to register "
        "with the controller quorum (waiting for a quorum of voters to run, or for an "
        "election) before it gives up and exits. A controller-only node waits for its "
        "quorum without limit.",
        at_least(1),
    ),
    _d(
        "broker.session.timeout.ms",
        INT,
        9000,
        "The active controller fences a broker it has not heard from for this long: its "
        "partitions get new leaders and it leaves every ISR until it heartbeats again.",
        at_least(1),
    ),
    _d(
        "controlled.shutdown.enable",
        BOOLEAN,
        True,
        "On SIGTERM, ask the controller to move this broker's leaderships away first.",
    ),
    _d(
        "fetch.max.bytes",
        INT,
        57671680,
        "Most bytes of one Fetch response, whatever max_bytes it asks for; the first batch "
        "still comes whole.",
        at_least(1024),
    ),
    _d(
        "max.incremental.fetch.session.cache.slots",
        INT,
        1000,
        "Incremental fetch sessions kept per broker.",
        at_least(0),
    ),
    _d(
        "fetch.purgatory.purge.interval.requests",
        INT,
        1000,
        "Kafka's purge interval of its fetch purgatory.",
        role=INERT,
    ),
    _d(
        "producer.purgatory.purge.interval.requests",
        INT,
        1000,
        "Kafka's purge interval of its produce purgatory.",
        role=INERT,
    ),
    # -- consumer groups -----------------------------------------------------------------
    _d(
        "group.initial.rebalance.delay.ms",
        INT,
        3000,
        "Wait for more members before the first rebalance of an empty classic group.",
    ),
    _d(
        "group.min.session.timeout.ms",
        INT,
        6000,
        "Shortest session timeout a classic group member may ask for.",
    ),
    _d(
        "group.max.session.timeout.ms",
        INT,
        1800000,
        "Longest session timeout a classic group member may ask for.",
    ),
    _d("group.max.size", INT, INT_MAX, "Most members of a classic group.", at_least(1)),
    _d(
        "group.coordinator.rebalance.protocols",
        LIST,
        ["classic", "consumer", "streams"],
        "Group protocols served: classic, consumer (KIP-848), streams (KIP-1071), share (KIP-932).",
        each_of("classic", "consumer", "share", "streams", non_empty=True),
    ),
    _d(
        "group.consumer.session.timeout.ms",
        INT,
        45000,
        "Session timeout of consumer-protocol members.",
        at_least(1),
    ),
    _d(
        "group.consumer.min.session.timeout.ms",
        INT,
        45000,
        "Shortest consumer-protocol session timeout.",
        at_least(1),
    ),
    _d(
        "group.consumer.max.session.timeout.ms",
        INT,
        60000,
        "Longest consumer-protocol session timeout.",
        at_least(1),
    ),
    _d(
        "group.consumer.heartbeat.interval.ms",
        INT,
        5000,
        "Heartbeat interval of consumer-protocol members.",
        at_least(1),
    ),
    _d(
        "group.consumer.min.heartbeat.interval.ms",
        INT,
        5000,
        "Shortest consumer-protocol heartbeat interval.",
        at_least(1),
    ),
    _d(
        "group.consumer.max.heartbeat.interval.ms",
        INT,
        15000,
        "Longest consumer-protocol heartbeat interval.",
        at_least(1),
    ),
    _d(
        "group.streams.session.timeout.ms",
        INT,
        45000,
        "Session timeout of streams-protocol members.",
        at_least(1),
    ),
    _d(
        "group.streams.min.session.timeout.ms",
        INT,
        45000,
        "Shortest streams-protocol session timeout.",
        at_least(1),
    ),
    _d(
        "group.streams.max.session.timeout.ms",
        INT,
        60000,
        "Longest streams-protocol session timeout.",
        at_least(1),
    ),
    _d(
        "group.streams.heartbeat.interval.ms",
        INT,
        5000,
        "Heartbeat interval given to streams-protocol members.",
        at_least(1),
    ),
    _d(
        "group.streams.min.heartbeat.interval.ms",
        INT,
        5000,
        "Shortest streams-protocol heartbeat interval.",
        at_least(1),
    ),
    _d(
        "group.streams.max.heartbeat.interval.ms",
        INT,
        15000,
        "Longest streams-protocol heartbeat interval.",
        at_least(1),
    ),
    _d(
        "group.streams.max.size",
        INT,
        INT_MAX,
        "Most members of a streams group.",
        at_least(1),
    ),
    _d(
        "group.streams.num.standby.replicas",
        INT,
        0,
        "Standby tasks the streams assignor gives each task, on processes other than the "
        "active one's.",
        at_least(0),
    ),
    _d(
        "group.streams.max.standby.replicas",
        INT,
        2,
        "Most standby tasks per task a streams group may ask for.",
        at_least(0),
    ),
    _d(
        "group.streams.initial.rebalance.delay.ms",
        INT,
        3000,
        "Kafka: how long a new streams group waits for more members before its first "
        "assignment; kbroker assigns at once and moves tasks as members join.",
        role=INERT,
    ),
    _d(
        "group.streams.assignment.interval.ms",
        INT,
        1000,
        "Kafka: shortest time between two assignments of a streams group; kbroker assigns "
        "on the heartbeat that finds the group epoch ahead.",
        role=INERT,
    ),
    _d(
        "group.streams.min.assignment.interval.ms",
        INT,
        0,
        "Kafka: bound of the group-level streams.assignment.interval.ms; see "
        "group.streams.assignment.interval.ms.",
        role=INERT,
    ),
    _d(
        "group.streams.max.assignment.interval.ms",
        INT,
        15000,
        "Kafka: bound of the group-level streams.assignment.interval.ms; see "
        "group.streams.assignment.interval.ms.",
        role=INERT,
    ),
    _d(
        "group.consumer.max.size",
        INT,
        INT_MAX,
        "Most members of a consumer-protocol group.",
        at_least(1),
    ),
    _d(
        "group.consumer.migration.policy",
        STRING,
        "bidirectional",
        "Whether a group with members moves between the classic and consumer protocols "
        "(KIP-848): upgrade (a consumer-protocol member joins a classic group), downgrade "
        "(the last consumer-protocol member leaves a group of classic members), "
        "bidirectional or disabled. Empty groups always move.",
        one_of("disabled", "upgrade", "downgrade", "bidirectional", ignore_case=True),
    ),
    _d(
        "group.consumer.assignors",
        LIST,
        ["uniform", "range"],
        "Server-side assignors of the consumer protocol, the first being the default.",
        each_of("uniform", "range"),
    ),
    _p(
        "delegation.token.secret.key",
        "Secret from which delegation tokens' HMACs are derived; the same on every node. "
        "Unset: delegation tokens are disabled (DELEGATION_TOKEN_AUTH_DISABLED).",
    ),
    _d(
        "delegation.token.max.lifetime.ms",
        LONG,
        604800000,
        "Longest a delegation token lives, however often it is renewed.",
        at_least(1),
    ),
    _d(
        "delegation.token.expiry.time.ms",
        LONG,
        86400000,
        "How long a delegation token lives before it must be renewed (and how far a "
        "renewal without a period moves its expiry).",
        at_least(1),
    ),
    _d(
        "delegation.token.expiry.check.interval.ms",
        LONG,
        3600000,
        "How often the active controller removes expired delegation tokens.",
        at_least(1),
    ),
    _d(
        "telemetry.max.bytes",
        INT,
        1048576,
        "Largest client telemetry push (KIP-714) the broker accepts, compressed or "
        "decompressed; a larger one is refused with TELEMETRY_TOO_LARGE.",
        at_least(1),
    ),
    _d(
        "telemetry.export.max.series.per.client",
        INT,
        2000,
        "kbroker's own: most Prometheus series the metrics one client instance pushes "
        "(KIP-714) may add to /metrics; data points past it are counted in "
        "kbroker_client_telemetry_dropped_series_total and not exported.",
        at_least(0),
    ),
    _d("group.share.enable", BOOLEAN, True, "Serve share groups (KIP-932)."),
    _d(
        "group.share.session.timeout.ms",
        INT,
        45000,
        "Session timeout of share group members.",
        at_least(1),
    ),
    _d(
        "group.share.min.session.timeout.ms",
        INT,
        45000,
        "Shortest share group session timeout.",
        at_least(1),
    ),
    _d(
        "group.share.max.session.timeout.ms",
        INT,
        60000,
        "Longest share group session timeout.",
        at_least(1),
    ),
    _d(
        "group.share.heartbeat.interval.ms",
        INT,
        5000,
        "Heartbeat interval of share group members.",
        at_least(1),
    ),
    _d(
        "group.share.min.heartbeat.interval.ms",
        INT,
        5000,
        "Shortest share group heartbeat interval.",
        at_least(1),
    ),
    _d(
        "group.share.max.heartbeat.interval.ms",
        INT,
        15000,
        "Longest share group heartbeat interval.",
        at_least(1),
    ),
    _d("group.share.max.size", INT, 200, "Most members of a share group.", between(10, 1000)),
    _d(
        "group.share.max.groups",
        SHORT,
        10,
        "Kafka 4.0's cap on share groups, which later Kafka dropped: share groups are "
        "as many as are made, as on Kafka 4.3.",
        between(1, 100),
        role=INERT,
    ),
    _d(
        "group.share.record.lock.duration.ms",
        INT,
        30000,
        "How long a share consumer holds an acquired record before it is released.",
        between(1000, 3600000),
    ),
    _d(
        "group.share.min.record.lock.duration.ms",
        INT,
        15000,
        "Shortest record lock a share group may configure.",
        between(1000, 30000),
    ),
    _d(
        "group.share.max.record.lock.duration.ms",
        INT,
        60000,
        "Longest record lock a share group may configure.",
        between(30000, 3600000),
    ),
    _d(
        "group.share.delivery.count.limit",
        INT,
        5,
        "Deliveries of a record to a share group before it is archived.",
        between(2, 10),
    ),
    _d(
        "group.share.min.delivery.count.limit",
        INT,
        2,
        "Lowest share.delivery.count.limit a share group may configure (KIP-1240).",
        between(2, 5),
    ),
    _d(
        "group.share.max.delivery.count.limit",
        INT,
        10,
        "Highest share.delivery.count.limit a share group may configure (KIP-1240).",
        between(5, 25),
    ),
    _d(
        "group.share.max.share.sessions",
        INT,
        2000,
        "Share sessions this broker keeps; a new one beyond is SHARE_SESSION_LIMIT_REACHED.",
        at_least(1),
    ),
    _d(
        "errors.deadletterqueue.topic.name.prefix",
        STRING,
        "dlq.",
        "Prefix a share group's dead-letter topic name must have (KIP-1191); empty: any name.",
    ),
    _d(
        "errors.deadletterqueue.auto.create.topics.enable",
        BOOLEAN,
        False,
        "Create a share group's dead-letter topic on its first record when it does not exist "
        "(KIP-1191).",
    ),
    _d(
        "group.share.partition.max.record.locks",
        INT,
        2000,
        "In-flight records per share partition.",
        between(100, 10000),
    ),
    _d(
        "group.share.min.partition.max.record.locks",
        INT,
        100,
        "Lowest share.partition.max.record.locks a share group may configure (KIP-1240).",
        between(100, 10000),
    ),
    _d(
        "group.share.max.partition.max.record.locks",
        INT,
        2000,
        "Highest share.partition.max.record.locks a share group may configure (KIP-1240).",
        between(100, 10000),
    ),
    _d(
        "share.coordinator.state.topic.num.partitions",
        INT,
        50,
        "Partitions of __share_group_state; fixed once the topic exists.",
        at_least(1),
    ),
    _d(
        "share.coordinator.state.topic.replication.factor",
        SHORT,
        1,
        "Replication factor of __share_group_state. 1 on a single node; Kafka's "
        "default, 3, in a cluster.",
        at_least(1),
    ),
    _d(
        "share.coordinator.state.topic.min.isr",
        INT,
        1,
        "min.insync.replicas of __share_group_state. 1 on a single node; Kafka's "
        "default, 2, in a cluster.",
        at_least(1),
    ),
    _d(
        "share.coordinator.state.topic.segment.bytes",
        INT,
        104857600,
        "Segment size of __share_group_state.",
        at_least(1),
    ),
    _d(
        "offsets.topic.replication.factor",
        SHORT,
        1,
        "Replication factor of the group offsets "
        "topic. 1 on a single node; Kafka's default, 3, in a cluster.",
        at_least(1),
    ),
    _d(
        "offsets.topic.num.partitions",
        INT,
        50,
        "Partitions of the group offsets topic; fixed once the topic exists.",
        at_least(1),
    ),
    _d(
        "offsets.topic.segment.bytes",
        INT,
        104857600,
        "Segment size of the group offsets topic.",
        at_least(1),
    ),
    _d(
        "offsets.topic.compression.codec",
        INT,
        0,
        "Codec of the batches the group coordinator writes to the offsets topic "
        "(0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd).",
        between(0, 4),
    ),
    _d(
        "offsets.retention.minutes",
        INT,
        10080,
        "Committed offsets of an empty group are deleted after this long.",
        at_least(1),
    ),
    _d(
        "offsets.retention.check.interval.ms",
        LONG,
        600000,
        "How often stale offsets are looked for.",
        at_least(1),
    ),
    _d(
        "offsets.commit.timeout.ms",
        INT,
        5000,
        "Longest an offset commit waits for replication.",
        at_least(1),
        role=INERT,
    ),
    _d(
        "offsets.load.buffer.size",
        INT,
        5242880,
        "Read buffer when loading group state.",
        at_least(1),
        role=INERT,
    ),
    _d("offset.metadata.max.bytes", INT, 4096, "Largest metadata string of a committed offset."),
    # -- transactions --------------------------------------------------------------------
    _d(
        "transaction.state.log.replication.factor",
        SHORT,
        1,
        "Replication factor of the transaction state topic. 1 on a single node; Kafka's "
        "default, 3, in a cluster.",
        at_least(1),
    ),
    _d(
        "transaction.state.log.num.partitions",
        INT,
        50,
        "Partitions of the transaction state topic.",
        at_least(1),
    ),
    _d(
        "transaction.state.log.min.isr",
        INT,
        1,
        "min.insync.replicas of the transaction state topic. 1 on a single node; Kafka's "
        "default, 2, in a cluster.",
        at_least(1),
    ),
    _d(
        "transaction.state.log.segment.bytes",
        INT,
        104857600,
        "Segment size of the transaction state topic.",
        at_least(1),
    ),
    _d(
        "transaction.state.log.load.buffer.size",
        INT,
        5242880,
        "Read buffer when loading transaction state.",
        at_least(1),
        role=INERT,
    ),
    _d(
        "transactional.id.expiration.ms",
        INT,
        604800000,
        "A transactional id with no transaction for this long is forgotten.",
        at_least(1),
    ),
    _d(
        "transaction.max.timeout.ms",
        INT,
        900000,
        "Longest transaction timeout a producer may ask for.",
        at_least(1),
    ),
    _d(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        INT,
        10000,
        "How often timed-out transactions are aborted.",
        at_least(1),
    ),
    _d(
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        INT,
        3600000,
        "How often expired transactional ids are removed.",
        at_least(1),
    ),
    _d(
        "add.partitions.to.txn.retry.backoff.max.ms",
        INT,
        100,
        "How long a leader keeps adding a partition to a transaction (transactions version "
        "2) while the coordinator answers CONCURRENT_TRANSACTIONS, before the write gets it.",
        at_least(0),
    ),
    _d(
        "add.partitions.to.txn.retry.backoff.ms",
        INT,
        20,
        "The wait between those tries.",
        at_least(1),
    ),
    _d(
        "transaction.partition.verification.enable",
        BOOLEAN,
        True,
        "Check that a transactional produce targets a partition added to the transaction.",
    ),
    _d(
        "producer.id.expiration.ms",
        INT,
        86400000,
        "Idempotent producer state unused for this long is dropped.",
        at_least(1),
    ),
    _d(
        "producer.id.expiration.check.interval.ms",
        INT,
        600000,
        "How often expired producer ids are looked for.",
        at_least(1),
    ),
    # -- TLS (PEM key stores; listener.name.<l>.ssl.* overrides per listener) ---------------
    _d(
        "ssl.keystore.type",
        STRING,
        "JKS",
        "Format of the key store. kbroker reads PEM only: a TLS listener with a key store "
        "of another type is refused at start.",
    ),
    _d(
        "ssl.keystore.location",
        STRING,
        None,
        "PEM file holding the listener's private key and certificate chain.",
    ),
    _p(
        "ssl.keystore.certificate.chain",
        "The listener's certificate chain as PEM text (instead of ssl.keystore.location).",
    ),
    _p(
        "ssl.keystore.key",
        "The listener's private key as PEM text, with ssl.keystore.certificate.chain.",
    ),
    _p("ssl.key.password", "Password of an encrypted private key."),
    _d("ssl.truststore.type", STRING, "JKS", "Format of the trust store; PEM only, as above."),
    _d(
        "ssl.truststore.location",
        STRING,
        None,
        "PEM file of the CA certificates client certificates are checked against.",
    ),
    _p("ssl.truststore.certificates", "Trusted CA certificates as PEM text."),
    _d(
        "ssl.endpoint.identification.algorithm",
        STRING,
        "https",
        "https: a broker connecting to another broker checks that the certificate names "
        "the host it dialled; empty turns the check off.",
        one_of("https", "", ignore_case=True),
    ),
    _d(
        "ssl.client.auth",
        STRING,
        "none",
        "none, requested or required: whether TLS clients must (or may) present a "
        "certificate; its subject then names the principal.",
        one_of(*CLIENT_AUTH_MODES),
    ),
    _d(
        "ssl.principal.mapping.rules",
        STRING,
        "DEFAULT",
        "Rules mapping a client certificate's distinguished name to a principal name: "
        "RULE:pattern/replacement/[LU] entries and DEFAULT (the whole name).",
        _parsed_by(
            parse_mapping_rules, "RULE:pattern/replacement/[LU] and DEFAULT, comma-separated"
        ),
    ),
    _d(
        "ssl.enabled.protocols",
        LIST,
        ["TLSv1.2", "TLSv1.3"],
        "TLS versions a listener accepts.",
        each_of(*TLS_PROTOCOLS, non_empty=True),
    ),
    _d(
        "ssl.protocol",
        STRING,
        "TLSv1.3",
        "Kafka's SSLContext protocol; the versions actually offered are ssl.enabled.protocols.",
        one_of("TLS", "TLSv1.2", "TLSv1.3"),
        role=INERT,
    ),
    _d(
        "ssl.cipher.suites",
        LIST,
        [],
        "Cipher suites (IANA or OpenSSL names): TLS 1.2's and TLS 1.3's; empty means the "
        "platform's defaults.",
    ),
    # -- SASL ------------------------------------------------------------------------------
    _d(
        "sasl.enabled.mechanisms",
        LIST,
        ["GSSAPI"],
        "SASL mechanisms SASL listeners accept. kbroker serves PLAIN, SCRAM-SHA-256, "
        "SCRAM-SHA-512 and OAUTHBEARER; a SASL listener enabling another is refused at start.",
    ),
    _d(
        "sasl.mechanism.inter.broker.protocol",
        STRING,
        "GSSAPI",
        "SASL mechanism a broker logs in to another broker's SASL inter-broker listener "
        "with (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER with an unsigned token; "
        "Kafka's default GSSAPI is refused at start when the inter-broker listener uses "
        "SASL).",
    ),
    _p(
        "sasl.jaas.config",
        "JAAS line used when a listener has no listener.name.<l>.<mechanism>.sasl.jaas.config; "
        'PLAIN users are its user_<name>="<password>" options.',
    ),
    # Kafka's Kerberos (GSSAPI) and login-refresh settings: kbroker serves no GSSAPI, and
    # its own OAUTHBEARER login mints an unsigned token for every login or fetches the
    # provider's anew for a login once it has lived 80% of its life (Kafka's default
    # window), with no background refresh to tune: they change nothing. Kafka changes
    # them per broker at run time; accepted there too, and named inert when set, so
    # tools that set them work unchanged.
    _d(
        "sasl.kerberos.service.name",
        STRING,
        None,
        "Kerberos principal name Kafka runs as (GSSAPI).",
        dynamic=UpdateMode.PER_BROKER,
        role=INERT,
    ),
    _d(
        "sasl.kerberos.kinit.cmd",
        STRING,
        "/usr/bin/kinit",
        "Kerberos kinit command path (GSSAPI).",
        dynamic=UpdateMode.PER_BROKER,
        role=INERT,
    ),
    _d(
        "sasl.kerberos.ticket.renew.window.factor",
        DOUBLE,
        0.8,
        "Share of a Kerberos ticket's lifetime after which it is renewed (GSSAPI).",
        dynamic=UpdateMode.PER_BROKER,
        role=INERT,
    ),
    _d(
        "sasl.kerberos.ticket.renew.jitter",
        DOUBLE,
        0.05,
        "Random jitter added to a Kerberos ticket's renewal time (GSSAPI).",
        dynamic=UpdateMode.PER_BROKER,
        role=INERT,
    ),
    _d(
        "sasl.kerberos.min.time.before.relogin",
        LONG,
        60000,
        "Kerberos login thread's sleep between refresh attempts, in ms (GSSAPI).",
        dynamic=UpdateMode.PER_BROKER,
        role=INERT,
    ),
    _d(
        "sasl.kerberos.principal.to.local.rules",
        LIST,
        ["DEFAULT"],
        "Rules mapping Kerberos principal names to short names (GSSAPI).",
        dynamic=UpdateMode.PER_BROKER,
        role=INERT,
    ),
    _d(
        "sasl.login.refresh.window.factor",
        DOUBLE,
        0.8,
        "Share of a login credential's lifetime after which it is refreshed.",
        between(0.5, 1.0),
        dynamic=UpdateMode.PER_BROKER,
        role=INERT,
    ),
    _d(
        "sasl.login.refresh.window.jitter",
        DOUBLE,
        0.05,
        "Random jitter added to a login credential's refresh time.",
        between(0.0, 0.25),
        dynamic=UpdateMode.PER_BROKER,
        role=INERT,
    ),
    _d(
        "sasl.login.refresh.min.period.seconds",
        SHORT,
        60,
        "Shortest wait between two refreshes of a login credential.",
        between(0, 900),
        dynamic=UpdateMode.PER_BROKER,
        role=INERT,
    ),
    _d(
        "sasl.login.refresh.buffer.seconds",
        SHORT,
        300,
        "Time before a login credential expires that its refresh keeps.",
        between(0, 3600),
        dynamic=UpdateMode.PER_BROKER,
        role=INERT,
    ),
    # -- SASL/OAUTHBEARER (kbroker.security.oauthbearer) -------------------------------
    _d(
        "sasl.server.callback.handler.class",
        CLASS,
        None,
        "How a listener checks OAUTHBEARER tokens (set as listener.name.<l>.oauthbearer."
        "sasl.server.callback.handler.class): unset or Kafka's "
        "OAuthBearerUnsecuredValidatorCallbackHandler takes unsigned tokens (development), "
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler "
        "verifies signed tokens with sasl.oauthbearer.jwks.endpoint.url's keys. Any other "
        "class is refused at start.",
        one_of(
            "org.apache.kafka.common.security.oauthbearer.internals.unsecured."
            "OAuthBearerUnsecuredValidatorCallbackHandler",
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
            "org.apache.kafka.common.security.oauthbearer.secured."
            "OAuthBearerValidatorCallbackHandler",
        ),
    ),
    _d(
        "sasl.oauthbearer.jwks.endpoint.url",
        STRING,
        None,
        "The identity provider's JWKS (https://, http:// or file://): the keys signed "
        "OAUTHBEARER tokens are verified with. A URL is fetched at start and every "
        "sasl.oauthbearer.jwks.endpoint.refresh.ms, and at once (at most once a minute a "
        "key id) when a token names a key it does not hold; a file is read at start.",
    ),
    _d(
        "sasl.oauthbearer.jwks.endpoint.refresh.ms",
        LONG,
        3_600_000,
        "Time between two fetches of the JWKS URL.",
        at_least(0),
    ),
    _d(
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms",
        LONG,
        100,
        "First wait before fetching the JWKS URL again after a failed fetch; it doubles.",
        at_least(0),
    ),
    _d(
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms",
        LONG,
        10_000,
        "Longest wait between two failed fetches of the JWKS URL.",
        at_least(0),
    ),
    _d(
        "sasl.oauthbearer.expected.audience",
        LIST,
        [],
        "Audiences a signed token's aud claim must name one of. Unset: a token with an "
        "aud claim is refused (as Kafka's jose4j consumer does).",
    ),
    _d(
        "sasl.oauthbearer.expected.issuer",
        STRING,
        None,
        "The iss claim a signed token must carry; unset: not checked.",
    ),
    _d(
        "sasl.oauthbearer.clock.skew.seconds",
        INT,
        30,
        "Clock difference with the identity provider allowed on exp and nbf.",
        at_least(0),
    ),
    _d(
        "sasl.oauthbearer.scope.claim.name",
        STRING,
        "scope",
        "Claim of a signed token that holds its scope.",
    ),
    _d(
        "sasl.oauthbearer.sub.claim.name",
        STRING,
        "sub",
        "Claim of a signed token that names its principal (User:<value>).",
    ),
    # A broker's own OAUTHBEARER login to another (sasl.mechanism.inter.broker.protocol)
    _d(
        "sasl.login.callback.handler.class",
        CLASS,
        None,
        "How a broker gets the OAUTHBEARER token it logs in to other brokers with (set as "
        "listener.name.<inter-broker listener>.oauthbearer.sasl.login.callback.handler."
        "class): unset, an unsigned token of the JAAS line's unsecuredLogin* options; "
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler, a "
        "token from sasl.oauthbearer.token.endpoint.url for the JAAS line's clientId and "
        "clientSecret. Another class is refused at start.",
        one_of(
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
            "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler",
        ),
    ),
    _d(
        "sasl.oauthbearer.token.endpoint.url",
        STRING,
        None,
        "The identity provider's token endpoint (https://, http://, or file:// naming a "
        "file holding the token) a broker's own OAUTHBEARER login takes its token from.",
    ),
    _d(
        "sasl.oauthbearer.scope",
        STRING,
        None,
        "Scope a broker's own login asks the token endpoint for (else the JAAS line's scope).",
    ),
    _d(
        "sasl.oauthbearer.client.credentials.client.id",
        STRING,
        None,
        "Client id of a broker's own login at the token endpoint (else the JAAS line's clientId).",
    ),
    _p(
        "sasl.oauthbearer.client.credentials.client.secret",
        "Client secret of a broker's own login at the token endpoint (else the JAAS line's "
        "clientSecret).",
    ),
    _d(
        "sasl.login.connect.timeout.ms",
        INT,
        None,
        "Longest wait to connect to the token endpoint and have its answer (unset: 10 s); "
        "kbroker bounds the whole request by the larger of this and "
        "sasl.login.read.timeout.ms.",
    ),
    _d(
        "sasl.login.read.timeout.ms",
        INT,
        None,
        "Longest wait for the token endpoint's answer (unset: 10 s).",
    ),
    _d(
        "sasl.login.retry.backoff.ms",
        LONG,
        100,
        "First wait before asking the token endpoint again after a failure; it doubles.",
    ),
    _d(
        "sasl.login.retry.backoff.max.ms",
        LONG,
        10000,
        "Longest wait between two failed requests to the token endpoint.",
    ),
    _d(
        "connection.failed.authentication.delay.ms",
        INT,
        100,
        "Time a failed login's answer, and the close after it, are held back (KIP-306): "
        "a client that reconnects at once, or guesses passwords, waits this long a try. "
        "Keep it below connections.max.idle.ms.",
        at_least(0),
    ),
    _d(
        "sasl.server.max.receive.size",
        INT,
        524288,
        "Largest frame a SASL listener reads from a connection before it has "
        "authenticated; a larger size prefix closes the connection (a client that has "
        "not logged in cannot make the broker hold socket.request.max.bytes).",
        at_least(1),
    ),
    _d(
        "connections.max.reauth.ms",
        LONG,
        0,
        "Longest SASL session: a client must re-authenticate (KIP-368) before it ends, "
        "else its connection is closed. 0 means sessions never expire.",
        at_least(0),
    ),
    # -- client quotas ---------------------------------------------------------------------
    _d(
        "quota.window.num",
        INT,
        11,
        "Samples a client quota's rate is measured over.",
        at_least(1),
    ),
    _d(
        "quota.window.size.seconds",
        INT,
        1,
        "Length of each client quota sample.",
        at_least(1),
    ),
    # -- authorization -------------------------------------------------------------------
    _d(
        "authorizer.class.name",
        STRING,
        "",
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer turns ACL checks on (ACLs "
        "live in the replicated metadata). Empty means none: ACL requests are answered "
        "SECURITY_DISABLED. Any other class is refused at start.",
        described(_known_authorizer, f"empty, {AUTHORIZER_NAMES[0]} or {AUTHORIZER_NAMES[1]}"),
    ),
    _d(
        "super.users",
        STRING,
        None,
        "Principals (User:name) separated by semicolons that the authorizer allows everything.",
    ),
    _d(
        "allow.everyone.if.no.acl.found",
        BOOLEAN,
        False,
        "Whether a resource no ACL names is open to everyone (else only to super users).",
    ),
)

# Kafka's update mode of the settings above not marked dynamic where they are defined
# (those are the broker-wide defaults of topic configs, all cluster-wide). A broker
# applies each when the metadata record that changes it reaches it (broker.py,
# Broker.apply_dynamic_config); the inert ones change nothing here, as at start.
_UPDATE_MODES: dict[str, UpdateMode] = {
    **dict.fromkeys(
        (
            "max.connections",
            "max.connections.per.ip",
            "max.connections.per.ip.overrides",
            "producer.id.expiration.ms",
            "transaction.partition.verification.enable",
            "logging.level",
            "logging.levels",
            "num.io.threads",
            "num.network.threads",
            "num.replica.fetchers",
            "background.threads",
            "num.recovery.threads.per.data.dir",
        ),
        UpdateMode.CLUSTER_WIDE,
    ),
    # KIP-226's reconfigurable security settings: per broker, and only under a listener
    # prefix (listener.name.<listener>.ssl.keystore.location, ...<mechanism>.sasl.jaas.config).
    **dict.fromkeys(
        (
            "ssl.keystore.type",
            "ssl.keystore.location",
            "ssl.keystore.certificate.chain",
            "ssl.keystore.key",
            "ssl.key.password",
            "ssl.truststore.type",
            "ssl.truststore.location",
            "ssl.truststore.certificates",
            "sasl.jaas.config",
        ),
        UpdateMode.PER_BROKER,
    ),
}
LISTENER_ONLY_DYNAMIC = frozenset(
    name for name, mode in _UPDATE_MODES.items() if mode is UpdateMode.PER_BROKER
)
"""Settings Kafka updates dynamically only per listener (``listener.name.<l>.<setting>``)."""

BROKER_CONFIG_DEFS = tuple(
    replace(d, read_only=False, update_mode=_UPDATE_MODES[d.name]) if d.name in _UPDATE_MODES else d
    for d in BROKER_CONFIG_DEFS
)
BROKER_CONFIGS: dict[str, ConfigDef] = table(BROKER_CONFIG_DEFS)

# Settings of kbroker's own (every other name in the table is Kafka's).
KBROKER_OWN: frozenset[str] = frozenset(
    {
        "cluster.peers",
        "controller.raft.listener",
        "cluster.secret",
        "http.listeners",
        "socket.busy.poll.us",
        "logging.level",
        "logging.format",
        "logging.levels",
        "logging.requests.enable",
        "telemetry.export.max.series.per.client",
    }
)

# Kafka's broker-side synonym groups: the first set name wins, whatever layer sets it.
SYNONYM_GROUPS: tuple[tuple[str, ...], ...] = (
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
)


def broker_synonyms(name: str) -> tuple[str, ...]:
    """Names that can supply ``name``'s value, highest priority first (Kafka's order)."""
    for group in SYNONYM_GROUPS:
        if name in group:
            return group
    return (name,)
