"""The metric table of docs/operations.md, from the metric families the code defines.

Every family kbroker exports on /metrics is built by a ``*MetricFamily(name, help,
labels=...)`` call in kbroker/ (the collectors of kbroker/metrics/prometheus.py and the
group, share and transaction services); this module finds them in the source, so the
page lists exactly what a scrape can show.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent
BEGIN = "<!-- BEGIN generated metrics (make docs) -->"
END = "<!-- END generated metrics -->"
_KINDS = {
    "CounterMetricFamily": "counter",
    "GaugeMetricFamily": "gauge",
    "HistogramMetricFamily": "histogram",
}


@dataclass(frozen=True, slots=True)
class MetricFamily:
    name: str
    kind: str
    labels: tuple[str, ...]
    help: str
    module: str

    @property
    def exposed(self) -> str:
        """The name a scrape shows (prometheus-client's suffixes)."""
        if self.kind == "counter":  # the client strips a "_total" of the name, then adds one
            return self.name if self.name.endswith("_total") else f"{self.name}_total"
        if self.kind == "histogram":
            return f"{self.name}_bucket"
        return self.name


def _text(node: ast.expr | None) -> str:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else ""


def metric_families(package: Path = PACKAGE) -> list[MetricFamily]:
    found: dict[str, MetricFamily] = {}
    for path in sorted(package.rglob("*.py")):
        source = path.read_text()
        if "MetricFamily(" not in source:
            continue
        for node in ast.walk(ast.parse(source, str(path))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called not in _KINDS or not node.args:
                continue
            name = _text(node.args[0])
            if not name:
                raise ValueError(f"{path}:{node.lineno}: a metric family without a literal name")
            labels: tuple[str, ...] = ()
            for keyword in node.keywords:
                if keyword.arg == "labels" and isinstance(keyword.value, ast.List | ast.Tuple):
                    labels = tuple(_text(element) for element in keyword.value.elts)
            help_text = _text(node.args[1]) if len(node.args) > 1 else ""
            module = path.relative_to(package.parent).as_posix()
            found.setdefault(name, MetricFamily(name, _KINDS[called], labels, help_text, module))
    return sorted(found.values(), key=lambda family: family.name)


def render_section() -> str:
    families = metric_families()
    lines = [
        BEGIN,
        "",
        "| metric | type | labels | what it counts | defined in |",
        "| --- | --- | --- | --- | --- |",
    ]
    for family in families:
        labels = ", ".join(f"`{label}`" for label in family.labels) or "-"
        lines.append(
            f"| `{family.exposed}` | {family.kind} | {labels} | "
            f"{family.help.replace('|', '/')} | `{family.module}` |"
        )
    lines += ["", END]
    return "\n".join(lines)


def with_section(page: str) -> str:
    """``page`` with the text between its markers replaced by the current table."""
    start, end = page.find(BEGIN), page.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the page has no {BEGIN} ... {END} section")
    return page[:start] + render_section() + page[end + len(END) :]
