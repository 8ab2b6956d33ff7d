"""Measurement records: what a workload returns and how a row of the report is kept."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

MIB = 1024 * 1024


@dataclass
class Throughput:
    """A bulk transfer: `records` of `nbytes` total moved in `seconds`."""

    records: int
    nbytes: int
    seconds: float
    errors: int = 0
    truncated: bool = False  # stopped by the time limit before all records were moved

    def metrics(self) -> dict[str, float]:
        secs = max(self.seconds, 1e-9)
        return {
            "records": self.records,
            "seconds": round(self.seconds, 4),
            "msg_per_s": round(self.records / secs, 1),
            "mib_per_s": round(self.nbytes / MIB / secs, 2),
            "errors": self.errors,
            "truncated": int(self.truncated),
        }


@dataclass
class Latency:
    """Request/acknowledge one record at a time; `samples` are per-record seconds."""

    samples: list[float]
    seconds: float
    errors: int = 0

    def metrics(self) -> dict[str, float]:
        n = len(self.samples)
        ordered = sorted(self.samples)

        def pct(p: float) -> float:
            return ordered[min(n - 1, int(p * n))] * 1000 if n else 0.0

        return {
            "records": n,
            "seconds": round(self.seconds, 4),
            "acks_per_s": round(n / max(self.seconds, 1e-9), 1),
            "p50_ms": round(pct(0.50), 3),
            "p99_ms": round(pct(0.99), 3),
            "mean_ms": round(statistics.fmean(self.samples) * 1000, 3) if n else 0.0,
            "max_ms": round(ordered[-1] * 1000, 3) if n else 0.0,
            "errors": self.errors,
        }


@dataclass
class Row:
    """One line of the report: a peer's figures for one workload variant."""

    peer: str
    workload: str
    variant: str
    metrics: dict[str, float] = field(default_factory=dict)
    note: str = ""

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class Report:
    """Everything one run measured, kept in the order it was measured."""

    rows: list[Row] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # peer -> reason
    machine: dict = field(default_factory=dict)
    settings: dict = field(default_factory=dict)

    def add(self, peer: str, workload: str, variant: str, metrics: dict, note: str = "") -> Row:
        row = Row(peer, workload, variant, dict(metrics), note)
        self.rows.append(row)
        return row

    def get(self, peer: str, workload: str, variant: str, metric: str) -> float | None:
        for row in self.rows:
            if (row.peer, row.workload, row.variant) == (peer, workload, variant):
                value = row.metrics.get(metric)
                return float(value) if value is not None else None
        return None
