"""ChatOpenAI for OpenAI-compatible servers that are stricter than OpenAI about the request.

llama-cpp-python's server validates each message with pydantic and answers HTTP 500 to
an assistant message whose ``content`` is null, which langchain-openai sends for every
message that only calls tools: the second model call of any tool loop failed. An empty
string means the same to OpenAI and to every server, so it is sent instead.
"""

from __future__ import annotations

from typing import Any

from langchain_openai import ChatOpenAI


class CompatibleChatOpenAI(ChatOpenAI):
    """ChatOpenAI that sends ``""`` instead of ``null`` as the content of a tool-calling assistant message."""

    def _get_request_payload(self, input_: Any, *, stop: list[str] | None = None, **kwargs: Any) -> dict:
        payload = super()._get_request_payload(input_, stop=stop, **kwargs)
        for message in payload.get("messages", []):
            if message.get("role") == "assistant" and message.get("content") is None:
                message["content"] = ""
        return payload
