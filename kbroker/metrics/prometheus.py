"""Prometheus text exposition of the broker's state, computed when scraped."""

from __future__ import annotations

import os
import resource
from typing import Any

from kbroker.protocol.messages import API_NAMES


def _line(name: str, value: float, labels: dict[str, Any] | None = None) -> str:
    if labels:
        inner = ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items())
        return f"{name}{{{inner}}} {value}"
    return f"{name} {value}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _family(out: list[str], name: str, kind: str, help_text: str) -> None:
    out.append(f"# HELP {name} {help_text}")
    out.append(f"# TYPE {name} {kind}")


def render(broker: Any) -> str:
    counters = broker.counters
    out: list[str] = []
    _family(out, "kbroker_requests_total", "counter", "Requests received, by API.")
    for key, n in sorted(counters.requests.items()):
        out.append(_line("kbroker_requests_total", n, {"api": API_NAMES.get(key, key)}))
    _family(out, "kbroker_bad_requests_total", "counter", "Connections closed over bad input.")
    out.append(_line("kbroker_bad_requests_total", counters.bad_requests))
    _family(out, "kbroker_network_bytes_total", "counter", "Bytes received and sent.")
    out.append(_line("kbroker_network_bytes_total", counters.bytes_in, {"direction": "in"}))
    out.append(_line("kbroker_network_bytes_total", counters.bytes_out, {"direction": "out"}))
    _family(out, "kbroker_connections", "gauge", "Open client connections.")
    out.append(_line("kbroker_connections", len(broker.connections)))
    awake = broker.keep_awake
    _family(
        out,
        "kbroker_busy_poll_answers_total",
        "counter",
        "Answers by whether a request followed within socket.busy.poll.us.",
    )
    out.append(_line("kbroker_busy_poll_answers_total", awake.hits, {"outcome": "hit"}))
    out.append(_line("kbroker_busy_poll_answers_total", awake.misses, {"outcome": "miss"}))
    _family(out, "kbroker_busy_poll_spins_total", "counter", "Busy-polling spells started.")
    out.append(_line("kbroker_busy_poll_spins_total", awake.spins))
    _family(out, "kbroker_produced_bytes_total", "counter", "Record bytes appended by producers.")
    out.append(_line("kbroker_produced_bytes_total", counters.produced_bytes))
    _family(out, "kbroker_partitions", "gauge", "Partitions held by this broker.")
    out.append(_line("kbroker_partitions", len(broker.replicas.replicas)))
    _family(out, "kbroker_log_end_offset", "gauge", "Next offset to be written, by partition.")
    _family(out, "kbroker_log_start_offset", "gauge", "First offset kept, by partition.")
    _family(out, "kbroker_log_size_bytes", "gauge", "Bytes on disk, by partition.")
    for (topic, partition), replica in sorted(broker.replicas.replicas.items()):
        labels = {"topic": topic, "partition": partition}
        plog = replica.log
        out.append(_line("kbroker_log_end_offset", plog.log_end_offset, labels))
        out.append(_line("kbroker_log_start_offset", plog.log_start_offset, labels))
        out.append(_line("kbroker_log_size_bytes", plog.size_bytes(), labels))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    _family(out, "process_cpu_seconds_total", "counter", "CPU time of the broker process.")
    out.append(_line("process_cpu_seconds_total", usage.ru_utime + usage.ru_stime))
    _family(out, "process_resident_memory_bytes", "gauge", "Resident memory.")
    out.append(_line("process_resident_memory_bytes", _rss_bytes()))
    for extra in broker.extra_metrics:
        out.extend(extra())
    return "\n".join(out) + "\n"


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0
