"""Topics created on first mention (auto.create.topics.enable), as Kafka 4's
AutoTopicCreationManager creates them: in the background, one creation per topic at a
time, while the Metadata answer that asked says UNKNOWN_TOPIC_OR_PARTITION and the
client's next Metadata finds the topic."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

from kio.schema.errors import ErrorCode

from kbroker.controller.errors import ControllerError
from kbroker.controller.state import MetadataState, TopicInfo
from kbroker.tasks import cancel_and_wait

log = logging.getLogger("kbroker.metadata")

# A client asks again every retry backoff; a refusal is logged once a minute per topic.
REFUSAL_LOG_INTERVAL_S = 60.0
_REFUSALS_REMEMBERED = 1000


class TopicCreator(Protocol):
    @property
    def state(self) -> MetadataState: ...

    async def create_topic(
        self, name: str, num_partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> TopicInfo: ...


class TopicAutoCreation:
    """The auto-creations one broker has in flight, with the tasks held so that they are
    not collected, and cancelled when the broker stops."""

    def __init__(self, controller: TopicCreator) -> None:
        self._controller = controller
        self._in_flight: dict[str, asyncio.Task[None]] = {}
        self._refusals_logged: dict[str, float] = {}

    def start(self, name: str, num_partitions: int, replication_factor: int) -> None:
        """Start creating `name` with the given defaults, unless that is under way."""
        if name in self._in_flight:
            return
        task = asyncio.get_running_loop().create_task(
            self._create(name, num_partitions, replication_factor)
        )
        self._in_flight[name] = task
        task.add_done_callback(lambda _: self._in_flight.pop(name, None))

    async def stop(self) -> None:
        await cancel_and_wait(list(self._in_flight.values()), what="topic auto-creations")

    async def _create(self, name: str, num_partitions: int, replication_factor: int) -> None:
        """A refusal is logged, never answered: the client was told
        UNKNOWN_TOPIC_OR_PARTITION already. One the controller refuses because the topic
        exists (another node created it first) is not worth a line."""
        try:
            await self._controller.create_topic(name, num_partitions, replication_factor, {})
        except ControllerError as exc:
            if self._controller.state.topics.get(name) is None:
                self._log_refusal(name, exc)
        except Exception:
            log.exception("auto-creation of topic %r failed", name)

    def _log_refusal(self, name: str, exc: ControllerError) -> None:
        now = time.monotonic()
        last = self._refusals_logged.get(name, -REFUSAL_LOG_INTERVAL_S)
        if now - last < REFUSAL_LOG_INTERVAL_S:
            return
        if len(self._refusals_logged) >= _REFUSALS_REMEMBERED:
            self._refusals_logged.clear()
        self._refusals_logged[name] = now
        log.warning(
            "topic %r not auto-created: %s %s",
            name,
            ErrorCode(exc.error_code).name.upper(),
            exc.message,
        )
