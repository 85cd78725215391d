"""ChatOpenAI for OpenAI-compatible servers: stricter than OpenAI about the request, looser about the answer.

llama-cpp-python's server validates each message with pydantic and answers HTTP 500 to
an assistant message whose ``content`` is null, which langchain-openai sends for every
message that only calls tools: the second model call of any tool loop failed. An empty
string means the same to OpenAI and to every server, so it is sent instead.

A wrong OPENAI_BASE_URL (the server's root, not its ``/v1``) or a proxy's login page answers
200 with a page that is not a chat completion. The SDK hands that over as text, and the turn
failed with "No generation chunks were returned" (a streamed reply) or "'str' object has no
attribute 'choices'" (structured output): such an answer is named as what it is here.
"""

from __future__ import annotations

import re
from typing import Any, AsyncIterator, Iterator

from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_openai import ChatOpenAI

from core.errors import MemoryAgentError


class NotAChatCompletion(MemoryAgentError):
    """A model server answered, but not with a chat completion (a web page, an empty stream)."""


def _not_a_completion(server: str, got: str) -> NotAChatCompletion:
    return NotAChatCompletion(
        f"the model server at {server} answered with {got}, not a chat completion. Is OPENAI_BASE_URL the "
        "address of its OpenAI-compatible API (it usually ends in /v1), and does nothing in between answer instead?"
    )


def _words(page: str) -> str:
    """A page's text without its tags, briefly: enough to recognise a proxy's or a login page."""
    return " ".join(re.sub(r"<[^>]*>", " ", page).split())[:120]


def _page_of(response: Any) -> str | None:
    """What a non-JSON HTTP answer was, briefly ("a text/html page: '502 Bad Gateway'"); None for JSON."""
    headers = getattr(response, "headers", None)  # the SDK's HTTP client's response (httpx2 in openai 3)
    if headers is None or not hasattr(headers, "get"):
        return None
    kind = str(headers.get("content-type") or "").split(";")[0].strip() or "no content type"
    if kind.endswith("json"):
        return None
    try:
        words = _words(str(response.text))
    except Exception:  # a body not read or not decodable: the content type says enough
        words = ""
    return f"a {kind} page" + (f": {words!r}" if words else "")


class CompatibleChatOpenAI(ChatOpenAI):
    """ChatOpenAI that sends ``""`` instead of ``null`` as the content of a tool-calling assistant message."""

    def _get_request_payload(self, input_: Any, *, stop: list[str] | None = None, **kwargs: Any) -> dict:
        payload = super()._get_request_payload(input_, stop=stop, **kwargs)
        for message in payload.get("messages", []):
            if message.get("role") == "assistant" and message.get("content") is None:
                message["content"] = ""
        return payload

    def _server(self) -> str:
        return str(self.openai_api_base or getattr(self.root_async_client, "base_url", "") or "its address").rstrip("/")

    def _named(self, exc: Exception) -> Exception:
        page = _page_of(getattr(exc, "response", None))  # langchain-openai puts the HTTP answer on a failed parse
        return _not_a_completion(self._server(), page) if page else exc

    def _create_chat_result(self, response: Any, generation_info: dict | None = None) -> ChatResult:
        if isinstance(response, str):  # the SDK's reading of a body that is not JSON
            raise _not_a_completion(self._server(), f"a page that is not JSON: {_words(response)!r}")
        return super()._create_chat_result(response, generation_info)

    def _generate(self, *args: Any, **kwargs: Any) -> ChatResult:
        try:
            return super()._generate(*args, **kwargs)
        except (AttributeError, TypeError, ValueError) as exc:
            raise self._named(exc) from exc

    async def _agenerate(self, *args: Any, **kwargs: Any) -> ChatResult:
        try:
            return await super()._agenerate(*args, **kwargs)
        except (AttributeError, TypeError, ValueError) as exc:
            raise self._named(exc) from exc

    def _stream(self, *args: Any, **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        chunks = 0
        for chunk in super()._stream(*args, **kwargs):
            chunks += 1
            yield chunk
        if not chunks:  # every chat completions stream sends a chunk at least (the role's)
            raise _not_a_completion(self._server(), "no stream events")

    async def _astream(self, *args: Any, **kwargs: Any) -> AsyncIterator[ChatGenerationChunk]:
        chunks = 0
        async for chunk in super()._astream(*args, **kwargs):
            chunks += 1
            yield chunk
        if not chunks:
            raise _not_a_completion(self._server(), "no stream events")
