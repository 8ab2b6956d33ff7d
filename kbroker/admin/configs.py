"""Configs as kafka-configs shows and changes them: DescribeConfigs, IncrementalAlterConfigs.

Resources are named as kafka-configs names them: `--topic NAME`, `--broker ID`,
`--broker-logger ID`, `--group NAME`. Changes go through IncrementalAlterConfigs so
that setting one key leaves the others as they are.
"""

from __future__ import annotations

from dataclasses import dataclass

from kbroker.admin.client import Cluster
from kbroker.admin.topics import check

DESCRIBE_CONFIGS = 32
INCREMENTAL_ALTER_CONFIGS = 44
LIST_CONFIG_RESOURCES = 74

RESOURCE_TYPES = {"topic": 2, "broker": 4, "broker-logger": 8, "client-metrics": 16, "group": 32}
RESOURCE_NAMES = {v: k for k, v in RESOURCE_TYPES.items()}
SOURCES = {
    0: "UNKNOWN",
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "CLIENT_METRICS_CONFIG",
    8: "GROUP_CONFIG",
}
SET, DELETE = 0, 1


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    source: str
    read_only: bool
    sensitive: bool

    @property
    def is_default(self) -> bool:
        return self.source == "DEFAULT_CONFIG"


def describe_configs(
    cluster: Cluster, resource_type: str, name: str, keys: list[str] | None = None
) -> list[ConfigEntry]:
    """Every config of one resource (or only `keys`), with its source."""
    return describe_many(cluster, resource_type, [name], keys)[name]


def describe_many(
    cluster: Cluster, resource_type: str, names: list[str], keys: list[str] | None = None
) -> dict[str, list[ConfigEntry]]:
    """The configs of several resources of one type, in one DescribeConfigs request."""
    if not names:
        return {}
    response = cluster.any().call(
        DESCRIBE_CONFIGS,
        {
            "resources": [
                {
                    "resource_type": RESOURCE_TYPES[resource_type],
                    "resource_name": name,
                    "configuration_keys": keys,
                }
                for name in names
            ],
            "include_synonyms": False,
            "include_documentation": False,
        },
        versions=(1, 4),
    )
    described = {}
    for result in response.results:
        name = result.resource_name
        check(result.error_code, f"describing {resource_type} {name}", result.error_message)
        described[name] = sorted(
            (
                ConfigEntry(
                    c.name,
                    None if c.is_sensitive else c.value,
                    SOURCES.get(int(c.config_source), str(int(c.config_source))),
                    bool(c.read_only),
                    bool(c.is_sensitive),
                )
                for c in result.configs
            ),
            key=lambda c: c.name,
        )
    return described


def alter_configs(
    cluster: Cluster,
    resource_type: str,
    name: str,
    set_values: dict[str, str],
    delete: list[str],
    validate_only: bool = False,
) -> None:
    """IncrementalAlterConfigs: set some keys, delete (revert to default) others."""
    ops = [{"name": k, "config_operation": SET, "value": v} for k, v in set_values.items()]
    ops += [{"name": k, "config_operation": DELETE, "value": None} for k in delete]
    response = cluster.any().call(
        INCREMENTAL_ALTER_CONFIGS,
        {
            "resources": [
                {
                    "resource_type": RESOURCE_TYPES[resource_type],
                    "resource_name": name,
                    "configs": ops,
                }
            ],
            "validate_only": validate_only,
        },
        versions=(0, 1),
    )
    result = response.responses[0]
    check(result.error_code, f"altering {resource_type} {name}", result.error_message)


def list_config_resources(cluster: Cluster, types: list[str]) -> list[tuple[str, str]]:
    """(type, name) of every resource that has configs (ListConfigResources, KIP-1142)."""
    response = cluster.any().call(
        LIST_CONFIG_RESOURCES,
        {"resource_types": [RESOURCE_TYPES[t] for t in types]},
        versions=(1, 1),
    )
    check(response.error_code, "ListConfigResources")
    return sorted(
        (RESOURCE_NAMES.get(int(r.resource_type), str(int(r.resource_type))), r.resource_name)
        for r in response.config_resources
    )
