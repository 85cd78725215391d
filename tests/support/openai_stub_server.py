"""A real local HTTP server speaking enough of the OpenAI Chat Completions API for langchain-openai.

Tests point ``ChatOpenAI`` (via OPENAI_BASE_URL) at it, so the whole client path runs:
request payloads, ``response_format`` (json_schema / json_object), ``tools`` and
``tool_calls``, SSE streaming with tool-call deltas and the usage chunk, and the
openai SDK's own parsing. Only the answers are scripted: a responder callback sees
each request and returns what the "model" says. Every request is recorded.

Bound to 127.0.0.1 on a free port, served by uvicorn in a background thread.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

import prompts
from prompts.reply_prompt import user_words
from tests.support.scripted_model import kind_of_user_text


@dataclass
class StubToolCall:
    name: str
    arguments: dict[str, Any] | str
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:12]}")

    def arguments_json(self) -> str:
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments, ensure_ascii=False)


@dataclass
class StubReply:
    """What the scripted model answers: text content (possibly malformed JSON), tool calls, or an HTTP error."""

    content: str | None = None
    tool_calls: list[StubToolCall] = field(default_factory=list)
    error_status: int | None = None
    error_message: str = "stub error"
    delay_seconds: float = 0.0  # a provider slow to answer: nothing is sent before this
    finish_reason: str | None = None  # "length": the reply was cut at the output cap
    body: str | None = None  # answered with HTTP 200 and this body as it is (a proxy's HTML page, not JSON)
    break_after: int | None = None  # a stream that breaks (the connection drops) after this many pieces of content
    usage: bool = True  # False: no usage numbers, as servers that ignore stream_options send


def tool_call(name: str, arguments: dict[str, Any] | str, id: str | None = None) -> StubReply:
    call = StubToolCall(name, arguments) if id is None else StubToolCall(name, arguments, id)
    return StubReply(content=None, tool_calls=[call])


def structured_answer(request: "StubRequest", value: dict[str, Any] | str) -> StubReply:
    """Answer a structured-output request the way its method expects: a forced tool call or JSON text."""
    choice = request.body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "function":
        return tool_call(choice["function"]["name"], value)
    return StubReply(content=value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))


EMPTY_EXTRACTION = {"new_facts": [], "new_preferences": {}, "profile_updates": {}, "task_updates": []}


def structured_mode(request: "StubRequest") -> str:
    """How a request asked for structured output: "function_calling", "json_object_schema" (llama.cpp's
    constrained JSON), "json_object", "json_schema", or "text"."""
    if isinstance(request.body.get("tool_choice"), dict):
        return "function_calling"
    fmt = request.response_format or {}
    if fmt.get("type") == "json_object" and "schema" in fmt:
        return "json_object_schema"
    return fmt.get("type", "text")


def replies_only(reply):
    """A stub script that answers the memory calls (extraction, fold, title) with nothing to learn and
    a fixed summary and title, and every chat reply with ``reply(request)``: for tests of replies."""

    def answer(request: "StubRequest"):
        if request.kind in ("extract", "fold", "title"):
            value = {"extract": EMPTY_EXTRACTION, "fold": {"summary": "s"}, "title": {"title": "Chat"}}[request.kind]
            return structured_answer(request, value)
        return reply(request)

    return answer


@dataclass
class StubRequest:
    """One recorded request to /chat/completions."""

    body: dict[str, Any]

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.body.get("messages", [])

    @property
    def tools(self) -> list[dict[str, Any]]:
        return self.body.get("tools") or []

    @property
    def tool_names(self) -> list[str]:
        return [t["function"]["name"] for t in self.tools if t.get("type") == "function"]

    @property
    def response_format(self) -> dict[str, Any] | None:
        return self.body.get("response_format")

    @property
    def schema(self) -> dict[str, Any] | None:
        """The JSON schema the request asks the server to hold the reply to, through whichever door."""
        fmt = self.response_format or {}
        if fmt.get("type") == "json_schema":
            return (fmt.get("json_schema") or {}).get("schema")
        if fmt.get("type") == "json_object":
            return fmt.get("schema")  # llama-cpp-python's door: a grammar from the schema
        return None

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))

    def text_of(self, role: str) -> str:
        return "\n".join(_content_text(m.get("content")) for m in self.messages if m.get("role") == role)

    @property
    def kind(self) -> str:
        """Which of the agent's calls this is: reply, fold, title or extract."""
        return kind_of_user_text(self.text_of("user"))

    @property
    def is_repair(self) -> bool:
        """The second call of llm.structured.invoke_structured (the model is shown its invalid reply)."""
        last = self.messages[-1] if self.messages else {}
        return last.get("role") == "user" and _content_text(last.get("content")).startswith("That reply was not valid")

    @property
    def last_user_text(self) -> str:
        """The newest user message's own words (a reply prompt opens it with what was found for it)."""
        users = [m for m in self.messages if m.get("role") == "user"]
        return user_words(_content_text(users[-1].get("content"))) if users else ""

    def tagged(self, tag: str) -> str | None:
        return prompts.between(self.text_of("user"), tag)


Responder = Callable[[StubRequest], "StubReply | str | dict"]


def _content_text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def _as_reply(out: StubReply | str | dict) -> StubReply:
    if isinstance(out, StubReply):
        return out
    if isinstance(out, dict):
        return StubReply(content=json.dumps(out, ensure_ascii=False))
    return StubReply(content=str(out))


def _tokens(text: str) -> int:
    return max(1, len(text) // 4) if text else 0


def usage_of(request: StubRequest, reply: StubReply) -> dict[str, int]:
    """Deterministic usage numbers: about four characters a token."""
    prompt = sum(_tokens(_content_text(m.get("content"))) for m in request.messages) + 3 * len(request.messages)
    completion = _tokens(reply.content or "") + sum(_tokens(c.name + c.arguments_json()) for c in reply.tool_calls)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def openai_rule_violation(request: StubRequest) -> str | None:
    """The request checks the real API makes that a client can get wrong (answered with HTTP 400 there too)."""
    fmt = request.response_format or {}
    if fmt.get("type") == "json_object":
        text = " ".join(_content_text(m.get("content")) for m in request.messages)
        if "json" not in text.casefold():
            return "'messages' must contain the word 'json' in some form, to use 'response_format' of type 'json_object'."
    if fmt.get("type") == "json_schema" and "schema" not in (fmt.get("json_schema") or {}):
        return "Missing required parameter: 'response_format.json_schema.schema'."
    answered = {m.get("tool_call_id") for m in request.messages if m.get("role") == "tool"}
    called: set[str] = set()
    for m in request.messages:
        called |= {c["id"] for c in m.get("tool_calls") or []}
        if m.get("role") == "tool" and m.get("tool_call_id") not in called:
            return "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'."
    for m in request.messages:
        for call in m.get("tool_calls") or []:
            if call["id"] not in answered:
                return (
                    "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                    f"'tool_call_id'. The following tool_call_ids did not have response messages: {call['id']}"
                )
    return None


def llama_cpp_refusal(request: StubRequest, accepted_formats: set[str], takes_schema: bool = True) -> str | None:
    """What llama-cpp-python's server says (as HTTP 500) to a response_format type it does not take.

    Its request model allows only ``text`` and ``json_object``; FastAPI's validation error
    is caught by its route handler and returned as an internal server error.
    """
    for i, m in enumerate(request.messages):  # its message models want a string content on assistant messages
        if m.get("role") == "assistant" and m.get("content") is None:
            return (
                "1 validation error:\n  {'type': 'string_type', 'loc': ('body', 'messages', "
                f"{i}, 'ChatCompletionRequestAssistantMessage', 'content'), 'msg': 'Input should be a valid string', 'input': None}}"
            )
    kind = (request.response_format or {}).get("type")
    if kind == "json_object" and not takes_schema and "schema" in (request.response_format or {}):
        return (
            "1 validation error:\n  {'type': 'extra_forbidden', 'loc': ('body', 'response_format', 'schema'), "
            "'msg': 'Extra inputs are not permitted'}"
        )
    if kind is None or kind in accepted_formats:
        return None
    allowed = " or ".join(f"'{k}'" for k in sorted(accepted_formats))
    return (
        "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
        f"'msg': \"Input should be {allowed}\", 'input': '{kind}', 'ctx': {{'expected': \"{allowed}\"}}}}"
    )


def wire_json(payload: Any) -> str:
    """JSON as a server sends it: UTF-8 where it can be, a lone surrogate (a model's broken output) as its escape."""
    text = json.dumps(payload, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(payload)
    return text


def stream_pieces(text: str) -> list[str]:
    """Split text the way a model streams it: one word (with its trailing space) per chunk."""
    return re.findall(r"\S+\s*|\s+", text)


class OpenAIStub:
    """The server plus its script and its record of requests."""

    def __init__(self) -> None:
        self.responder: Responder = lambda request: "stub reply"
        self.requests: list[StubRequest] = []
        # Server capabilities (as llama-cpp-python: accepted_formats={"text", "json_object"}).
        self.accepted_formats: set[str] | None = None  # None: every response_format type
        self.takes_schema = True  # a "schema" beside json_object is accepted (llama-cpp-python makes it a grammar)
        self.honours_tool_choice = True  # False: a forced tool comes back as JSON text, as small local models do
        self._lock = threading.Lock()
        self.app = self._build_app()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port: int | None = None

    # ------------------------------------------------------------------ scripting
    def reset(self, responder: Responder | None = None) -> None:
        with self._lock:
            self.requests.clear()
        self.responder = responder or (lambda request: "stub reply")
        self.accepted_formats = None
        self.takes_schema = True
        self.honours_tool_choice = True

    def like_llama_cpp(self, *, takes_schema: bool = True) -> "OpenAIStub":
        """Refuse ``json_schema`` and a null assistant content with HTTP 500 as llama-cpp-python's server does.

        It takes ``{"type": "json_object", "schema": ...}`` (its grammar door); ``takes_schema=False``
        is a server that refuses that too, so a call goes on to the forced tool.
        (The default stub takes everything, as OpenAI, llama-server, vLLM and Ollama take ``json_schema``.)
        """
        self.accepted_formats = {"text", "json_object"}
        self.takes_schema = takes_schema
        return self

    def requests_of(self, kind: str) -> list[StubRequest]:
        with self._lock:
            return [r for r in self.requests if r.kind == kind]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # ------------------------------------------------------------------ HTTP
    def _build_app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/v1/chat/completions")
        @app.post("/chat/completions")
        async def chat_completions(request: Request):
            body = await request.json()
            recorded = StubRequest(body)
            with self._lock:
                self.requests.append(recorded)
            rejected = openai_rule_violation(recorded)
            if rejected:
                return JSONResponse({"error": {"message": rejected, "type": "invalid_request_error"}}, status_code=400)
            if self.accepted_formats is not None and (refused := llama_cpp_refusal(recorded, self.accepted_formats, self.takes_schema)):
                return JSONResponse(
                    {"error": {"message": refused, "type": "internal_server_error", "param": None, "code": None}}, status_code=500
                )
            try:
                reply = _as_reply(self.responder(recorded))
                if reply.tool_calls and not self.honours_tool_choice and isinstance(body.get("tool_choice"), dict):
                    reply = StubReply(content=reply.tool_calls[0].arguments_json())  # the forced call written as text
            except Exception as exc:  # surfaces in the test as an API error with the reason
                return JSONResponse({"error": {"message": f"responder failed: {exc!r}", "type": "stub_error"}}, status_code=500)
            if reply.delay_seconds:
                await asyncio.sleep(reply.delay_seconds)
            if reply.error_status:
                return JSONResponse({"error": {"message": reply.error_message, "type": "stub_error"}}, status_code=reply.error_status)
            model = body.get("model", "stub")
            if reply.body is not None:
                return Response(reply.body, status_code=200, media_type="text/html")
            if recorded.stream:
                include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
                return StreamingResponse(
                    self._sse(recorded, reply, model, include_usage), media_type="text/event-stream"
                )
            return Response(wire_json(self._completion(recorded, reply, model)), media_type="application/json")

        @app.get("/v1/models")
        async def models():
            return {"object": "list", "data": [{"id": "stub", "object": "model", "owned_by": "stub"}]}

        return app

    def _completion(self, request: StubRequest, reply: StubReply, model: str) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.content, "refusal": None}
        if reply.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments_json()}}
                for c in reply.tool_calls
            ]
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:16]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {"index": 0, "message": message, "finish_reason": reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop"), "logprobs": None}
            ],
            **({"usage": usage_of(request, reply)} if reply.usage else {}),
        }

    def _sse(self, request: StubRequest, reply: StubReply, model: str, include_usage: bool) -> Iterator[str]:
        cid, created = f"chatcmpl-{uuid.uuid4().hex[:16]}", int(time.time())

        def chunk(delta: dict[str, Any] | None, finish: str | None = None, usage: dict | None = None) -> str:
            payload: dict[str, Any] = {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
            }
            if include_usage and reply.usage:
                payload["usage"] = usage  # null on every chunk but the last, as OpenAI does
            return f"data: {wire_json(payload)}\n\n"

        yield chunk({"role": "assistant", "content": ""})
        for n, piece in enumerate(stream_pieces(reply.content or "")):
            if reply.break_after is not None and n >= reply.break_after:
                raise ConnectionResetError("the stub's stream broke mid-reply")  # uvicorn drops the connection
            yield chunk({"content": piece})
        for index, call in enumerate(reply.tool_calls):
            yield chunk(
                {"tool_calls": [{"index": index, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}]}
            )
            args = call.arguments_json()
            for start in range(0, len(args), 7):  # arguments arrive in small fragments
                yield chunk({"tool_calls": [{"index": index, "function": {"arguments": args[start : start + 7]}}]})
        yield chunk({}, finish=reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop"))
        if include_usage and reply.usage:
            yield chunk(None, usage=usage_of(request, reply))
        yield "data: [DONE]\n\n"

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "OpenAIStub":
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.app, log_level="warning", lifespan="off", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, name="openai-stub", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the OpenAI stub server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)


@pytest.fixture(scope="session")
def openai_stub_server() -> Iterator[OpenAIStub]:
    stub = OpenAIStub().start()
    try:
        yield stub
    finally:
        stub.stop()


@pytest.fixture
def openai_stub(openai_stub_server: OpenAIStub, monkeypatch) -> Iterator[OpenAIStub]:
    """The running stub with a fresh script and record; OPENAI_BASE_URL/OPENAI_API_KEY point at it for this test."""
    from llm import chat_model

    openai_stub_server.reset()
    monkeypatch.setenv("OPENAI_BASE_URL", openai_stub_server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    yield openai_stub_server
    openai_stub_server.reset()
    # Models cache per name and captured this test's base URL: drop them.
    with chat_model._lock:
        chat_model._cache.clear()
