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
    """One line of the report: a peer's figures for one workload variant in one round."""

    peer: str
    workload: str
    variant: str
    metrics: dict[str, float] = field(default_factory=dict)
    note: str = ""
    round: int = 0

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.peer, self.workload, self.variant)

    @property
    def rate(self) -> float | None:
        value = self.metrics.get("msg_per_s", self.metrics.get("acks_per_s"))
        return float(value) if value is not None else None

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class Report:
    """Everything one run measured, in order; with --repeat, one row per key per round.

    Figures quoted from a repeated run (table, ratios) are each key's median round:
    the machine is shared, and a neighbour's burst only ever slows a round down.
    """

    rows: list[Row] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # peer -> reason
    machine: dict = field(default_factory=dict)
    settings: dict = field(default_factory=dict)
    round: int = 0

    def add(self, peer: str, workload: str, variant: str, metrics: dict, note: str = "") -> Row:
        row = Row(peer, workload, variant, dict(metrics), note, self.round)
        self.rows.append(row)
        return row

    def row_keys(self) -> list[tuple[str, str, str]]:
        """Distinct (peer, workload, variant) in the order first measured."""
        return list(dict.fromkeys(r.key for r in self.rows))

    def rounds_of(self, key: tuple[str, str, str]) -> list[Row]:
        return [r for r in self.rows if r.key == key]

    def representative(self, key: tuple[str, str, str]) -> Row | None:
        """The median round by rate (the lower median for an even count); else the last."""
        rows = self.rounds_of(key)
        rated = sorted((r for r in rows if r.rate is not None), key=lambda r: r.rate)
        if rated:
            return rated[(len(rated) - 1) // 2]
        return rows[-1] if rows else None

    def current(self, peer: str, workload: str, variant: str, metric: str) -> float | None:
        """A figure from the round being measured (e.g. how many records produce stored)."""
        for row in reversed(self.rows):
            if row.key == (peer, workload, variant) and row.round == self.round:
                value = row.metrics.get(metric)
                return float(value) if value is not None else None
        return None

    def get(self, peer: str, workload: str, variant: str, metric: str) -> float | None:
        row = self.representative((peer, workload, variant))
        if row is None:
            return None
        value = row.metrics.get(metric)
        return float(value) if value is not None else None
