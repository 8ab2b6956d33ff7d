"""A tiny HTTP/1.1 server for /metrics, /health and /ready (no framework needed for three GETs).

/health answers 503 naming what is unhealthy (kbroker.metrics.health); /ready 503 until
the broker serves and once it stops.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from kbroker.metrics.health import (
    broker_controller_check,
    log_dir_check,
    report,
    storage_checks,
)
from kbroker.metrics.prometheus import broker_registry, render_families

if TYPE_CHECKING:
    from kbroker.config.listeners import Endpoint
    from kbroker.metrics.broker_view import MeteredBroker

log = logging.getLogger("kbroker.http")

_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}


class HttpEndpoint:
    def __init__(self, broker: MeteredBroker) -> None:
        self.broker = broker
        self.registry = broker_registry(broker)
        self.servers: list[asyncio.AbstractServer] = []

    async def start(self, endpoints: Iterable[Endpoint]) -> None:
        """Serve every configured HTTP listener. One that cannot bind stops the start
        (OSError naming it), as a Kafka listener does: a node running on without the
        /health and /ready its probes ask for would look dead or never ready."""
        for endpoint in endpoints:
            try:
                server = await asyncio.start_server(
                    self._serve, endpoint.host or None, endpoint.port
                )
            except OSError as exc:
                await self.stop()
                raise OSError(
                    f"cannot serve HTTP (http.listeners) on {endpoint.host or '0.0.0.0'}:"
                    f"{endpoint.port}: {os.strerror(exc.errno) if exc.errno else exc}",
                ) from None
            self.servers.append(server)
            log.info(
                "serving /metrics /health /ready on http://%s:%d", endpoint.host, endpoint.port
            )

    async def stop(self) -> None:
        servers, self.servers = self.servers, []
        for server in servers:
            server.close()

    async def _answer(self, method: str, path: str) -> tuple[int, str, str]:
        if method != "GET":
            return 405, "text/plain", "GET only\n"
        path = path.split("?", 1)[0]
        if path == "/metrics":
            # The families are collected on the event loop (they read the broker's
            # state, which only the loop changes) and written out as text in a worker
            # thread: the text is most of a scrape's CPU (tens of milliseconds with a
            # few hundred partitions), which would otherwise hold the loop in one step.
            families = list(self.registry.collect())
            text = await asyncio.to_thread(render_families, families)
            return 200, "text/plain; version=0.0.4", text
        if path == "/health":
            dirs = list(self.broker.log_dirs)
            loop = asyncio.get_running_loop()
            checks = await loop.run_in_executor(None, lambda: [log_dir_check(d) for d in dirs])
            checks += storage_checks(self.broker.logs.offline_dirs, self.broker.logs.failed)
            healthy, found = report([*checks, broker_controller_check(self.broker)])
            return (200 if healthy else 503), "application/json", json.dumps(found) + "\n"
        if path == "/ready":
            ready = self.broker.ready
            body = json.dumps({"ready": ready, "node_id": self.broker.node_id}) + "\n"
            return (200 if ready else 503), "application/json", body
        return 404, "text/plain", "not found\n"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = await asyncio.wait_for(reader.readline(), 10)
            while True:  # headers, ignored
                line = await asyncio.wait_for(reader.readline(), 10)
                if line in (b"\r\n", b"\n", b""):
                    break
            parts = request_line.decode("latin-1").split()
            if len(parts) < 2:
                return
            status, ctype, body = await self._answer(parts[0], parts[1])
            data = body.encode()
            writer.write(
                f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
                + data
            )
            await writer.drain()
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
