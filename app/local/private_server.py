"""What keeps the local model server its owner's: an ASGI layer in front of llama-cpp-python's app.

llama-cpp-python's server answers anyone who reaches it: no key unless one is given, CORS for
every origin with credentials, any ``Host`` (so a web page can reach it by DNS rebinding), and
a reply's ``model`` field is the weights' local path whenever the client names no model. In
front of it, every request must

- name a loopback host (``127.0.0.1``, ``localhost``, ``[::1]``): any other ``Host`` is 421;
- come from no web page, or from the server's own origin: any other ``Origin`` is 403;
- carry ``Authorization: Bearer <key>``, the key memory-agent generated when it started the
  server (compared in constant time): otherwise 401;

and no ``Access-Control-*`` header leaves it. A JSON body's ``model`` is set to the alias the
server was started with, so every reply names the alias (the library echoes the request's
``model``, and falls back to the file's path). Errors are OpenAI-shaped, so the openai SDK
shows their message.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import secrets
from typing import Any, Awaitable, Callable

from starlette.datastructures import Headers

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

KEY_ENV = "MEMORY_AGENT_LOCAL_KEY"
"""The environment variable that hands the key to the server process (never its argv: any local user can read that)."""
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "[::1]"})
# A chat request at an 8k context is ~100 KB of JSON; a body past this is not one of ours.
MAX_BODY_BYTES = 4 << 20


def new_key() -> str:
    """A fresh key for one server start (256 bits)."""
    return "ma-local-" + secrets.token_urlsafe(32)


def is_loopback_address(host: str) -> bool:
    """Whether binding to ``host`` keeps the server on this machine (``localhost`` or a loopback IP)."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def host_name(host_header: str) -> str:
    """``127.0.0.1:8080`` -> ``127.0.0.1``, ``[::1]:8080`` -> ``[::1]``, lowercased."""
    value = host_header.strip().lower()
    if value.startswith("["):
        return value[: value.find("]") + 1] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def private_app(app: Any, *, key: str, alias: str) -> "PrivateServer":
    """llama-cpp-python's app (any Starlette app) as the local server serves it: its CORS middleware
    (every origin, with credentials, added by ``create_app``) dropped, and behind ``PrivateServer``."""
    from starlette.middleware.cors import CORSMiddleware

    if getattr(app, "middleware_stack", None) is not None:
        raise RuntimeError("the app has served already; its middleware can no longer change")
    app.user_middleware = [m for m in getattr(app, "user_middleware", []) if m.cls is not CORSMiddleware]
    return PrivateServer(app, key=key, alias=alias)


def _error(status: int, message: str, code: str) -> tuple[int, bytes]:
    body = {"error": {"message": message, "type": "invalid_request_error", "code": code}}
    return status, json.dumps(body).encode()


class PrivateServer:
    """The ASGI app that wraps llama-cpp-python's (see the module's docstring)."""

    def __init__(self, app: ASGIApp, *, key: str, alias: str, max_body: int = MAX_BODY_BYTES) -> None:
        if not key:
            raise ValueError("the local model server needs a key")
        self.app, self.alias, self.max_body = app, alias, max_body
        self._expected = key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            return await self.app(scope, receive, send)
        if scope["type"] != "http":  # websockets: the API has none
            if scope["type"] == "websocket":
                await receive()
                await send({"type": "websocket.close", "code": 1008})
            return
        refusal = self._refusal(Headers(scope=scope))
        if refusal:
            return await _respond(send, *refusal)
        if scope["method"] in ("POST", "PUT", "PATCH"):
            body = await _read_body(receive, self.max_body)
            if body is None:
                return await _respond(send, *_error(413, f"request body over {self.max_body} bytes", "request_too_large"))
            body = self._with_alias(body)
            receive = _replay(body, receive)
            headers = [(k, v) for k, v in scope["headers"] if k.lower() != b"content-length"]
            scope = {**scope, "headers": [*headers, (b"content-length", str(len(body)).encode())]}
        await self.app(scope, receive, _without_cors(send))

    def _refusal(self, headers: Headers) -> tuple[int, bytes] | None:
        hosts = headers.getlist("host")
        if len(hosts) != 1 or host_name(hosts[0]) not in LOOPBACK_NAMES:
            # 421: this server is not the one that name points to (a DNS-rebound page, another machine's name).
            return _error(421, "this server answers only to a loopback host name (127.0.0.1, localhost, [::1])", "misdirected_request")
        origins = headers.getlist("origin")
        if origins and origins != [f"http://{hosts[0].strip().lower()}"]:
            return _error(403, "requests from web pages of other origins are refused", "forbidden_origin")
        scheme, _, token = headers.get("authorization", "").partition(" ")
        sent = token.strip().encode() if scheme.lower() == "bearer" else b""  # the scheme's case is no part of it (RFC 9110)
        if not hmac.compare_digest(sent, self._expected):
            return _error(401, "a valid API key is required (the key `memory-agent local serve` printed)", "invalid_api_key")
        return None

    def _with_alias(self, body: bytes) -> bytes:
        """The body with its ``model`` set to the alias (a body that is not a JSON object goes on as it came)."""
        try:
            data = json.loads(body)
        except ValueError:
            return body
        if not isinstance(data, dict):
            return body
        data["model"] = self.alias
        return json.dumps(data).encode()


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # then the client's disconnect, which streaming replies watch for

    return replay


def _without_cors(send: Send) -> Send:
    async def send_without_cors(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = [(k, v) for k, v in message.get("headers", []) if not k.lower().startswith(b"access-control-")]
            message = {**message, "headers": headers}
        await send(message)

    return send_without_cors


async def _respond(send: Send, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
