"""One client connection: frames in, handler calls, responses out in request order.

The broker answers requests on a connection in the order they arrived (Kafka's
guarantee that clients rely on), while a slow request (a Fetch waiting for data, a
Produce waiting for fsync) never blocks other connections: its answer waits in this
connection's queue and everything behind it waits too.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import socket
import ssl
import struct
import time
import typing
from collections import deque
from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from kbroker.handlers.api_versions import unsupported_api_versions
from kbroker.handlers.context import BrokerParts, RequestContext
from kbroker.handlers.registry import APIS, Later, NoResponse
from kbroker.protocol import messages, responses
from kbroker.protocol.encoded import EncodedBody
from kbroker.protocol.framing import FrameDecoder, FrameError, frame, scratch_buffer
from kbroker.protocol.header import (
    MalformedRequest,
    parse_request_header,
    peek_api,
)
from kbroker.security.listener import ListenerSecurity
from kbroker.security.oauthbearer import Validate
from kbroker.security.principal import ANONYMOUS, KafkaPrincipal, distinguished_name, map_name, user
from kbroker.security.quotas import REQUEST_PERCENTAGE, ClientQuotas
from kbroker.security.sasl import SaslFailure, SaslSession, session_lifetime_ms
from kbroker.security.scram import ScramCredential
from kbroker.security.tls_session import TlsSession
from kbroker.server.connection_limits import ConnectionLimits
from kbroker.server.connection_states import (
    API_VERSIONS,
    DISPATCH,
    SESSION_EXPIRED_ACCEPTS,
    TRANSITIONS,
    Event,
    State,
    accepts,
    initial_state,
)
from kbroker.server.request_memory import RequestMemory
from kbroker.server.tls_transport import TlsTransport

if TYPE_CHECKING:
    from kbroker.config import BrokerConfig
    from kbroker.metrics.counters import RequestCounters
    from kbroker.server.keep_awake import KeepAwake

log = logging.getLogger("kbroker.connection")
request_log = logging.getLogger("kbroker.request")

UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58
TLS_HANDSHAKE_TIMEOUT_S = 10.0
# Requests whose pending work is only for this connection's answer: a parked Fetch
# would otherwise wake on every append until its max_wait (up to 24 days) ran out,
# long after its client left. Other handlers may hold shared state while they wait.
_CANCEL_WHEN_CLOSED = frozenset({1})
_MAX_IN_FLIGHT = 200
# Requests held behind a handler still running, or a mute, before reading pauses.
_MAX_HELD = 64
# Handler results that are answers already (Produce's encoded bytes, most handlers'
# dicts): no need to ask whether they are awaitable, an ABC check on every request.
_IMMEDIATE = frozenset({bytes, dict})
_HEAD = struct.Struct(">ii")  # frame size, correlation id: response header v0
_FLEXIBLE_HEAD = struct.Struct(">iiB")  # and no tagged fields: response header v1
_CORK_PART_BYTES = 64 * 1024  # a larger answer part is written as it is, not copied
T = TypeVar("T")


class Host(Protocol):
    """What a connection needs of the broker it serves."""

    parts: BrokerParts
    config: BrokerConfig
    max_request_bytes: int
    request_memory: RequestMemory
    keep_awake: KeepAwake
    counters: RequestCounters
    connections: set[KafkaConnection]
    connection_limits: ConnectionLimits

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None: ...

    def token_credential(
        self, token_id: str, mechanism: str
    ) -> tuple[ScramCredential, str] | None: ...

    def bearer_validator(self, security: ListenerSecurity) -> Validate | None: ...


class _Slot:
    """A response position in the connection's order; filled now or when its handler's
    answer is ready, which it then frames as the request it stands for asked."""

    __slots__ = (
        "data",
        "done",
        "size",
        "task",
        "api_key",
        "version",
        "correlation_id",
        "flexible",
        "read_at",
        "started",
        "local_done",
        "client_id",
    )

    def __init__(
        self, api_key: int = -1, version: int = 0, correlation_id: int = 0, flexible: bool = False
    ) -> None:
        self.data: list[Any] | None = None
        self.done = False
        self.size = 0  # bytes of the request held (queued.max.request.bytes) until done
        self.task: asyncio.Future[Any] | Later | None = None  # set when it may be cancelled
        self.api_key = api_key
        self.version = version
        self.correlation_id = correlation_id
        self.flexible = flexible
        self.read_at = 0.0  # perf_counter() of the read that brought the request
        self.started = 0.0  # perf_counter() when its handler started
        self.local_done = 0.0  # perf_counter() when its handler returned (remote time starts)
        self.client_id: str | None = None


class KafkaConnection(asyncio.BufferedProtocol):
    """One client connection on one listener.

    On a TLS listener every byte passes through a TlsSession (kbroker.security) before
    the frame decoder, so a failed handshake is this connection's to log and count. Its
    `state` (kbroker.server.connection_states) says which requests it serves: on a SASL
    listener ``_dispatch`` is the state's gate, letting only ApiVersions, SaslHandshake
    and SaslAuthenticate through until the client has authenticated, while a PLAINTEXT or
    SSL connection pays nothing per request for security it does not use.
    """

    def __init__(self, broker: Host, security: ListenerSecurity | None = None) -> None:
        self.broker = broker
        self.security = security
        self.listener_name = security.name if security is not None else "PLAINTEXT"
        self.principal: KafkaPrincipal = ANONYMOUS
        self._sasl: SaslSession | None = None
        self._session_deadline = 0.0
        self._close_once_answered = False  # a delayed login refusal: close once it is out
        self._muted_until = 0.0  # quota throttling
        self._held: deque[bytes] = deque()  # requests read while muted or ordering
        self._ordering = False  # a coroutine handler's effects are not done yet
        self.state = State.SERVING
        self._tls: TlsSession | None = None
        self._raw: asyncio.Transport | None = None
        self._handshake_timer: asyncio.TimerHandle | None = None
        if security is not None and security.ssl_context is not None:
            self._tls = TlsSession(security.ssl_context, security.tls13_suites)
            # Set before the transport exists: uvloop binds its callbacks when it does.
            self._ciphertext = scratch_buffer("ciphertext")
            self.get_buffer = self._tls_get_buffer  # type: ignore[method-assign]
            self.buffer_updated = self._tls_buffer_updated  # type: ignore[method-assign]
            self.data_received = self._tls_data_received  # type: ignore[method-assign]
        self.decoder = FrameDecoder(broker.max_request_bytes)
        if self._tls is None:
            # The loop asks for a buffer before every read: the decoder's own answers,
            # without a call of ours in between.
            self.get_buffer = self.decoder.get_buffer  # type: ignore[method-assign]
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.software = ("", "")  # ApiVersions v3+: client software name and version
        self._queue: deque[_Slot] = deque()
        self._paused_reading = False
        self._paused_writing = False
        self._memory = broker.request_memory
        self._memory_held = 0  # this connection's part of request_memory.used
        self._in_flight_bytes = 0  # requests read whose answers are pending
        self._waiting_for_memory = False
        self._closed = False
        self._sock_fd = -1
        self._sock: Any = None  # the transport's socket (uvloop's stand-in), plain TCP only
        self._tls_parts = False  # answers go through TlsTransport.write_parts
        self._max_idle_s = broker.config.connections_max_idle_ms / 1000
        self._log_requests = bool(broker.config.logging_requests_enable)
        self._last_active = 0.0
        self._read_at = 0.0  # perf_counter() of the last read: the queue time's start
        self._idle_timer: asyncio.TimerHandle | None = None
        self._counted_ip: str | None = None  # held in broker.connection_limits
        # While data_received handles several frames of one read: the answers' bytes,
        # written together when it is done (None: every answer is written at once).
        self._cork: list[bytes | bytearray | memoryview] | None = None

    @property
    def answering(self) -> bool:
        """Whether a request read on this connection still awaits its answer."""
        return bool(self._queue)

    # -- asyncio.Protocol ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        # uvloop's TCPTransport implements asyncio.Transport without subclassing it.
        raw = typing.cast(asyncio.Transport, transport)
        ip = str(peer[0]) if peer else "?"
        refused = self.broker.connection_limits.admit(ip, self.listener_name)
        if refused is not None:
            log.info("refused connection from %s on %s: %s", self.peer, self.listener_name, refused)
            self._closed = True
            raw.abort()
            return
        self._counted_ip = ip
        if self._tls is not None:
            self._raw = raw  # attached once the handshake is done
            self._handshake_timer = asyncio.get_running_loop().call_later(
                TLS_HANDSHAKE_TIMEOUT_S, self._handshake_timed_out
            )
            return
        self._attach(raw, tls=False)

    def _tls_get_buffer(self, sizehint: int) -> memoryview:
        return self._ciphertext

    def _tls_buffer_updated(self, nbytes: int) -> None:
        self._tls_data_received(self._ciphertext[:nbytes])  # the TLS session copies it

    def _tls_data_received(self, data: bytes | bytearray | memoryview) -> None:
        """A TLS listener's data_received: decrypt, then handle as on a plain socket."""
        tls, raw = self._tls, self._raw
        assert tls is not None and raw is not None
        try:
            plaintext = tls.receive(data)
        except ssl.SSLError as exc:
            reply = tls.outgoing()  # the alert that tells the client why
            if reply:
                raw.write(reply)
            self._tls_failed(exc.reason or str(exc))
            return
        reply = tls.outgoing()
        if reply:
            raw.write(reply)
        if self.transport is None:
            if not tls.handshake_done:
                return
            if self._handshake_timer is not None:
                self._handshake_timer.cancel()
            self._attach(typing.cast(asyncio.Transport, TlsTransport(raw, tls)), tls=True)
        if plaintext and not self._closed:
            KafkaConnection.data_received(self, plaintext)
        if tls.closed_by_peer and not self._closed:
            self.close("", quiet=True)

    def _tls_failed(self, reason: str) -> None:
        raw = self._raw
        if self.transport is None:
            self.broker.counters.failed_tls_handshakes += 1
            log.warning(
                "closing connection from %s on listener %s: TLS handshake failed: %s",
                self.peer,
                self.listener_name,
                reason,
            )
            if self._handshake_timer is not None:
                self._handshake_timer.cancel()
            if raw is not None:
                raw.close()
            return
        self.close(f"TLS error: {reason}")

    def _handshake_timed_out(self) -> None:
        if self.transport is None and self._raw is not None and not self._raw.is_closing():
            self._tls_failed(f"no handshake within {TLS_HANDSHAKE_TIMEOUT_S:.0f}s")

    def _attach(self, transport: asyncio.Transport, tls: bool) -> None:
        """The connection is usable: TLS (if any) is up, the principal is known or SASL
        is about to establish it."""
        self.transport = transport
        security = self.security
        if tls:
            # sendfile would bypass the encryption: file regions are encrypted in one C
            # call with the parts around them where it runs, else go out as copies.
            self._sock_fd = -1
            self._tls_parts = self._tls is not None and self._tls.writes_records_in_c
        else:
            sock = transport.get_extra_info("socket")
            self._sock_fd = sock.fileno() if sock is not None else -1
            self._sock = sock
        if security is not None:
            self.state = initial_state(security.uses_sasl)
            self._set_dispatch()
            if security.uses_sasl:
                # Kafka's SaslServerAuthenticator reads at most this much a frame until
                # the client has logged in.
                limit = min(
                    self.broker.config.sasl_server_max_receive_size, self.broker.max_request_bytes
                )
                self.decoder.limit(limit, "sasl.server.max.receive.size")
                self._sasl = SaslSession(
                    security.mechanisms,
                    security.plain_users,
                    self.broker.scram_credential,
                    token_lookup=self.broker.token_credential,
                    bearer=self.broker.bearer_validator(security),
                )
            elif tls:
                peercert = transport.get_extra_info("peercert")
                if peercert:
                    dn = distinguished_name(peercert)
                    try:
                        self.principal = user(map_name(security.principal_rules, dn))
                    except ValueError as exc:
                        self.broker.counters.failed_authentications += 1
                        self.close(f"client certificate refused: {exc}")
                        return
        self.broker.connections.add(self)
        self.broker.counters.connections_opened += 1
        self._last_active = time.monotonic()
        if self._max_idle_s > 0:
            self._idle_timer = asyncio.get_running_loop().call_later(
                self._max_idle_s, self._check_idle
            )

    def connection_lost(self, exc: Exception | None) -> None:
        if self._counted_ip is not None:
            self.broker.connection_limits.release(self._counted_ip, self.listener_name)
            self._counted_ip = None
        if self.transport is None:
            if self._handshake_timer is not None:
                self._handshake_timer.cancel()
            return  # during a TLS handshake: nothing was attached
        self._closed = True
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        self.broker.connections.discard(self)
        for slot in self._queue:
            # Dropped as well: an abandoned Later is never settled, so its listener (a
            # closure over the slot) would keep the slot, the Later and this connection
            # in a cycle for the cyclic collector.
            task, slot.task = slot.task, None
            if isinstance(task, Later):
                task.abandon()
            elif task is not None:
                task.cancel()
        self._queue.clear()
        self._memory.forget(self)
        self._memory.adjust(-self._memory_held)
        self._memory_held = self._in_flight_bytes = 0

    def pause_writing(self) -> None:
        self._paused_writing = True
        self._pause_reading()

    def resume_writing(self) -> None:
        self._paused_writing = False
        self._maybe_resume_reading()

    def get_buffer(self, sizehint: int) -> memoryview:
        """Where the socket's next read lands: the frame decoder's buffer, so a large
        request is read straight into the bytes it is handled from. (`__init__` binds
        the decoder's own method over this one, or TLS's: the loop calls it per read.)"""
        return self.decoder.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        try:
            frames = self.decoder.buffer_updated(nbytes)
        except FrameError as exc:
            self.close(f"bad frame: {exc}")
            return
        self._received(nbytes, frames)

    def data_received(self, data: bytes | bytearray | memoryview) -> None:
        """Bytes that came other than into `get_buffer`: a TLS connection's plaintext."""
        try:
            frames = self.decoder.feed(data)
        except FrameError as exc:
            self.close(f"bad frame: {exc}")
            return
        self._received(len(data), frames)

    def _received(self, nbytes: int, frames: list[memoryview]) -> None:
        self._read_at = time.perf_counter()
        self.broker.keep_awake.request_read()
        self.broker.counters.bytes_in += nbytes
        self._last_active = time.monotonic()
        if len(frames) > 1:
            # Pipelined requests read together: their answers written now go out in one
            # write (one syscall, one wake-up of the client) once every frame is handled.
            self._cork = []
            try:
                for request in frames:
                    if self._closed:
                        return
                    self._dispatch(request)
            finally:
                self._uncork()
        else:
            for request in frames:
                if self._closed:
                    return
                self._dispatch(request)
        if len(self._queue) >= _MAX_IN_FLIGHT:
            self._pause_reading()
        # _account_memory and RequestMemory.exhausted, inline: this runs once per read.
        memory = self._memory
        held = self.decoder.reading + self._in_flight_bytes
        if held != self._memory_held:
            delta = held - self._memory_held
            self._memory_held = held
            memory.adjust(delta)
        if 0 < memory.limit <= memory.used and not self.decoder.inside_frame and not self._closed:
            # Kafka's pool: a frame already begun is read whole; no new one starts.
            self._waiting_for_memory = True
            self._memory.wait(self)
            self._pause_reading()

    def _account_memory(self) -> None:
        held = self.decoder.reading + self._in_flight_bytes
        if held != self._memory_held:
            delta = held - self._memory_held
            self._memory_held = held
            self._memory.adjust(delta)

    def memory_available(self) -> None:
        """request_memory dropped below queued.max.request.bytes: read again."""
        self._waiting_for_memory = False
        self._maybe_resume_reading()

    # -- SASL authentication (Kafka's SaslServerAuthenticator) ------------------------

    def _enter(self, event: Event) -> None:
        """Move to the state `event` leads to (TRANSITIONS) and serve frames as it says."""
        state = TRANSITIONS.get((self.state, event))
        if state is None:
            self.close(f"{event.value} is not expected while {self.state.value}")
            return
        self.state = state
        self._set_dispatch()

    def _set_dispatch(self) -> None:
        if self._muted_until or self._ordering:
            self._dispatch = self._hold  # type: ignore[method-assign]
            return
        name = DISPATCH[self.state]
        if name is None:
            self.__dict__.pop("_dispatch", None)  # the class's dispatch, with no gate
        else:
            self._dispatch = getattr(self, name)  # type: ignore[method-assign]

    def _dispatch_unauthenticated(self, request: memoryview) -> None:
        """Before authentication: ApiVersions and the SASL requests. Anything else ends
        the connection, as Kafka's authenticator throws IllegalSaslStateException."""
        try:
            api_key, version, _correlation_id = peek_api(request)
        except MalformedRequest as exc:
            self.close(str(exc))
            return
        if not accepts(State.AUTHENTICATING, api_key):
            name = messages.API_NAMES.get(api_key, api_key)
            reason = f"unexpected {name} request before SASL authentication"
            refusal = self._sasl.refusal if self._sasl is not None else None
            if refusal is not None:  # a client that took the error status for success
                reason += f", after its token was refused: {refusal}"
            self._authentication_failed(reason)
            self.close("", quiet=True)
            return
        KafkaConnection._dispatch(self, request)

    def _dispatch_in_session(self, request: memoryview) -> None:
        """KIP-368: once the session lifetime has passed, only re-authentication is served."""
        if time.monotonic() >= self._session_deadline:
            try:
                api_key = peek_api(request)[0]
            except MalformedRequest as exc:
                self.close(str(exc))
                return
            if api_key not in SESSION_EXPIRED_ACCEPTS:
                self.close(
                    f"SASL session of {self.principal} expired without re-authentication "
                    "(connections.max.reauth.ms or the token's expiry)"
                )
                return
        KafkaConnection._dispatch(self, request)

    def _request_quota(
        self,
        quotas: ClientQuotas,
        ctx: RequestContext,
        result: Mapping[str, object],
        started: float,
    ) -> None:
        """request_percentage: the handler's time, as percent of one thread's second, is
        counted against the client's quota; over it, the answer says so and the channel
        is muted (Produce and Fetch carry their byte-rate throttle instead)."""
        busy = (time.perf_counter() - started) * 100
        throttle = quotas.record(REQUEST_PERCENTAGE, self.principal.name, ctx.client_id, busy)
        if throttle > 0 and "throttle_time" in result:
            answer = typing.cast("dict[str, Any]", result)  # the handler's own, written once
            answer["throttle_time"] = max(int(answer["throttle_time"] or 0), throttle)
            self.throttle(throttle)

    def throttle(self, ms: int) -> None:
        """Mute the channel for ``ms`` after the answer that carries the throttle time, as
        Kafka's quota managers do (KIP-219): nothing more is read or handled until it
        ends. Requests already read wait, copied, in arrival order; ``_dispatch`` holds
        them while muted, so an unthrottled connection pays nothing for this."""
        if ms <= 0 or self._closed or self.transport is None:
            return
        until = time.monotonic() + ms / 1000
        if until <= self._muted_until:
            return
        self._muted_until = until
        self._pause_reading()
        self._set_dispatch()
        asyncio.get_running_loop().call_later(ms / 1000, self._unmute)

    def _hold(self, request: memoryview) -> None:
        self._held.append(bytes(request))
        if len(self._held) >= _MAX_HELD:
            self._pause_reading()

    def _unmute(self) -> None:
        if self._closed:
            return
        left = self._muted_until - time.monotonic()
        if left > 0.0005:
            asyncio.get_running_loop().call_later(left, self._unmute)
            return
        self._muted_until = 0.0  # timers may fire a hair early: the mute is over now
        self._set_dispatch()
        self._dispatch_held()

    def _order_after(self, task: asyncio.Future[Any]) -> None:
        """Kafka handles a connection's requests one at a time, in the order sent: a
        request whose handler has yet to do its work (a coroutine: DeleteRecords,
        CreateTopics, EndTxn...) holds the ones after it until that work is done, so a
        ListOffsets pipelined behind a DeleteRecords sees the records deleted. Handlers
        that answer later (Produce waiting for acks=all, a parked Fetch) did their work
        when they returned, and hold nothing; nor does a coroutine once it returns such
        an answer (a Produce whose partitions were added to a transaction first)."""
        self._ordering = True
        self._set_dispatch()
        task.add_done_callback(self._ordered)

    def _ordered(self, _task: asyncio.Future[Any]) -> None:
        if self._closed:
            return
        self._ordering = False
        self._set_dispatch()
        self._dispatch_held()

    def _dispatch_held(self) -> None:
        """Handle the requests held back, in order, until one holds the rest again."""
        held = self._held
        while held and not self._closed and not self._muted_until and not self._ordering:
            self._dispatch(memoryview(held.popleft()))
        self._maybe_resume_reading()

    def _drop_frames(self, request: memoryview) -> None:
        """After a failed login: the answer is out, the close follows; nothing else runs."""

    def sasl_handshake(
        self, mechanism: str, version: int
    ) -> responses.SaslHandshakeResponse | Awaitable[responses.SaslHandshakeResponse]:
        sasl = self._sasl
        if sasl is None:
            return {"error_code": ILLEGAL_SASL_STATE, "mechanisms": []}
        if version == 0 and sasl.principal is not None:
            # Re-authentication needs SaslAuthenticate (KIP-368): a v0 handshake cannot.
            self._authentication_failed("SaslHandshake v0 cannot re-authenticate")
            self._close_after_answer()
            return {"error_code": ILLEGAL_SASL_STATE, "mechanisms": list(sasl.mechanisms)}
        if not sasl.handshake(mechanism, version):
            self._authentication_failed(f"SASL mechanism {mechanism!r} is not enabled")
            refusal: responses.SaslHandshakeResponse = {
                "error_code": UNSUPPORTED_SASL_MECHANISM,
                "mechanisms": list(sasl.mechanisms),
            }
            return self._refuse(refusal)
        if sasl.raw_tokens:
            self._enter(Event.RAW_HANDSHAKE)
        return {"error_code": 0, "mechanisms": list(sasl.mechanisms)}

    def sasl_authenticate(
        self, token: bytes, version: int
    ) -> responses.SaslAuthenticateResponse | Awaitable[responses.SaslAuthenticateResponse]:
        sasl = self._sasl
        refused: responses.SaslAuthenticateResponse = {
            "error_code": ILLEGAL_SASL_STATE,
            "auth_bytes": b"",
            "session_lifetime": 0,
        }
        if sasl is None:
            return {**refused, "error_message": "SASL is not enabled on this listener"}
        if not sasl.in_exchange:
            reason = "SaslAuthenticate received without a SaslHandshake before it"
            self._authentication_failed(reason)
            self._close_after_answer()
            return {**refused, "error_message": reason}
        try:
            answer, finished = sasl.authenticate(token)
        except SaslFailure as exc:
            self._authentication_failed(exc.reason)
            failed: responses.SaslAuthenticateResponse = {
                **refused,
                "error_code": SASL_AUTHENTICATION_FAILED,
                "error_message": str(exc),
            }
            return self._refuse(failed)
        lifetime = self._authenticated() if finished else 0
        return {
            "error_code": 0,
            "error_message": None,
            "auth_bytes": answer,
            "session_lifetime": lifetime if version >= 1 else 0,
        }

    def _raw_token_frame(self, request: memoryview) -> None:
        """After a v0 SaslHandshake: each frame is the next SASL token, answered in a bare
        size-prefixed frame."""
        sasl = self._sasl
        assert sasl is not None
        try:
            answer, finished = sasl.authenticate(bytes(request))
        except SaslFailure as exc:
            self._authentication_failed(exc.reason)
            delay_s = self.broker.config.connection_failed_authentication_delay_ms / 1000
            asyncio.get_running_loop().call_later(delay_s, self.close, "", True)
            return
        self._respond_raw(answer)
        if finished:
            self._authenticated()

    def _authenticated(self) -> int:
        """Authentication succeeded: requests flow; returns the session lifetime in ms."""
        sasl, security = self._sasl, self.security
        assert sasl is not None and sasl.principal is not None and security is not None
        self.principal = sasl.principal
        self.broker.counters.successful_authentications += 1
        self.decoder.limit(self.broker.max_request_bytes, "socket.request.max.bytes")
        lifetime = session_lifetime_ms(
            security.max_reauth_ms(sasl.authenticated_mechanism),
            sasl.credential_expires_ms,
            int(time.time() * 1000),
        )
        if lifetime is None:
            self._enter(Event.AUTHENTICATED)
            return 0
        self._session_deadline = time.monotonic() + lifetime / 1000
        self._enter(Event.AUTHENTICATED_FOR_A_SESSION)
        return lifetime

    def _authentication_failed(self, reason: str) -> None:
        """Count it and say it once; the reason never holds a password."""
        self.broker.counters.failed_authentications += 1
        log.warning(
            "authentication failed for connection from %s on listener %s: %s",
            self.peer,
            self.listener_name,
            reason,
        )
        self._enter(Event.AUTHENTICATION_FAILED)

    def _close_after_answer(self) -> None:
        """Close once the answer being built now is written (the transport flushes it)."""
        asyncio.get_running_loop().call_soon(self.close, "", True)

    def _refuse(self, answer: T) -> T | Awaitable[T]:
        """A failed login's answer, then the close, held back
        connection.failed.authentication.delay.ms as Kafka holds them (KIP-306): a client
        that reconnects at once on a refusal, or guesses passwords, waits that long a try."""
        delay_s = self.broker.config.connection_failed_authentication_delay_ms / 1000
        if delay_s <= 0:
            self._close_after_answer()
            return answer

        async def later() -> T:
            await asyncio.sleep(delay_s)
            self._close_once_answered = True
            return answer

        return later()

    def _respond_raw(self, token: bytes) -> None:
        """A SASL token in a bare size-prefixed frame (after a v0 SaslHandshake)."""
        data = frame(len(token)) + token
        self.broker.counters.bytes_out += len(data)
        self._write([data])

    # -- dispatch --------------------------------------------------------------------

    def _dispatch(self, request: memoryview) -> None:
        started = time.perf_counter()
        try:
            api_key, version, correlation_id = peek_api(request)
        except MalformedRequest as exc:
            self.close(str(exc))
            return
        api = APIS.get(api_key)
        if api is not None and api.enabled_by and not api.enabled(self.broker.parts.config):
            api = None
        if api is None:
            self.close(f"unknown API key {api_key} (version {version})")
            return
        # Counted only once served: every unknown key would otherwise become a metric series.
        self.broker.counters.requests[api_key] += 1
        if not api.serves(version):
            if api_key == API_VERSIONS:
                self._respond_now(correlation_id, False, unsupported_api_versions())
                self._answered(
                    api_key, version, correlation_id, self._read_at, started, started, None
                )
                return
            self.close(
                f"unsupported version {version} of API {api_key} "
                f"({messages.API_NAMES.get(api_key)}); serving {api.min_version}-{api.max_version}"
            )
            return
        flexible = messages.is_flexible(api_key, version)
        try:
            header, offset = parse_request_header(request, flexible)
            body = messages.decode_request(api_key, version, request, offset)
        except Exception as exc:  # kio raises assorted errors on malformed bodies
            self.close(
                f"malformed {messages.API_NAMES.get(api_key)} v{version} request "
                f"(correlation {correlation_id}): {exc!r}"
            )
            return
        ctx = RequestContext(header, self.broker.parts, self)
        response_flexible = flexible and api_key != API_VERSIONS
        try:
            result = api.handler(ctx, body)
            local_done = time.perf_counter()
            if type(result) not in _IMMEDIATE and (
                isinstance(result, Later) or inspect.isawaitable(result)
            ):
                slot = _Slot(api_key, version, correlation_id, response_flexible)
                slot.read_at = self._read_at
                slot.started = started
                slot.local_done = local_done
                slot.client_id = header.client_id
                slot.size = len(request) + 4
                self._in_flight_bytes += slot.size
                self._queue.append(slot)
                if isinstance(result, Later):
                    if result.on_abandon is not None:
                        slot.task = result
                    result.then(lambda value, error: self._complete(slot, value, error))
                    return
                task = asyncio.ensure_future(result)
                if api_key in _CANCEL_WHEN_CLOSED:
                    slot.task = task
                task.add_done_callback(lambda t: self._finish(slot, t))
                if api.ordered(version):
                    self._order_after(task)  # after _finish: its answer is queued first
                return
            if isinstance(result, NoResponse):
                self._answered(
                    api_key, version, correlation_id, self._read_at, started, local_done, None
                )
                return
            quotas = self.broker.parts.quotas
            if quotas.active and isinstance(result, dict):
                self._request_quota(quotas, ctx, result, started)
            # Encoding belongs inside: a value the version cannot carry must not escape
            # data_received, where the loop would drop the connection without our log line.
            encoded = self._encode(api_key, version, result)
        except Exception:
            log.exception("handler for %s v%d failed", messages.API_NAMES.get(api_key), version)
            self.close("internal error")
            return
        self._respond_now(correlation_id, response_flexible, encoded)
        self._answered(
            api_key, version, correlation_id, self._read_at, started, local_done, header.client_id
        )

    def _answered(
        self,
        api_key: int,
        version: int,
        correlation_id: int,
        read_at: float,
        started: float,
        local_done: float,
        client: str | None,
        ready: float = 0.0,
    ) -> None:
        """Count the request's times (Kafka's RequestMetrics: queue, local, remote, send);
        with logging.requests.enable, log it too. `read_at` is when the read that brought
        it began, `started` when its handler started, `local_done` when the handler
        returned, `ready` when a later answer came (0 for one answered at once)."""
        now = time.perf_counter()
        queue_ms = (started - read_at) * 1000.0 if read_at < started else 0.0
        local_ms = (local_done - started) * 1000.0
        if ready:
            remote_ms = (ready - local_done) * 1000.0
            send_ms = (now - ready) * 1000.0
        else:
            remote_ms = 0.0
            send_ms = (now - local_done) * 1000.0
        self.broker.counters.answered(api_key, queue_ms, local_ms, remote_ms, send_ms)
        ms = queue_ms + local_ms + remote_ms + send_ms
        if self._log_requests:
            name = messages.API_NAMES.get(api_key, str(api_key))
            request_log.info(
                "%s v%d correlation %d from %s (client %r) answered in %.3f ms",
                name,
                version,
                correlation_id,
                self.peer,
                client,
                ms,
                extra={
                    "api": name,
                    "api_version": version,
                    "correlation_id": correlation_id,
                    "peer": self.peer,
                    "client_id": client,
                    "duration_ms": round(ms, 3),
                },
            )

    def _finish(self, slot: _Slot, task: asyncio.Future) -> None:
        if self._closed:
            return
        result: Any = None
        error: BaseException | None
        if task.cancelled():
            error = asyncio.CancelledError()
        else:
            error = task.exception()
            if error is None:
                result = task.result()
        if isinstance(result, Later):
            # The handler's work is done and its answer comes later (a Produce that had
            # its partitions added, now waiting for acks=all): the requests after it go
            # on now, as after any Produce, and the answer keeps its place in the queue.
            if result.on_abandon is not None:
                slot.task = result
            result.then(lambda value, error: self._complete(slot, value, error))
            return
        self._complete(slot, result, error)

    def _complete(self, slot: _Slot, result: Any, error: BaseException | None) -> None:
        """A handler's answer is ready: fill its slot and write what is now in order."""
        if self._closed:
            return
        if slot.size:
            self._in_flight_bytes -= slot.size
            slot.size = 0
            self._account_memory()
        ready = time.perf_counter()
        api_key, version = slot.api_key, slot.version
        if isinstance(error, asyncio.CancelledError):
            self.close(f"{messages.API_NAMES.get(api_key)} v{version} request cancelled")
            return
        try:
            if error is not None:
                raise error
            if isinstance(result, NoResponse):
                slot.data = None
            else:
                encoded = self._encode(api_key, version, result)
                slot.data = self._frame(slot.correlation_id, slot.flexible, encoded)
        except Exception:
            log.exception("handler for %s v%d failed", messages.API_NAMES.get(api_key), version)
            self.close("internal error")
            return
        slot.done = True
        self._drain_queue()  # the answer goes out first (after an fsync, it is the latency)
        self._answered(
            api_key,
            version,
            slot.correlation_id,
            slot.read_at,
            slot.started,
            slot.local_done,
            slot.client_id,
            ready,
        )

    def _respond_now(self, correlation_id: int, flexible: bool, body: bytes | EncodedBody) -> None:
        parts = self._frame(correlation_id, flexible, body)
        if self._queue:
            slot = _Slot()
            slot.data = parts
            slot.done = True
            self._queue.append(slot)
            self._drain_queue()
        else:
            self._write(parts)

    def _drain_queue(self) -> None:
        queue = self._queue
        while queue and queue[0].done:
            slot = queue.popleft()
            if slot.data is not None:
                self._write(slot.data)
        if self._close_once_answered and not queue:
            self._close_after_answer()
        self._maybe_resume_reading()

    # -- encoding and writing ---------------------------------------------------------

    @staticmethod
    def _encode(api_key: int, version: int, result: Any) -> bytes | EncodedBody:
        if isinstance(result, bytes | EncodedBody):
            return result
        if isinstance(result, dict):
            return messages.encode_response(api_key, version, result)
        return messages.encode(result)

    def _frame(self, correlation_id: int, flexible: bool, body: bytes | EncodedBody) -> list[Any]:
        # The size prefix and the response header (v0: the correlation id; v1: and an
        # empty tagged-field section) packed at once.
        if isinstance(body, bytes):
            size = len(body) + 5 if flexible else len(body) + 4
            self.broker.counters.bytes_out += size + 4
            head = (
                _FLEXIBLE_HEAD.pack(size, correlation_id, 0)
                if flexible
                else _HEAD.pack(size, correlation_id)
            )
            return [head + body]
        size = body.size + 5 if flexible else body.size + 4
        self.broker.counters.bytes_out += size + 4
        head = (
            _FLEXIBLE_HEAD.pack(size, correlation_id, 0)
            if flexible
            else _HEAD.pack(size, correlation_id)
        )
        return [head, *body.parts]

    def _write(self, parts: list[Any]) -> None:
        transport = self.transport
        if transport is None or self._closed:
            return
        self._last_active = time.monotonic()
        self.broker.keep_awake.answered()
        cork = self._cork
        if self._tls_parts:
            # Over TLS an answer goes out as one C call's records (file ranges included);
            # corked answers wait as on a plain socket and go first.
            if cork is not None and all(
                isinstance(part, bytes | bytearray | memoryview) and len(part) <= _CORK_PART_BYTES
                for part in parts
            ):
                cork.extend(parts)
                return
            if cork:
                parts = [*cork, *parts]
                cork.clear()
            problem = typing.cast(TlsTransport, transport).write_parts(parts)
            if problem is not None:
                self.close(problem)
            return
        own_cork = cork is None
        if cork is None:
            # Outside a read's cork (an answer settled by a timer or an append), the small
            # parts of one answer still go out in one write, not a syscall each.
            if len(parts) == 1 and isinstance(parts[0], bytes):
                transport.write(parts[0])
                return
            cork = []
        # An answer with file ranges (a fetch's records) is written with TCP_CORK set:
        # partial segments wait until it is cleared, so its head and records leave
        # together and the client wakes once for them, not for the head and again for
        # the records.
        sock = self._sock
        if (
            sock is not None
            and own_cork
            and not all(isinstance(part, bytes | bytearray | memoryview) for part in parts)
        ):
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
            except OSError:  # closing: written as it is
                sock = None
        else:
            sock = None
        try:
            for part in parts:
                if isinstance(part, bytes | bytearray | memoryview):
                    if len(part) <= _CORK_PART_BYTES:
                        cork.append(part)
                        continue
                    if cork:
                        self._flush(cork)
                    transport.write(part)
                else:
                    if cork:
                        self._flush(cork)  # what was answered before goes out first
                    self._write_region(part)
            if own_cork and cork:
                self._flush(cork)  # a read's cork is flushed once its frames are handled
        finally:
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)

    def _flush_cork(self) -> None:
        if self._cork:
            self._flush(self._cork)

    def _flush(self, parts: list[Any]) -> None:
        """Write small parts as one (and empty the list)."""
        if self.transport is not None:
            self.transport.write(parts[0] if len(parts) == 1 else b"".join(parts))
        parts.clear()

    def _uncork(self) -> None:
        if self._cork:
            if self._closed:
                self._cork.clear()
            else:
                self._flush_cork()
        self._cork = None

    def _write_region(self, region: Any) -> None:
        """Send a file range: by sendfile while nothing else is queued, else by a copy."""
        transport = self.transport
        assert transport is not None
        fd = region.file.fileno()
        position, remaining = region.position, region.length
        if self._sock_fd >= 0 and transport.get_write_buffer_size() == 0:
            try:
                while remaining:
                    sent = os.sendfile(self._sock_fd, fd, position, remaining)
                    if sent == 0:
                        break
                    position += sent
                    remaining -= sent
            except (BlockingIOError, InterruptedError):
                pass
            except OSError as exc:
                self.close(f"sendfile failed: {exc}")
                return
        if remaining:
            data = os.pread(fd, remaining, position)
            if len(data) < remaining:
                # The frame's size prefix is already out; a short body would desynchronise it.
                self.close(f"segment file shorter than the region being sent ({region!r})")
                return
            transport.write(data)

    # -- flow control ------------------------------------------------------------------

    def _pause_reading(self) -> None:
        if not self._paused_reading and self.transport is not None:
            self._paused_reading = True
            self.transport.pause_reading()

    def _maybe_resume_reading(self) -> None:
        if (
            self._paused_reading
            and not self._paused_writing
            and not self._waiting_for_memory
            and len(self._queue) < _MAX_IN_FLIGHT // 2
            and len(self._held) < _MAX_HELD // 2
            and self.transport is not None
            and not self._closed
            and time.monotonic() >= self._muted_until
        ):
            self._paused_reading = False
            self.transport.resume_reading()

    def _check_idle(self) -> None:
        """Kafka's connections.max.idle.ms: close a connection nothing has moved on.

        A request still being answered (a Fetch parked on max_wait) counts as activity.
        One timer per connection, re-armed from the last activity; the data path only
        stamps a time.
        """
        if self._closed:
            return
        idle = time.monotonic() - self._last_active
        if idle >= self._max_idle_s and not self._queue:
            self.close(f"idle for {idle:.1f}s (connections.max.idle.ms)")
            return
        wait = self._max_idle_s if self._queue else self._max_idle_s - idle
        self._idle_timer = asyncio.get_running_loop().call_later(wait, self._check_idle)

    def close(self, reason: str, quiet: bool = False) -> None:
        """Close the connection; unless ``quiet`` (the cause was logged already), say why
        once and count it as bad input."""
        if not self._closed:
            if not quiet:
                log.warning("closing connection from %s: %s", self.peer, reason)
                self.broker.counters.bad_requests += 1
            if self._cork:
                self._flush_cork()  # the answers before the close still go out, in order
            self._closed = True
            if self.transport is not None:
                self.transport.close()
