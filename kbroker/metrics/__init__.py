"""Broker metrics: plain counters on the hot path, rendered as Prometheus text on scrape."""
