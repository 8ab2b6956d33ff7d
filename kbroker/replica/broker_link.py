"""A connection from this broker to another: the replica fetchers, the transaction
markers' writer and the share-group persister each keep one per broker they reach.

It speaks the inter-broker listener's protocol (TLS, then SASL, as
`kbroker.security.inter_broker` configures it) and frames with the same sans-IO
functions as the admin client (`kbroker.protocol.client_frames`).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import ssl
import struct
import time
import typing
from typing import TYPE_CHECKING, Any, Protocol

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from kbroker.protocol.client_frames import decode_response, request_frame
from kbroker.protocol.framing import FrameDecoder, FrameError
from kbroker.protocol.messages import build, encode
from kbroker.security.inter_broker import InterBrokerSecurity
from kbroker.security.oauth_login import TokenEndpointError
from kbroker.security.sasl_client import SaslFailure

if TYPE_CHECKING:
    from kbroker.controller import Controller


class LinkedBroker(Protocol):
    """What the links read of the broker they start from: the other brokers' addresses
    in the metadata, how to reach them, and its own id."""

    @property
    def node_id(self) -> int: ...

    @property
    def controller(self) -> Controller: ...

    @property
    def inter_broker(self) -> InterBrokerSecurity: ...


SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
_LENGTH = struct.Struct(">i")
MAX_ANSWER_BYTES = 2**31 - 1  # an answer is as big as the request asked for


class _Answers(asyncio.BufferedProtocol):
    """A link's reading side: the answers' bytes are read into the frame decoder's
    buffers, so a follower's Fetch answer lands once, by the kernel's copy, in the
    buffer it is decoded from (an asyncio stream would copy every byte three times)."""

    def __init__(self, link: BrokerLink) -> None:
        self.link = link
        self.decoder = FrameDecoder(MAX_ANSWER_BYTES, "answer size")
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = typing.cast(asyncio.Transport, transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.decoder.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        try:
            frames = self.decoder.buffer_updated(nbytes)
        except FrameError as exc:
            self.link._lost(self, f"lost: {exc}")
            return
        for answer in frames:
            self.link._answer(answer)

    def eof_received(self) -> bool:
        return False  # the transport closes; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.link._lost(self, f"lost: {exc}" if exc is not None else "closed")


def _encoded(entity: Any) -> tuple[int, int, bytes]:
    """A kio request entity's API key, version and body."""
    return int(entity.__api_key__), int(entity.__version__), encode(entity)


class AuthenticationFailed(ConnectionError):
    """The other broker refused this one on its inter-broker listener (TLS or SASL); the
    message names the broker and the reason, never the password."""


class BrokerLink:
    """One connection to another broker, shared by the requests of its service.

    Requests go out as they come; one reader task hands each answer to the request of
    its correlation id, so callers may overlap (as Kafka's NetworkClient keeps several
    requests in flight on one connection) without reading each other's answers. A
    caller that gives up leaves its answer to be read and dropped. When the connection
    ends, every request still waiting fails with a ConnectionError.

    It speaks the inter-broker listener's protocol: a TLS handshake first when
    ``security`` has a context, then a SASL login (SaslHandshake v1 and SaslAuthenticate
    v2) when it has a mechanism. A session with a lifetime (KIP-368) is replaced by a
    fresh connection before it ends. ``security`` has no default, so that every client
    of another broker says which listener's protocol it speaks (the broker's
    ``inter_broker``).
    """

    def __init__(
        self,
        host: str,
        port: int,
        client_id: str,
        security: InterBrokerSecurity,
    ) -> None:
        self.host, self.port = host, port
        self.client_id = client_id
        self.security = security
        self._correlation = itertools.count(1)
        self._answers: _Answers | None = None  # the open connection's, None when closed
        # correlation id -> (its answer, api key, version)
        self._waiting: dict[int, tuple[asyncio.Future[Any], int, int]] = {}
        self._opening = asyncio.Lock()
        self._session_ends = math.inf

    @property
    def connected(self) -> bool:
        """False once the connection ended (the other broker closed it, or restarted):
        the next call opens a new one."""
        return self._answers is not None

    async def call(self, entity: Any, timeout: float) -> Any:
        """Send a kio request entity; its answer, decoded."""
        return await self.call_body(*_encoded(entity), timeout)

    async def call_body(self, api_key: int, version: int, body: bytes, timeout: float) -> Any:
        """Send a request whose body is already written (a follower's Fetch); its answer,
        decoded."""
        if self._answers is not None and time.monotonic() >= self._session_ends:
            self.close()
        try:
            if self._answers is None:
                async with self._opening:  # one connection for callers that overlap
                    if self._answers is None:
                        await self._open(timeout)
            return await self._ask(api_key, version, body, timeout)
        except ssl.SSLError as exc:  # a certificate refused either way, or a broken session
            self.close()
            raise AuthenticationFailed(
                f"TLS with {self.host}:{self.port} on listener {self.security.listener} "
                f"failed: {exc.reason or exc}"
            ) from None

    async def _ask(self, api_key: int, version: int, body: bytes, timeout: float) -> Any:
        answers = self._answers
        if answers is None or answers.transport is None:
            raise ConnectionError(f"connection to {self.host}:{self.port} closed")
        correlation = next(self._correlation)
        answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[correlation] = (answer, api_key, version)
        try:
            answers.transport.write(
                request_frame(api_key, version, correlation, self.client_id, body)
            )
            return await asyncio.wait_for(answer, timeout)
        finally:
            self._waiting.pop(correlation, None)

    async def _ask_entity(self, entity: Any, timeout: float) -> Any:
        return await self._ask(*_encoded(entity), timeout)

    def _answer(self, frame: memoryview) -> None:
        """Hand an answer to the request of its correlation id."""
        if len(frame) < 4:
            self._lost(self._answers, "lost: an answer without a correlation id")
            return
        (correlation,) = _LENGTH.unpack_from(frame, 0)
        waiting = self._waiting.pop(correlation, None)
        if waiting is None or waiting[0].done():
            return  # its caller gave up waiting
        answer, api_key, version = waiting
        try:
            # kio's reader takes read-only buffers only.
            answer.set_result(decode_response(api_key, version, frame.toreadonly())[1])
        except Exception as exc:  # a frame that is not its request's answer
            answer.set_exception(
                ConnectionError(f"undecodable answer from {self.host}:{self.port}: {exc}")
            )

    def _lost(self, answers: _Answers | None, why: str) -> None:
        """The connection `answers` reads ended: fail what waits on it, if it is still
        this link's."""
        if answers is not None and answers is self._answers:
            self._shut(why)

    def _shut(self, why: str) -> None:
        answers, self._answers = self._answers, None
        if answers is not None and answers.transport is not None:
            answers.transport.close()
        self._session_ends = math.inf
        waiting, self._waiting = self._waiting, {}
        for answer, _, _ in waiting.values():
            if not answer.done():
                answer.set_exception(
                    ConnectionError(f"connection to {self.host}:{self.port} {why}")
                )

    async def _open(self, timeout: float) -> None:
        context = self.security.ssl_context
        _, self._answers = await asyncio.wait_for(
            asyncio.get_running_loop().create_connection(
                lambda: _Answers(self),
                self.host,
                self.port,
                ssl=context,
                server_hostname=self.host if context is not None else None,
            ),
            timeout,
        )
        if self.security.mechanism is not None:
            try:
                await self._login(timeout)
            except BaseException:
                self.close()
                raise

    async def _login(self, timeout: float) -> None:
        security = self.security
        where = f"{self.host}:{self.port} (listener {security.listener})"
        shake = await self._ask_entity(
            build(load_request_schema(SASL_HANDSHAKE, 1), {"mechanism": security.mechanism}),
            timeout,
        )
        if shake.error_code != ErrorCode.none:
            raise AuthenticationFailed(
                f"{where} does not enable SASL {security.mechanism} "
                f"(enabled: {', '.join(shake.mechanisms) or 'none'})"
            )
        try:
            await security.prepare()
        except TokenEndpointError as exc:
            raise AuthenticationFailed(f"no token to log in to {where} with: {exc}") from None
        steps = security.login()
        message = next(steps)
        while True:
            answer = await self._ask_entity(
                build(load_request_schema(SASL_AUTHENTICATE, 2), {"auth_bytes": message}),
                timeout,
            )
            if answer.error_code != ErrorCode.none:
                reason = answer.error_message or ErrorCode(answer.error_code).name.upper()
                raise AuthenticationFailed(
                    f"{where} refused the SASL {security.mechanism} login of broker user "
                    f"{security.username!r}: {reason}"
                )
            try:
                message = steps.send(bytes(answer.auth_bytes))
            except StopIteration:
                break
            except SaslFailure as exc:
                raise AuthenticationFailed(f"{where} failed SCRAM's server check: {exc}") from None
        lifetime_s = answer.session_lifetime.total_seconds()
        if lifetime_s > 0:  # reconnect before the session ends (a tenth of it early)
            self._session_ends = time.monotonic() + lifetime_s * 0.9

    def close(self) -> None:
        self._shut("closed")


class BrokerLinks:
    """A service's links to the other brokers, one per broker, to the address the cluster
    metadata gives for the inter-broker listener now; a link whose call fails is dropped
    (the next call connects again). With ``one_at_a_time`` each broker has one request
    in flight at most."""

    def __init__(
        self,
        broker: LinkedBroker,
        client_id: str,
        what: str,
        log: logging.Logger,
        *,
        one_at_a_time: bool = False,
    ) -> None:
        self._broker = broker
        self._client_id = client_id
        self._what = what
        self._log = log
        self._one_at_a_time = one_at_a_time
        self._links: dict[int, BrokerLink] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    async def call(self, node_id: int, request: Any, timeout: float) -> Any | None:
        """One request to broker `node_id`; None when it cannot be reached."""
        node = self._broker.controller.state.brokers.get(node_id)
        security = self._broker.inter_broker
        address = node.endpoint(security.listener) if node is not None else None
        if address is None:
            return None
        if not self._one_at_a_time:
            return await self._call(node_id, address, request, timeout)
        async with self._locks.setdefault(node_id, asyncio.Lock()):
            return await self._call(node_id, address, request, timeout)

    async def _call(
        self, node_id: int, address: tuple[str, int], request: Any, timeout: float
    ) -> Any | None:
        link = self._links.get(node_id)
        if link is None or (link.host, link.port) != address:
            if link is not None:
                link.close()
            link = self._links[node_id] = BrokerLink(
                *address, f"{self._client_id}-{self._broker.node_id}", self._broker.inter_broker
            )
        try:
            return await link.call(request, timeout)
        except (OSError, EOFError, TimeoutError) as exc:
            self._log.info("%s call to broker %d failed: %s", self._what, node_id, exc)
            link.close()
            if self._links.get(node_id) is link:  # not one another caller opened since
                del self._links[node_id]
            return None

    def close(self) -> None:
        for link in self._links.values():
            link.close()
        self._links.clear()
