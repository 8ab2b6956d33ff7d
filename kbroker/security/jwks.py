"""An identity provider's signing keys, fetched from its JWKS URL and kept fresh, as
Kafka's ``RefreshingHttpsJwks`` keeps them.

The broker runs one ``JwksSource`` per URL its listeners name: fetched at start, again
every ``sasl.oauthbearer.jwks.endpoint.refresh.ms``, and at once when a client presents
a token signed with a key id the set does not hold (a key rotated at the provider); a
key id that is still missing after that is not fetched for again within a minute, so a
client sending made-up key ids cannot make the broker hammer the provider. A failed
fetch is retried after ``...retry.backoff.ms``, doubling up to ``...retry.backoff.max.ms``;
the keys fetched last stay in use meanwhile. The HTTP request runs in a worker thread,
never on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
import urllib.request
from collections.abc import Callable

from kbroker.security.jwt import Jwk, parse_jwks

log = logging.getLogger(__name__)

MAX_JWKS_BYTES = 1 << 20
MISSING_KEY_ID_PAUSE_S = 60.0
MISSING_KEY_IDS_KEPT = 16
FETCH_TIMEOUT_S = 10.0
EXPEDITED_GAP_S = 1.0


def fetch_jwks(url: str) -> tuple[Jwk, ...]:
    """GET the JWKS (blocking: run it in a thread). Raises OSError or ValueError."""
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    context = ssl.create_default_context() if url.startswith("https:") else None
    with urllib.request.urlopen(request, timeout=FETCH_TIMEOUT_S, context=context) as answer:
        body = answer.read(MAX_JWKS_BYTES + 1)
    if len(body) > MAX_JWKS_BYTES:
        raise ValueError(f"the JWKS is over {MAX_JWKS_BYTES} bytes")
    return parse_jwks(body)


class JwksSource:
    """The keys of one JWKS URL; ``run`` keeps them fresh until cancelled."""

    def __init__(
        self,
        url: str,
        refresh_ms: int,
        backoff_ms: int,
        backoff_max_ms: int,
        fetch: Callable[[str], tuple[Jwk, ...]] = fetch_jwks,
    ) -> None:
        self.url = url
        self.refresh_s = max(refresh_ms, 1000) / 1000
        self.backoff_s = max(backoff_ms, 1) / 1000
        self.backoff_max_s = max(backoff_max_ms, backoff_ms, 1) / 1000
        self.keys: tuple[Jwk, ...] = ()
        self.fetches = 0
        self._fetch = fetch
        self._wake = asyncio.Event()
        self._missed: dict[str | None, float] = {}
        self.fetched = asyncio.Event()  # set once a fetch has succeeded
        self._fetched_at = 0.0

    def missed(self, kid: str | None) -> None:
        """A token named a key the set lacks: fetch again now, unless that key id was
        asked for within the last minute."""
        now = time.monotonic()
        last = self._missed.get(kid)
        if last is not None and now - last < MISSING_KEY_ID_PAUSE_S:
            return
        if len(self._missed) >= MISSING_KEY_IDS_KEPT:
            oldest = min(self._missed, key=self._missed.__getitem__)
            del self._missed[oldest]
        self._missed[kid] = now
        self._wake.set()

    async def _pause(self, seconds: float) -> None:
        """Until the next refresh, or a missed key id's wake-up (at most one a second:
        tokens naming ever new key ids cannot make the broker hammer the provider)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)
            await asyncio.sleep(max(0.0, self._fetched_at + EXPEDITED_GAP_S - time.monotonic()))
        self._wake.clear()

    async def run(self) -> None:
        backoff = self.backoff_s
        while True:
            try:
                keys = await asyncio.to_thread(self._fetch, self.url)
            except (OSError, ValueError) as exc:
                log.warning(
                    "JWKS %s not fetched (%s); keeping %d keys, next try in %.1fs",
                    self.url,
                    exc,
                    len(self.keys),
                    backoff,
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.backoff_max_s)
                continue
            backoff = self.backoff_s
            if {k.kid for k in keys} != {k.kid for k in self.keys} or not self.fetched.is_set():
                log.info("JWKS %s: %d keys (%s)", self.url, len(keys), _kids(keys))
            self.keys = keys
            self.fetches += 1
            self._fetched_at = time.monotonic()
            self.fetched.set()
            await self._pause(self.refresh_s)


def _kids(keys: tuple[Jwk, ...]) -> str:
    return ", ".join(str(k.kid) for k in keys[:8]) + (" ..." if len(keys) > 8 else "")
