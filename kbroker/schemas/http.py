"""The registry's HTTP/1.1 front, on the broker's event loop.

Keep-alive connections, `Content-Length` bodies of at most `MAX_BODY_BYTES` (a larger
one is answered 413 and the connection closed), a deadline for each request's head and
body (a client that sends too slowly is disconnected), TLS for https:// listeners and
HTTP basic authentication against the broker's PLAIN and SCRAM users.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import json
import logging
import ssl
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from kbroker.schemas.api import RegistryApi, Request, Response

log = logging.getLogger("kbroker.schemas.http")

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
MAX_BODY_BYTES = 8 << 20
MAX_HEADERS = 100
HEAD_TIMEOUT_S = 30.0
IDLE_TIMEOUT_S = 120.0
_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    411: "Length Required",
    413: "Payload Too Large",
    422: "Unprocessable Entity",
    500: "Internal Server Error",
}

# (user, password) -> whether they match a known user
Authenticator = Callable[[str, str], bool]
# a bearer token -> the principal it names; raises Unauthenticated with the reason
BearerCheck = Callable[[str], str]


class Unauthenticated(Exception):
    """A bearer token that does not authenticate; the message is safe to log."""


class _Close(Exception):
    """End the connection, answering first if a response is given."""

    def __init__(self, response: Response | None = None) -> None:
        self.response = response


def _error(status: int, code: int, message: str) -> Response:
    return Response(status, {"error_code": code, "message": message})


class RegistryHttpServer:
    def __init__(
        self,
        api: RegistryApi,
        authenticate: Authenticator | None = None,
        request_timeout_s: float = HEAD_TIMEOUT_S,
        bearer: BearerCheck | None = None,
    ) -> None:
        self.api = api
        self.authenticate = authenticate
        self.bearer = bearer
        self.request_timeout_s = request_timeout_s
        self.servers: list[asyncio.AbstractServer] = []
        self._connections: set[asyncio.Task[Any]] = set()

    async def start(self, host: str, port: int, context: ssl.SSLContext | None) -> None:
        server = await asyncio.start_server(
            self._serve, host or None, port, ssl=context, limit=64 * 1024
        )
        self.servers.append(server)

    async def stop(self) -> None:
        for server in self.servers:
            server.close()
        for task in list(self._connections):
            task.cancel()
        self.servers.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        peer = writer.get_extra_info("peername")
        try:
            while True:
                try:
                    request, keep_alive = await self._read_request(reader)
                except _Close as close:
                    if close.response is not None:
                        await self._send(writer, close.response, False)
                    return
                if request is None:
                    return
                if isinstance(peer, tuple) and peer:
                    request.peer = str(peer[0])
                response = await self._answer(request)
                await self._send(writer, response, keep_alive)
                if not keep_alive:
                    return
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError, ssl.SSLError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("schema registry connection from %s failed", peer)
        finally:
            if task is not None:
                self._connections.discard(task)
            writer.close()

    async def _read_request(self, reader: asyncio.StreamReader) -> tuple[Request | None, bool]:
        try:
            line = await asyncio.wait_for(reader.readline(), IDLE_TIMEOUT_S)
        except (TimeoutError, ValueError):
            return None, False
        if not line:
            return None, False
        try:
            head = await asyncio.wait_for(self._read_head(reader), self.request_timeout_s)
        except TimeoutError:
            log.info("schema registry: closing a connection that sent its request too slowly")
            raise _Close() from None
        except ValueError:
            raise _Close(_error(400, 400, "Request head too large")) from None
        parts = line.decode("latin-1").split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            raise _Close(_error(400, 400, "Malformed request line"))
        method, target, version = parts
        headers = head
        keep_alive = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
        if "chunked" in headers.get("transfer-encoding", "").lower():
            raise _Close(_error(411, 411, "Chunked bodies are not accepted; send Content-Length"))
        try:
            length = int(headers.get("content-length", "0"))
        except ValueError:
            raise _Close(_error(400, 400, "Malformed Content-Length")) from None
        if length < 0:
            raise _Close(_error(400, 400, "Malformed Content-Length"))
        if length > MAX_BODY_BYTES:
            log.info("schema registry: refusing a %d-byte request body", length)
            raise _Close(
                _error(
                    413,
                    413,
                    f"Request body of {length} bytes is over the limit of {MAX_BODY_BYTES}",
                )
            )
        body = b""
        if length:
            try:
                body = await asyncio.wait_for(reader.readexactly(length), self.request_timeout_s)
            except TimeoutError:
                log.info("schema registry: closing a connection that sent its body too slowly")
                raise _Close() from None
        split = urlsplit(target)
        query = dict(parse_qsl(split.query, keep_blank_values=True))
        return Request(method.upper(), split.path, query, body, headers), keep_alive

    @staticmethod
    async def _read_head(reader: asyncio.StreamReader) -> dict[str, str]:
        headers: dict[str, str] = {}
        for _ in range(MAX_HEADERS + 1):
            line = await reader.readline()
            if line in (b"\r\n", b"\n"):
                return headers
            if not line:
                raise asyncio.IncompleteReadError(b"", None)
            name, sep, value = line.decode("latin-1").partition(":")
            if not sep:
                raise ValueError("malformed header")
            headers[name.strip().lower()] = value.strip()
        raise ValueError("too many headers")

    async def _answer(self, request: Request) -> Response:
        if self.authenticate is not None or self.bearer is not None:
            user = self._user(request) if self.bearer is None else self._bearer_user(request)
            if user is None:
                response = _error(401, 40101, "Unauthorized")
                scheme = "Basic" if self.bearer is None else "Bearer"
                response.headers["WWW-Authenticate"] = f'{scheme} realm="kbroker"'
                return response
            request.principal = user
        try:
            return await self.api.handle(request)
        except Exception:
            log.exception("schema registry request %s %s failed", request.method, request.path)
            return _error(500, 50001, "Internal error; see the broker's log")

    def _bearer_user(self, request: Request) -> str | None:
        """RFC 6750's ``Authorization: Bearer <token>``, checked as an OAUTHBEARER
        listener checks tokens; a refusal is logged with its reason, never the token."""
        assert self.bearer is not None
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        try:
            return self.bearer(token.strip())
        except Unauthenticated as exc:
            log.warning("schema registry bearer token from %s refused: %s", request.peer, exc)
            return None

    def _user(self, request: Request) -> str | None:
        auth = request.headers.get("authorization", "")
        scheme, _, token = auth.partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            user, sep, password = (
                base64.b64decode(token.strip(), validate=True).decode().partition(":")
            )
        except (binascii.Error, UnicodeDecodeError, ValueError):
            return None
        if not sep or self.authenticate is None or not self.authenticate(user, password):
            return None
        return user

    @staticmethod
    async def _send(writer: asyncio.StreamWriter, response: Response, keep_alive: bool) -> None:
        if response.raw and isinstance(response.body, str):
            data = response.body.encode()
        else:
            data = json.dumps(response.body, separators=(",", ":")).encode()
        status = response.status
        head = [
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}",
            f"Content-Type: {CONTENT_TYPE}",
            f"Content-Length: {len(data)}",
            "Connection: " + ("keep-alive" if keep_alive else "close"),
        ]
        head += [f"{k}: {v}" for k, v in response.headers.items()]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + data)
        await writer.drain()


def password_checker(
    plain_users: dict[str, str], scram: Callable[[str, str], Any] | None
) -> Authenticator:
    """Check a basic-auth user against PLAIN users (their JAAS passwords) and SCRAM
    credentials (the stored key, recomputed from the password)."""
    from kbroker.security.scram import MECHANISMS, credential_from_salted, salted_password

    def check(user: str, password: str) -> bool:
        known = plain_users.get(user)
        if known is not None and hmac.compare_digest(known.encode(), password.encode()):
            return True
        if scram is None:
            return False
        for mechanism in MECHANISMS:
            credential = scram(user, mechanism)
            if credential is None:
                continue
            salted = salted_password(mechanism, password, credential.salt, credential.iterations)
            derived = credential_from_salted(
                mechanism, credential.salt, credential.iterations, salted
            )
            if hmac.compare_digest(derived.stored_key, credential.stored_key):
                return True
        return False

    return check
