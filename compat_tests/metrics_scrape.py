"""A broker's /metrics as the compat tests read it: every sample by name and labels."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(http: str) -> Samples:
    """Every sample on http://`http`/metrics (`http` is host:port)."""
    with urllib.request.urlopen(f"http://{http}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def sample_key(name: str, **labels: str) -> tuple[str, frozenset[tuple[str, str]]]:
    """The key of the sample `name` with exactly these labels."""
    return name, frozenset(labels.items())


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample `name` with exactly `labels`; KeyError when the broker has none."""
    return samples[sample_key(name, **labels)]
