"""The offline model's answers served by the OpenAI-compatible stub: the real client path (langchain-openai,
HTTP, SSE, tool calls, structured output) with realistic replies, and every request logged by the stub.

A reply prompt gets the offline model's reply (which restates what memory gave it, so a leak shows
up in the reply too), and its ``forget_memory`` call when the user asks to forget; the fold, title
and extraction calls get the offline model's summary, title and rule-based extraction.
"""

from __future__ import annotations

import json
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from core.schemas import ChatTitle, ExtractionResult, SummaryBoard
from offline_model.model import OfflineChatModel, offline_structured
from tests.support.openai_stub_server import StubRequest, structured_answer, tool_call

_SCHEMAS = {"ExtractionResult": ExtractionResult, "SummaryBoard": SummaryBoard, "ChatTitle": ChatTitle}
_KINDS = {"extract": ExtractionResult, "fold": SummaryBoard, "title": ChatTitle}


def _content(content: Any) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def as_messages(request: StubRequest) -> list:
    out = []
    for m in request.messages:
        role, text = m.get("role"), _content(m.get("content"))
        if role == "system":
            out.append(SystemMessage(text))
        elif role == "user":
            out.append(HumanMessage(text))
        elif role == "tool":
            out.append(ToolMessage(text, tool_call_id=m.get("tool_call_id") or "call"))
        else:
            calls = [
                {"name": c["function"]["name"], "args": json.loads(c["function"]["arguments"] or "{}"), "id": c.get("id"), "type": "tool_call"}
                for c in m.get("tool_calls") or []
            ]
            out.append(AIMessage(text, tool_calls=calls))
    return out


def offline_responder(request: StubRequest):
    """The stub's script: the offline model answering each of the agent's calls."""
    messages = as_messages(request)
    schema = _KINDS.get(request.kind)
    if request.kind != "reply" and schema is not None:
        return structured_answer(request, offline_structured(schema, messages).model_dump(mode="json"))
    model = OfflineChatModel().bind_tools([{"name": n} for n in request.tool_names])
    answer = model.invoke(messages)
    if answer.tool_calls:
        call = answer.tool_calls[0]
        return tool_call(call["name"], call["args"])
    return answer.text
