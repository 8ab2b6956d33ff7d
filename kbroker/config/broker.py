"""The broker's settings, loaded once at start from defaults, file, environment and flags.

``load_broker_config`` gathers the raw ``name=value`` pairs of each source, parses each
against the settings table (failing on the first unknown or invalid one, naming it and
where it was written), applies Kafka's fallbacks (``log.retention.ms`` over minutes
over hours, ``log.dirs`` over ``log.dir``, ``node.id`` over ``broker.id``...) and checks
the settings that constrain each other. The result is an immutable ``BrokerConfig``.
"""

from __future__ import annotations

import difflib
import os
import socket
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kbroker.config.broker_settings import (
    BROKER_CONFIGS,
    LISTENER_ONLY_DYNAMIC,
    SYNONYM_GROUPS,
)
from kbroker.config.errors import ConfigError
from kbroker.config.kafka_names import KAFKA_DYNAMIC_NOT_APPLIED, KAFKA_READ_ONLY_UNKNOWN
from kbroker.config.listeners import (
    Endpoint,
    Peer,
    parse_address,
    parse_http_listener,
    parse_listeners,
    parse_peer,
    parse_protocol_map,
)
from kbroker.config.quorum import QuorumConfig, resolve_quorum
from kbroker.config.sources import (
    DEFAULT_SOURCE,
    RawSetting,
    SettingSource,
    SourceKind,
    settings_from_environ,
    settings_from_file,
    settings_from_mapping,
    settings_from_overrides,
)
from kbroker.config.typed import ListenerSettings, TypedSettings
from kbroker.config.types import ConfigSource, SettingRole, UpdateMode

MS_PER_MINUTE = 60_000
MS_PER_HOUR = 3_600_000

Layer = dict[str, tuple[Any, SettingSource]]

CLUSTER_DEFAULTS = {
    "offsets.topic.replication.factor": 3,
    "transaction.state.log.replication.factor": 3,
    "transaction.state.log.min.isr": 2,
    "share.coordinator.state.topic.replication.factor": 3,
    "share.coordinator.state.topic.min.isr": 2,
}
"""Kafka's defaults for settings whose kbroker default suits only a single node."""


def advertised_host_name() -> str:
    """Host published for a wildcard listener when advertised.listeners is unset.

    Kafka publishes the canonical host name; the plain host name is what resolves
    inside container networks and on most workstations.
    """
    return socket.gethostname()


def _unknown(raw: RawSetting, known: Iterable[str]) -> ConfigError:
    hint = difflib.get_close_matches(raw.name, list(known), n=1)
    suggestion = f" (did you mean {hint[0]}?)" if hint else ""
    return ConfigError(
        f"unknown setting {raw.name!r} from {raw.source}{suggestion}",
        setting=raw.name,
        origin=str(raw.source),
    )


def _invalid(name: str, raw: Any, source: SettingSource, reason: str) -> ConfigError:
    return ConfigError(
        f"invalid value {raw!r} for setting {name} from {source}: {reason}",
        setting=name,
        origin=str(source),
    )


# Settings Kafka reads per SASL mechanism of a listener, as
# ``listener.name.<listener>.<mechanism>.<setting>`` (its saslMechanismConfigPrefix).
MECHANISM_SCOPED_PREFIXES = (
    "connections.max.reauth.ms",
    "sasl.jaas.config",
    "sasl.server.callback.handler.class",
    "sasl.oauthbearer.",
    "sasl.login.callback.handler.class",
    "sasl.login.connect.timeout.ms",
    "sasl.login.read.timeout.ms",
    "sasl.login.retry.backoff.",
)
# Settings a listener may override as ``listener.name.<listener>.<setting>``: those, but
# a JAAS line, which belongs to a mechanism.
LISTENER_SCOPED_PREFIXES = (
    "ssl.",
    "sasl.enabled.mechanisms",
    *(p for p in MECHANISM_SCOPED_PREFIXES if p != "sasl.jaas.config"),
)
# Kafka's per-listener connection quota (``listener.name.<l>.max.connections``).
LISTENER_SCOPED_NAMES = frozenset({"max.connections"})
# Of those, the ones a cluster default may set under a listener prefix too (Kafka's
# ClusterLevelListenerConfigs); every other listener-prefixed setting is per broker.
CLUSTER_LEVEL_LISTENER_SETTINGS = frozenset({"max.connections"})
_SCOPED = "listener.name."
_JAAS = ".sasl.jaas.config"


def listener_scoped_definition(name: str) -> Any:
    """The definition behind ``listener.name.<l>.<setting>`` (or ``<l>.<mechanism>.sasl.
    jaas.config``, Kafka's per-mechanism JAAS line), None for any other name."""
    if not name.startswith(_SCOPED):
        return None
    _listener, _, setting = name[len(_SCOPED) :].partition(".")
    if not _listener or not setting:
        return None
    _mechanism, _, under_mechanism = setting.partition(".")
    if under_mechanism.startswith(MECHANISM_SCOPED_PREFIXES) and under_mechanism in BROKER_CONFIGS:
        return BROKER_CONFIGS[under_mechanism]
    definition = BROKER_CONFIGS.get(setting)
    if definition is not None and (
        setting.startswith(LISTENER_SCOPED_PREFIXES) or setting in LISTENER_SCOPED_NAMES
    ):
        return definition
    return None


def listener_setting(name: str) -> tuple[str, str] | None:
    """(listener, setting) of a ``listener.name.<listener>.<setting>`` name, else None."""
    if not name.startswith(_SCOPED):
        return None
    listener, _, setting = name[len(_SCOPED) :].partition(".")
    return (listener, setting) if listener and setting else None


def parse_layer(settings: Iterable[RawSetting]) -> Layer:
    """Parse raw settings into one layer; a later pair for the same name replaces an earlier."""
    layer: Layer = {}
    for raw in settings:
        definition = BROKER_CONFIGS.get(raw.name) or listener_scoped_definition(raw.name)
        if definition is None:
            raise _unknown(raw, BROKER_CONFIGS)
        try:
            value = definition.parse(raw.value)
        except ValueError as exc:
            raise _invalid(raw.name, raw.value, raw.source, str(exc)) from None
        layer[raw.name] = (value, raw.source)
    return layer


class BrokerConfig(TypedSettings):
    """Immutable broker settings.

    ``cfg.log_dirs`` (typed, generated in config/typed.py) and ``cfg.get("log.dirs")``
    (for a name computed at run time) give a setting's effective value: the
    highest-precedence value set, with Kafka's fallbacks applied (``log.dirs`` falls back
    to ``log.dir``; ``log.retention.ms``, ``log.roll.ms``, ``log.roll.jitter.ms`` and
    ``log.flush.interval.ms`` are computed from their synonyms; ``node.id`` from
    ``broker.id``; ``advertised.listeners`` and ``inter.broker.listener.name`` from the
    listeners). ``raw`` gives the value exactly as set (None when unset without default),
    which is what DescribeConfigs reports.
    """

    __slots__ = (
        "_static",
        "_dynamic_default",
        "_dynamic_broker",
        "_values",
        "_sources",
        "_effective",
        "_endpoints",
        "_protocol_map",
        "_controller_listeners",
        "_advertised",
        "_http",
        "_peers",
        "_quorum",
        "_scoped",
    )
    _static: Layer
    _dynamic_default: Layer
    _dynamic_broker: Layer
    _values: dict[str, Any]
    _sources: dict[str, SettingSource]
    _endpoints: tuple[Endpoint, ...]
    _protocol_map: dict[str, str]
    _controller_listeners: frozenset[str]
    _advertised: tuple[Endpoint, ...]
    _http: tuple[Endpoint, ...]
    _peers: tuple[Peer, ...]
    _quorum: QuorumConfig
    _scoped: dict[str, Any]

    def __init__(
        self,
        static: Layer | None = None,
        dynamic_default: Layer | None = None,
        dynamic_broker: Layer | None = None,
    ):
        put = object.__setattr__
        put(self, "_static", dict(static or {}))
        put(self, "_dynamic_default", dict(dynamic_default or {}))
        put(self, "_dynamic_broker", dict(dynamic_broker or {}))
        values: dict[str, Any] = {}
        sources: dict[str, SettingSource] = {}
        for name, definition in BROKER_CONFIGS.items():
            values[name], sources[name] = definition.default, DEFAULT_SOURCE
            for layer in (self._static, self._dynamic_default, self._dynamic_broker):
                if name in layer:
                    values[name], sources[name] = layer[name]
        scoped: dict[str, Any] = {}
        for layer in (self._static, self._dynamic_default, self._dynamic_broker):
            for name, (value, _source) in layer.items():
                if name.startswith(_SCOPED):
                    scoped[name] = value
        put(self, "_scoped", scoped)
        put(self, "_values", values)
        put(self, "_sources", sources)
        put(self, "_effective", dict(values))
        self._resolve()

    # -- construction ---------------------------------------------------------------------

    @classmethod
    def from_settings(cls, settings: Mapping[str, str] | None = None) -> BrokerConfig:
        """Build from ``{name: text}`` as if each were an ``--override`` (handy in tests)."""
        return cls(
            parse_layer(settings_from_overrides(f"{k}={v}" for k, v in (settings or {}).items()))
        )

    def with_dynamic(
        self,
        cluster_default: Mapping[str, str] | None = None,
        per_broker: Mapping[str, str] | None = None,
    ) -> BrokerConfig:
        """A copy with dynamic (Admin API) values layered above the static ones."""
        layers = []
        for values, kind, one_broker in (
            (cluster_default or {}, SourceKind.DYNAMIC_DEFAULT, False),
            (per_broker or {}, SourceKind.DYNAMIC_BROKER, True),
        ):
            validate_dynamic_broker_configs(values, one_broker)
            known = {n: v for n, v in values.items() if dynamic_definition(n) is not None}
            layers.append(parse_layer(settings_from_mapping(known, kind)))
        return BrokerConfig(self._static, layers[0], layers[1])

    # -- lookup ---------------------------------------------------------------------------

    def get(self, name: str) -> Any:
        """Effective value of a setting by its Kafka name."""
        try:
            return self._effective[name]
        except KeyError:
            raise KeyError(f"no broker setting named {name!r}") from None

    def raw(self, name: str) -> Any:
        """Value as set in the highest layer that sets it, else the default (may be None)."""
        if name in self._scoped:
            return self._scoped[name]
        try:
            return self._values[name]
        except KeyError:
            raise KeyError(f"no broker setting named {name!r}") from None

    def scoped_names(self) -> list[str]:
        """The ``listener.name.<listener>.*`` settings some layer sets, sorted."""
        return sorted(self._scoped)

    def dynamic_layers(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The parsed dynamic values: (cluster default, this broker's own)."""
        return (
            {n: v for n, (v, _) in self._dynamic_default.items()},
            {n: v for n, (v, _) in self._dynamic_broker.items()},
        )

    def for_listener(self, listener: str, name: str) -> Any:
        """``listener.name.<listener>.<name>`` when set, else the broker-wide ``name``."""
        scoped = f"{_SCOPED}{listener.lower()}.{name}"
        if scoped in self._scoped:
            return self._scoped[scoped]
        return self.get(name)

    def listener_settings(self, listener: str) -> ListenerSettings:
        """The typed settings of one listener, each ``for_listener(listener, name)``."""
        return ListenerSettings(self, listener)

    def jaas_config(self, listener: str, mechanism: str) -> str | None:
        """The JAAS line for one mechanism on one listener, else ``sasl.jaas.config``."""
        scoped = f"{_SCOPED}{listener.lower()}.{mechanism.lower()}{_JAAS}"
        if scoped in self._scoped:
            return self._scoped[scoped]
        return self.sasl_jaas_config

    def for_mechanism(self, listener: str, mechanism: str, name: str) -> Any:
        """``listener.name.<listener>.<mechanism>.<name>`` when set, else
        ``listener.name.<listener>.<name>``, else the broker-wide ``name``."""
        scoped = f"{_SCOPED}{listener.lower()}.{mechanism.lower()}.{name}"
        if scoped in self._scoped:
            return self._scoped[scoped]
        return self.for_listener(listener, name)

    def source(self, name: str) -> SettingSource:
        """Where ``raw(name)`` came from; ``.config_source`` is the DescribeConfigs source."""
        try:
            return self._sources[name]
        except KeyError:
            raise KeyError(f"no broker setting named {name!r}") from None

    def is_set(self, name: str) -> bool:
        return self.source(name).kind is not SourceKind.DEFAULT

    def values_by_source(self, name: str) -> list[tuple[ConfigSource, Any]]:
        """Every value ``name`` has, highest layer first, the default last if not None."""
        found = []
        for layer, source in (
            (self._dynamic_broker, ConfigSource.DYNAMIC_BROKER_CONFIG),
            (self._dynamic_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
            (self._static, ConfigSource.STATIC_BROKER_CONFIG),
        ):
            if name in layer:
                found.append((source, layer[name][0]))
        default = dynamic_definition(name).default if not name.startswith(_SCOPED) else None
        if default is not None:
            found.append((ConfigSource.DEFAULT_CONFIG, default))
        return found

    def explicit_settings(self) -> dict[str, Any]:
        """Settings given by some source other than the defaults, by name."""
        return {n: v for n, v in self._values.items() if self.is_set(n)}

    def inert_settings(self, *, explicit_only: bool = True) -> list[str]:
        """Names of the inert settings (``SettingRole.INERT``), sorted; by default only
        those some source set, which the start-up log line names."""
        return sorted(
            name
            for name, definition in BROKER_CONFIGS.items()
            if definition.role is SettingRole.INERT and (self.is_set(name) or not explicit_only)
        )

    def __setattr__(self, attribute: str, value: Any) -> None:
        raise AttributeError("BrokerConfig is immutable")

    def __delattr__(self, attribute: str) -> None:
        raise AttributeError("BrokerConfig is immutable")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BrokerConfig) and self._values == other._values

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in sorted(self.explicit_settings().items()))
        return f"BrokerConfig({shown})"

    # -- derived views --------------------------------------------------------------------

    @property
    def endpoints(self) -> tuple[Endpoint, ...]:
        """Every listener in ``listeners``, controller listeners included."""
        return self._endpoints

    @property
    def broker_endpoints(self) -> tuple[Endpoint, ...]:
        """Listeners that serve the Kafka API (``listeners`` minus controller listeners)."""
        return tuple(e for e in self._endpoints if e.name not in self._controller_listeners)

    @property
    def advertised_endpoints(self) -> tuple[Endpoint, ...]:
        """What Metadata publishes for this broker, one per broker listener name."""
        return self._advertised

    def advertised_endpoint(self, listener_name: str) -> Endpoint | None:
        """The published address of one listener (a client's connection names it)."""
        for endpoint in self._advertised:
            if endpoint.name == listener_name.upper():
                return endpoint
        return None

    def listener(self, name: str | None = None) -> Endpoint:
        """The bind address of one broker listener; by default the inter-broker one.

        A broker serving a single listener binds this and publishes
        ``advertised_listener()`` of the same name.
        """
        wanted = (name or self._effective["inter.broker.listener.name"]).upper()
        for endpoint in self.broker_endpoints:
            if endpoint.name == wanted:
                return endpoint
        raise KeyError(f"no broker listener named {wanted}")

    def advertised_listener(self, name: str | None = None) -> Endpoint:
        """The published address of ``listener(name)``."""
        wanted = name or self._effective["inter.broker.listener.name"]
        endpoint = self.advertised_endpoint(wanted)
        if endpoint is None:
            raise KeyError(f"no advertised listener named {wanted.upper()}")
        return endpoint

    @property
    def inter_broker_endpoint(self) -> Endpoint:
        """The advertised address other brokers use to fetch from this one."""
        endpoint = self.advertised_endpoint(self._effective["inter.broker.listener.name"])
        assert endpoint is not None  # guaranteed by _resolve
        return endpoint

    @property
    def protocol_map(self) -> dict[str, str]:
        return dict(self._protocol_map)

    @property
    def controller_listeners(self) -> frozenset[str]:
        return self._controller_listeners

    @property
    def http_endpoints(self) -> tuple[Endpoint, ...]:
        return self._http

    @property
    def raft_address(self) -> tuple[str, int] | None:
        """``controller.raft.listener`` as (host, port); None means pick an ephemeral port."""
        text = self._effective["controller.raft.listener"]
        return None if text is None else parse_address(text)

    @property
    def peers(self) -> tuple[Peer, ...]:
        """The quorum's voters (``controller.quorum.voters``, or its alias ``cluster.peers``)."""
        return self._peers

    @property
    def quorum(self) -> QuorumConfig:
        """This node's place in the metadata quorum (voter or observer, addresses, secret)."""
        return self._quorum

    @property
    def data_dirs(self) -> tuple[Path, ...]:
        return tuple(Path(d) for d in self._effective["log.dirs"])

    @property
    def metadata_dir(self) -> Path:
        explicit = self._effective["metadata.log.dir"]
        return Path(explicit) if explicit is not None else self.data_dirs[0]

    # -- fallbacks and cross-checks -------------------------------------------------------

    def _fail(self, name: str, reason: str) -> ConfigError:
        return _invalid(name, self._values[name], self._sources[name], reason)

    def _resolve(self) -> None:
        effective = self._effective
        put = object.__setattr__

        # node.id / broker.id
        node_set, broker_set = self.is_set("node.id"), self.is_set("broker.id")
        if node_set and broker_set and self._values["node.id"] != self._values["broker.id"]:
            raise self._fail("broker.id", f"differs from node.id={self._values['node.id']}")
        if broker_set and not node_set:
            effective["node.id"] = self._values["broker.id"]
        effective["broker.id"] = effective["node.id"]

        # log.dirs / log.dir
        if effective["log.dirs"] is None:
            effective["log.dirs"] = [effective["log.dir"]]
        if not effective["log.dirs"]:
            raise self._fail("log.dirs", "names no directory")
        if not effective["log.dir"] and self._values["log.dirs"] is None:
            raise self._fail("log.dir", "must not be empty")

        # Kafka's synonym groups: the first name with a value wins, whatever its layer.
        for group in SYNONYM_GROUPS:
            effective[group[0]] = self._first_of_group(group)
        retention = effective["log.retention.ms"]
        if retention < 0:
            effective["log.retention.ms"] = -1
        elif retention == 0:
            name = next(n for n in SYNONYM_GROUPS[0] if self._values[n] is not None)
            raise self._fail(name, "retention must be -1 (unlimited) or at least 1 ms")

        self._resolve_listeners()

        for low, high in (
            ("group.min.session.timeout.ms", "group.max.session.timeout.ms"),
            ("group.consumer.min.session.timeout.ms", "group.consumer.session.timeout.ms"),
            ("group.consumer.session.timeout.ms", "group.consumer.max.session.timeout.ms"),
            ("group.consumer.min.heartbeat.interval.ms", "group.consumer.heartbeat.interval.ms"),
            ("group.consumer.heartbeat.interval.ms", "group.consumer.max.heartbeat.interval.ms"),
            ("group.streams.min.session.timeout.ms", "group.streams.session.timeout.ms"),
            ("group.streams.session.timeout.ms", "group.streams.max.session.timeout.ms"),
            ("group.streams.min.heartbeat.interval.ms", "group.streams.heartbeat.interval.ms"),
            ("group.streams.heartbeat.interval.ms", "group.streams.max.heartbeat.interval.ms"),
            ("group.streams.num.standby.replicas", "group.streams.max.standby.replicas"),
            ("group.share.min.session.timeout.ms", "group.share.session.timeout.ms"),
            ("group.share.session.timeout.ms", "group.share.max.session.timeout.ms"),
            ("group.share.min.heartbeat.interval.ms", "group.share.heartbeat.interval.ms"),
            ("group.share.heartbeat.interval.ms", "group.share.max.heartbeat.interval.ms"),
            ("group.share.min.record.lock.duration.ms", "group.share.record.lock.duration.ms"),
            ("group.share.record.lock.duration.ms", "group.share.max.record.lock.duration.ms"),
            ("group.share.min.delivery.count.limit", "group.share.delivery.count.limit"),
            ("group.share.delivery.count.limit", "group.share.max.delivery.count.limit"),
            (
                "group.share.min.partition.max.record.locks",
                "group.share.partition.max.record.locks",
            ),
            (
                "group.share.partition.max.record.locks",
                "group.share.max.partition.max.record.locks",
            ),
            ("log.cleaner.min.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms"),
            ("broker.heartbeat.interval.ms", "broker.session.timeout.ms"),
        ):
            if effective[low] > effective[high]:
                blamed = low if self.is_set(low) else high
                raise self._fail(blamed, f"{low} must not exceed {high} ({effective[high]})")

        put(self, "_http", tuple(parse_http_listener(u) for u in effective["http.listeners"]))
        self._resolve_quorum()

    def _resolve_quorum(self) -> None:
        effective = self._effective
        put = object.__setattr__
        voters_name = "controller.quorum.voters"
        if self.is_set("cluster.peers"):
            if self.is_set(voters_name) and effective["cluster.peers"] != effective[voters_name]:
                raise self._fail("cluster.peers", f"differs from {voters_name}; set only one")
            effective[voters_name] = effective["cluster.peers"]
            voters_name = "cluster.peers"
        peers = tuple(parse_peer(p) for p in effective[voters_name])
        ids = [p.node_id for p in peers]
        if len(set(ids)) != len(ids):
            raise self._fail(voters_name, "names a node id twice")
        put(self, "_peers", peers)
        controller_endpoints = tuple(
            e for e in self._endpoints if e.name in self._controller_listeners
        )
        try:
            quorum = resolve_quorum(
                node_id=effective["node.id"],
                roles=effective["process.roles"],
                voters=peers,
                bootstrap_servers=effective["controller.quorum.bootstrap.servers"],
                controller_endpoints=controller_endpoints,
                raft_listener=effective["controller.raft.listener"],
                secret=effective["cluster.secret"],
            )
        except ValueError as exc:
            name, _, reason = str(exc).partition(": ")
            if name == "controller.quorum.voters":
                name = voters_name
            shown = "[hidden]" if BROKER_CONFIGS[name].is_sensitive else self._values[name]
            raise _invalid(name, shown, self._sources[name], reason) from None
        put(self, "_quorum", quorum)
        if quorum.is_cluster:
            # Kafka's defaults, which kbroker lowers only for a single node.
            for name, kafka_default in CLUSTER_DEFAULTS.items():
                if not self.is_set(name):
                    effective[name] = kafka_default

    def _first_of_group(self, group: Sequence[str]) -> Any:
        primary = self._values[group[0]]
        if primary is not None:
            return primary
        for name in group[1:]:
            value = self._values[name]
            if value is None:
                continue
            if name.endswith(".hours"):
                return value * MS_PER_HOUR
            if name.endswith(".minutes"):
                return value * MS_PER_MINUTE
            return value
        return None

    def _resolve_listeners(self) -> None:
        effective = self._effective
        put = object.__setattr__
        protocol_map = parse_protocol_map(effective["listener.security.protocol.map"])
        controller_text = effective["controller.listener.names"] or ""
        controller = frozenset(n.strip().upper() for n in controller_text.split(",") if n.strip())
        endpoints = tuple(parse_listeners(effective["listeners"]))
        broker_endpoints = [e for e in endpoints if e.name not in controller]
        controller_only = set(effective["process.roles"]) == {"controller"}
        if controller_only and broker_endpoints:
            raise self._fail(
                "listeners",
                "a controller-only node (process.roles=controller) may only have the "
                "listeners named in controller.listener.names",
            )
        if not broker_endpoints and not controller_only:
            raise self._fail("listeners", "no listener serves the Kafka API")
        for endpoint in endpoints:
            protocol = protocol_map.get(endpoint.name)
            if protocol is None:
                if endpoint.name in controller and not self.is_set(
                    "listener.security.protocol.map"
                ):
                    protocol = protocol_map[endpoint.name] = "PLAINTEXT"
                else:
                    raise self._fail(
                        "listeners",
                        f"listener {endpoint.name} has no entry in listener.security.protocol.map",
                    )
        ports = [e.port for e in endpoints if e.port != 0]
        if len(set(ports)) != len(ports):
            raise self._fail("listeners", "two listeners share a port")

        advertised_text = effective["advertised.listeners"]
        if advertised_text is None or not advertised_text.strip():
            host = advertised_host_name()
            advertised = tuple(
                e._replace(host=host) if e.is_wildcard else e for e in broker_endpoints
            )
        else:
            try:
                advertised = tuple(
                    e for e in parse_listeners(advertised_text) if e.name not in controller
                )
            except ValueError as exc:
                raise self._fail("advertised.listeners", str(exc)) from None
            names = {e.name for e in broker_endpoints}
            for endpoint in advertised:
                if endpoint.name not in names:
                    raise self._fail(
                        "advertised.listeners", f"listener {endpoint.name} is not in listeners"
                    )
                if endpoint.is_wildcard:
                    raise self._fail(
                        "advertised.listeners", f"cannot advertise wildcard host in {endpoint}"
                    )
                if endpoint.port == 0:
                    raise self._fail(
                        "advertised.listeners", f"cannot advertise port 0 in {endpoint}"
                    )
        effective["advertised.listeners"] = ",".join(str(e) for e in advertised)

        inter_name = effective["inter.broker.listener.name"]
        if inter_name is not None and self.is_set("security.inter.broker.protocol"):
            raise self._fail(
                "inter.broker.listener.name",
                "set only one of inter.broker.listener.name and security.inter.broker.protocol",
            )
        advertised_names = [e.name for e in advertised]
        if controller_only:
            pass  # no broker listener: nothing to reach other brokers on
        elif self.is_set("security.inter.broker.protocol"):
            # Kafka's older spelling names the listener by its protocol.
            inter_name = effective["security.inter.broker.protocol"]
            if inter_name not in advertised_names:
                raise self._fail(
                    "security.inter.broker.protocol",
                    f"no broker listener named {inter_name}; name the inter-broker listener "
                    "with inter.broker.listener.name instead",
                )
        elif inter_name is None:
            inter_name = "PLAINTEXT" if "PLAINTEXT" in advertised_names else advertised_names[0]
        elif inter_name.upper() not in advertised_names:
            raise self._fail("inter.broker.listener.name", f"no broker listener named {inter_name}")
        if inter_name is not None:
            effective["inter.broker.listener.name"] = inter_name.upper()

        names = {e.name.lower() for e in endpoints}
        if effective.get("schema.registry.listeners"):
            names.add("schema_registry")  # the registry's ssl.* and OAUTHBEARER settings
        for scoped in self._scoped:
            listener = scoped[len(_SCOPED) :].partition(".")[0]
            if listener not in names:
                raise ConfigError(
                    f"setting {scoped} names listener {listener.upper()}, which is not in "
                    "listeners",
                    setting=scoped,
                )
        put(self, "_protocol_map", protocol_map)
        put(self, "_controller_listeners", controller)
        put(self, "_endpoints", endpoints)
        put(self, "_advertised", advertised)


def _scala_set(names: Iterable[str]) -> str:
    """A set of names as Kafka's messages print them (Scala's ``Set(a, b)``)."""
    return "Set(" + ", ".join(sorted(names)) + ")"


def _names_refused(message: str, names: list[str]) -> ConfigError:
    """Kafka's refusal of several names at once: ``<message>: Set(a, b)``."""
    return ConfigError(f"{message}: {_scala_set(names)}", setting=names[0])


def dynamic_definition(name: str) -> Any:
    """The definition behind a dynamic name, plain or listener-prefixed; None if unknown."""
    return BROKER_CONFIGS.get(name) or listener_scoped_definition(name)


def validate_dynamic_broker_configs(
    configs: Mapping[str, str | None], per_broker: bool = True
) -> dict[str, Any]:
    """Check the dynamic settings a BROKER resource would hold, in Kafka's order
    (DynamicBrokerConfig.validateConfigs): a name that cannot change at run time, then a
    security setting without its listener prefix, then each value, then a per-broker
    setting on the cluster default (``per_broker`` False). Returns the parsed values.

    A None value means "delete the dynamic value" and is skipped. Raises ConfigError
    with Kafka's message. A name kbroker does not know is accepted and left out of the
    result, as Kafka 4.3 stores a custom name for a plugin to read (its check refuses
    only the names it knows to be read-only); kbroker has no plugin that reads one.
    """
    names = [n for n, v in configs.items() if v is not None and dynamic_definition(n)]
    not_dynamic = []
    unprefixed = []
    one_broker = []  # listener-prefixed and other per-broker names
    for name in names:
        definition = dynamic_definition(name)
        if name.startswith(_SCOPED):
            scoped = listener_setting(name)
            if scoped is not None and scoped[1] in CLUSTER_LEVEL_LISTENER_SETTINGS:
                continue  # a listener's max.connections: per broker or cluster default
            if definition.mode is not UpdateMode.PER_BROKER:
                not_dynamic.append(name)
            one_broker.append(name)
        elif definition.mode is UpdateMode.READ_ONLY:
            not_dynamic.append(name)
        elif name in LISTENER_ONLY_DYNAMIC:
            unprefixed.append(name)
        elif definition.mode is UpdateMode.PER_BROKER:
            one_broker.append(name)
    if not_dynamic:
        raise _names_refused("Cannot update these configs dynamically", not_dynamic)
    if unprefixed:
        raise _names_refused(
            "These security configs can be dynamically updated only per-listener using the "
            "listener prefix",
            unprefixed,
        )
    parsed: dict[str, Any] = {}
    for name in names:
        value = configs[name]
        assert value is not None
        try:
            parsed[name] = dynamic_definition(name).parse(value)
        except ValueError as exc:
            shown = "[hidden]" if dynamic_definition(name).is_sensitive else value
            raise ConfigError(
                f"Invalid value {shown} for configuration {name}: {exc}", setting=name
            ) from None
    if not per_broker and one_broker:
        raise _names_refused(
            "Cannot update these configs at default cluster level, broker id must be specified",
            one_broker,
        )
    return parsed


def refuse_unapplied_kafka_names(configs: Mapping[str, str | None]) -> None:
    """Refuse setting a name of Kafka's own that kbroker does not have (kafka_names):
    stored, it would do nothing. A read-only one gets Kafka's own message. Checked on
    AlterConfigs only, so that such a name stored before cannot stop a broker applying
    the dynamic configs it holds. Raises ConfigError."""
    read_only: list[str] = []
    unapplied: list[str] = []
    for name, value in configs.items():
        if value is None or dynamic_definition(name) is not None:
            continue
        scoped = listener_setting(name)
        base = scoped[1] if scoped is not None else name
        # A SASL setting may carry the mechanism too: listener.name.l.plain.sasl.jaas.config
        bases = {base, base.partition(".")[2]} if scoped is not None else {base}
        if bases & KAFKA_READ_ONLY_UNKNOWN:
            read_only.append(name)
        elif bases & KAFKA_DYNAMIC_NOT_APPLIED:
            unapplied.append(name)
    if read_only:
        raise _names_refused("Cannot update these configs dynamically", read_only)
    if unapplied:
        raise _names_refused("kbroker does not apply these Kafka configs", unapplied)


def load_broker_config(
    config_file: Path | str | None = None,
    overrides: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
) -> BrokerConfig:
    """Defaults < ``config_file`` < ``KBROKER_*`` in ``environ`` < ``overrides`` (name=value).

    ``environ`` defaults to the process environment. Raises ConfigError naming the
    setting and its origin on the first unknown, malformed or inconsistent value.
    """
    raw: list[RawSetting] = []
    if config_file is not None:
        raw.extend(settings_from_file(Path(config_file)))
    raw.extend(settings_from_environ(os.environ if environ is None else environ))
    raw.extend(settings_from_overrides(overrides))
    return BrokerConfig(parse_layer(raw))
