"""Turns a Report into the printed table, the same-run ratios and the JSON file."""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from bench.results import Report, Row

# (label, numerator (peer, workload, variant, metric), denominator (...)).
# The first group is what the benchmark exists for; the rest give context.
RATIOS: list[tuple[str, tuple[str, str, str, str], tuple[str, str, str, str]]] = [
    ("produce 100 B msg/s: kbroker / mock",
     ("kbroker", "produce", "100 B", "msg_per_s"), ("mock", "produce", "100 B", "msg_per_s")),
    ("produce 1 KiB msg/s: kbroker / mock",
     ("kbroker", "produce", "1 KiB", "msg_per_s"), ("mock", "produce", "1 KiB", "msg_per_s")),
    ("one-at-a-time acks/s: kbroker / mock",
     ("kbroker", "oneatatime", "100 B", "acks_per_s"), ("mock", "oneatatime", "100 B", "acks_per_s")),
    ("consume 100 B msg/s: kbroker / redis XRANGE read-back",
     ("kbroker", "consume", "100 B", "msg_per_s"), ("redis", "consume", "100 B", "msg_per_s")),
    ("consume 1 KiB msg/s: kbroker / redis XRANGE read-back",
     ("kbroker", "consume", "1 KiB", "msg_per_s"), ("redis", "consume", "1 KiB", "msg_per_s")),
    ("one-at-a-time acks/s: kbroker fsync-before-ack / redis appendfsync always",
     ("kbroker-fsync", "oneatatime", "100 B", "acks_per_s"),
     ("redis", "oneatatime", "100 B", "acks_per_s")),
    ("produce 100 B msg/s: kbroker / Apache Kafka",
     ("kbroker", "produce", "100 B", "msg_per_s"), ("kafka", "produce", "100 B", "msg_per_s")),
    ("produce 1 KiB msg/s: kbroker / Apache Kafka",
     ("kbroker", "produce", "1 KiB", "msg_per_s"), ("kafka", "produce", "1 KiB", "msg_per_s")),
    ("consume 100 B msg/s: kbroker / Apache Kafka",
     ("kbroker", "consume", "100 B", "msg_per_s"), ("kafka", "consume", "100 B", "msg_per_s")),
    ("consume 1 KiB msg/s: kbroker / Apache Kafka",
     ("kbroker", "consume", "1 KiB", "msg_per_s"), ("kafka", "consume", "1 KiB", "msg_per_s")),
    ("one-at-a-time acks/s: kbroker / Apache Kafka",
     ("kbroker", "oneatatime", "100 B", "acks_per_s"), ("kafka", "oneatatime", "100 B", "acks_per_s")),
    ("one-at-a-time p99 latency: kbroker / Apache Kafka",
     ("kbroker", "oneatatime", "100 B", "p99_ms"), ("kafka", "oneatatime", "100 B", "p99_ms")),
    ("one-at-a-time acks/s, fsync before ack: kbroker / Apache Kafka",
     ("kbroker-fsync", "oneatatime", "100 B", "acks_per_s"),
     ("kafka-fsync", "oneatatime", "100 B", "acks_per_s")),
    ("start-up to first Metadata: kbroker / Apache Kafka",
     ("kbroker", "startup", "empty", "first_metadata_s"), ("kafka", "startup", "empty", "first_metadata_s")),
    ("RSS after the runs: kbroker / Apache Kafka",
     ("kbroker", "memory", "after runs", "rss_mib"), ("kafka", "memory", "after runs", "rss_mib")),
    # context
    ("consume 100 B msg/s: kbroker / mock",
     ("kbroker", "consume", "100 B", "msg_per_s"), ("mock", "consume", "100 B", "msg_per_s")),
    ("consume 1 KiB msg/s: kbroker / mock",
     ("kbroker", "consume", "1 KiB", "msg_per_s"), ("mock", "consume", "1 KiB", "msg_per_s")),
    ("produce 100 B msg/s: kbroker / redis pipelined XADD",
     ("kbroker", "produce", "100 B", "msg_per_s"), ("redis", "produce", "100 B", "msg_per_s")),
    ("one-at-a-time p50 latency: kbroker / mock",
     ("kbroker", "oneatatime", "100 B", "p50_ms"), ("mock", "oneatatime", "100 B", "p50_ms")),
    ("one-at-a-time acks/s: kbroker fsync-before-ack / kbroker default flush",
     ("kbroker-fsync", "oneatatime", "100 B", "acks_per_s"),
     ("kbroker", "oneatatime", "100 B", "acks_per_s")),
    ("produce 100 B msg/s: mock / redis pipelined XADD",
     ("mock", "produce", "100 B", "msg_per_s"), ("redis", "produce", "100 B", "msg_per_s")),
    ("consume 100 B msg/s: mock / redis XRANGE read-back",
     ("mock", "consume", "100 B", "msg_per_s"), ("redis", "consume", "100 B", "msg_per_s")),
    ("one-at-a-time acks/s: mock (no disk) / redis appendfsync always",
     ("mock", "oneatatime", "100 B", "acks_per_s"), ("redis", "oneatatime", "100 B", "acks_per_s")),
]  # fmt: skip

WORKLOAD_LABELS = {
    ("redis", "produce"): "XADD pipelined",
    ("redis", "consume"): "XRANGE read-back",
    ("redis", "oneatatime"): "XADD one-at-a-time",
    ("*", "produce"): "produce batched",
    ("*", "oneatatime"): "one-at-a-time",
}


def workload_label(peer: str, workload: str) -> str:
    return WORKLOAD_LABELS.get((peer, workload), WORKLOAD_LABELS.get(("*", workload), workload))


def _metric_by_round(report: Report, key: tuple[str, str, str, str]) -> dict[int, float]:
    peer, workload, variant, metric = key
    out = {}
    for row in report.rounds_of((peer, workload, variant)):
        value = row.metrics.get(metric)
        if value is not None:
            out[row.round] = float(value)
    return out


def ratios(report: Report) -> list[dict]:
    """Each ratio is the median of per-round ratios: rounds are interleaved in time, so
    pairing numerator and denominator by round cancels part of a shared machine's drift.
    """
    out = []
    for label, num, den in RATIOS:
        a, b = _metric_by_round(report, num), _metric_by_round(report, den)
        per_round = [a[r] / b[r] for r in sorted(a) if r in b and b[r]]
        missing = [key[0] for key, v in ((num, a), (den, b)) if not v]
        out.append(
            {
                "ratio": label,
                "value": round(statistics.median(per_round), 3) if per_round else None,
                "per_round": [round(x, 3) for x in per_round],
                "missing": sorted(set(missing)),
            }
        )
    return out


def _fmt(value, digits: int = 0) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, float) or digits:
        return f"{float(value):,.{digits}f}"
    return f"{value:,}"


def _per_record_us(row: Row, key: str) -> str:
    n = row.metrics.get("records") or 0
    cpu = row.metrics.get(key)
    return _fmt(cpu / n * 1e6, 2) if n and cpu is not None else "-"


def _cores(row: Row, key: str) -> str:
    """CPU seconds spent during the run, as a number of cores busy on average."""
    cpu, secs = row.metrics.get(key), row.metrics.get("seconds")
    return _fmt(cpu / secs, 2) if cpu is not None and secs else "-"


def _table(headers: list[str], rows: list[list[str]], left: int = 1, md: bool = False) -> str:
    """Text (or Markdown) table: the first `left` columns and the last are text, the rest numbers."""
    last = len(headers) - 1
    if md:
        align = ["---" if i < left or i == last else "---:" for i in range(len(headers))]
        lines = [headers, align, *rows]
        return "\n".join("| " + " | ".join(c.replace("|", "/") for c in r) + " |" for r in lines)
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]

    def cell(i: int, text: str) -> str:
        return text.ljust(widths[i]) if i < left or i == last else text.rjust(widths[i])

    out = ["  ".join(cell(i, h) for i, h in enumerate(headers)).rstrip()]
    out.append("-" * len(out[0]))
    out += ["  ".join(cell(i, c) for i, c in enumerate(r)).rstrip() for r in rows]
    return "\n".join(out)


def throughput_table(report: Report, md: bool = False) -> str:
    headers = ["peer", "workload", "size", "records", "seconds", "msg/s", "MiB/s",
               "p50 ms", "p99 ms", "broker CPU us/rec", "client CPU us/rec", "kernel CPUs", "others' CPUs", "note"]  # fmt: skip
    repeated = report.settings.get("repeat", 1) > 1
    if repeated:
        headers.insert(6, "msg/s range")
    rows = []
    for key in report.row_keys():
        r = report.representative(key)
        if r is None or r.workload in ("memory", "partitions", "setup", "startup"):
            continue
        m = r.metrics
        rate = m.get("msg_per_s", m.get("acks_per_s"))
        notes = [r.note] if r.note else []
        if m.get("truncated"):
            notes.append("time limit hit")
        if m.get("errors"):
            notes.append(f"{m['errors']} errors")
        rows.append([
            r.peer, workload_label(r.peer, r.workload), r.variant,
            _fmt(m.get("records")), _fmt(m.get("seconds"), 2), _fmt(rate),
            _fmt(m.get("mib_per_s"), 1) if "mib_per_s" in m else "-",
            _fmt(m.get("p50_ms"), 3) if "p50_ms" in m else "-",
            _fmt(m.get("p99_ms"), 3) if "p99_ms" in m else "-",
            _per_record_us(r, "broker_cpu_s"), _per_record_us(r, "client_cpu_s"),
            _cores(r, "kernel_cpu_s"), _cores(r, "other_cpu_s"),
            "; ".join(notes),
        ])  # fmt: skip
        if repeated:
            rates = [x.rate for x in report.rounds_of(key) if x.rate is not None]
            rows[-1].insert(6, f"{_fmt(min(rates))}-{_fmt(max(rates))}" if rates else "-")
    return _table(headers, rows, left=3, md=md)


def memory_table(report: Report, md: bool = False) -> str:
    headers = ["peer", "what", "figure", "note"]
    rows = []
    for row_key in report.row_keys():
        r = report.representative(row_key)
        if r is None or r.workload not in ("memory", "partitions", "setup", "startup"):
            continue
        if not r.metrics:
            rows.append([r.peer, r.workload, "-", r.note])
        for key, value in r.metrics.items():
            digits = 3 if key.endswith("_s") else 0 if key == "records" else 1
            rows.append([r.peer, f"{r.variant}: {key}", _fmt(value, digits), r.note])
    return _table(headers, rows, left=2, md=md)


def machine_summary(machine: dict, md: bool = False) -> str:
    if not machine:
        return "machine: not measured (--skip-machine)"
    lp, ip = machine["loopback_python"], machine.get("loopback_iperf3")
    rt, fs, fds = machine["loopback_round_trip"], machine["fsync_4k"], machine["fdatasync_4k"]
    sw, soft = machine["sequential_write"], machine.get("software", {})
    lines = [
        f"CPU: {machine['cpu_model']}, nproc {machine['nproc']} (clients and brokers share them), "
        f"{machine['mem_total_mib']:,} MiB RAM, load average at start "
        f"{' '.join(machine['loadavg_at_start'])}",
        f"loopback: one Python TCP stream {lp['mib_per_s']:,} MiB/s"
        + (f", iperf3 {ip['mib_per_s']:,} MiB/s" if ip else "")
        + f"; Python 64 B round trip p50 {rt['p50_us']} us, p99 {rt['p99_us']} us",
        f"disk {machine['filesystem']}: 4 KiB append+fsync {fs['syncs_per_s']:,}/s "
        f"(p50 {fs['p50_ms']} ms, p99 {fs['p99_ms']} ms), append+fdatasync "
        f"{fds['syncs_per_s']:,}/s (p50 {fds['p50_ms']} ms); sequential write "
        f"{sw['with_fsync_mib_per_s']:,} MiB/s including the final fsync",
    ]
    if soft:
        lines.append("software: " + ", ".join(f"{k} {v}" for k, v in soft.items()))
    prefix = "- " if md else ""
    return "\n".join(prefix + line for line in lines)


def render(report: Report, md: bool = False) -> str:
    settings = report.settings
    parts = [machine_summary(report.machine, md), ""]
    if settings.get("repeat", 1) > 1:
        parts += [f"figures: median of {settings['repeat']} interleaved rounds", ""]
    parts += [throughput_table(report, md), "", memory_table(report, md), ""]
    rows = []
    for r in ratios(report):
        value = (
            f"{r['value']:.3f}" if r["value"] is not None else f"n/a (no {', '.join(r['missing'])})"
        )
        rounds = " ".join(f"{x:.3f}" for x in r["per_round"]) if len(r["per_round"]) > 1 else ""
        rows.append([r["ratio"], value, rounds])
    title = "same-run ratios" + (
        " (median of per-round ratios)" if settings.get("repeat", 1) > 1 else ""
    )
    parts += [title + ":", "", _table(["ratio", "value", "per round"], rows, left=1, md=md)]
    if report.skipped:
        parts.append("")
        for peer, why in report.skipped.items():
            parts.append(f"SKIPPED {peer}: {why}")
    return "\n".join(parts)


def write_json(report: Report, path: Path) -> None:
    payload = {
        "settings": report.settings,
        "machine": report.machine,
        "rows": [r.to_json() for r in report.rows],
        "ratios": ratios(report),
        "skipped": report.skipped,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2) + "\n")


def load_json(path: Path) -> Report:
    data = json.loads(path.read_text())
    return Report(
        rows=[Row(**row) for row in data["rows"]],
        skipped=data.get("skipped", {}),
        machine=data.get("machine", {}),
        settings=data.get("settings", {}),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description="Re-render a bench/run.py --json file.")
    parser.add_argument("json", type=Path)
    parser.add_argument("--markdown", action="store_true", help="Markdown tables for docs/")
    args = parser.parse_args()
    print(render(load_json(args.json), md=args.markdown))


if __name__ == "__main__":
    main()
