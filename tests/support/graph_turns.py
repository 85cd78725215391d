"""Running turns of the real graph the way the CLI does, and reading back what happened."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage
from prometheus_client import REGISTRY

from core.context import Context
from graph.assembly import compile_graph


@dataclass
class Turn:
    tokens: list[str] = field(default_factory=list)
    """Reply text chunks in the order the "messages" stream delivered them (node reply only)."""
    other_tokens: list[tuple[str, str]] = field(default_factory=list)
    """(node, text) of AI chunks streamed by any other node: memory calls must not leak here."""
    events: list[dict] = field(default_factory=list)
    """Custom stream events ({"event": "memory" | "summary", ...})."""
    values: dict[str, Any] = field(default_factory=dict)
    """The thread's state after the run."""
    interrupts: list[Any] = field(default_factory=list)

    @property
    def streamed_reply(self) -> str:
        return "".join(self.tokens)

    @property
    def final_reply(self) -> AIMessage | None:
        messages = self.values.get("messages") or []
        last = messages[-1] if messages else None
        return last if isinstance(last, AIMessage) and not last.tool_calls else None

    def events_of(self, kind: str) -> list[dict]:
        return [e for e in self.events if e.get("event") == kind]


def new_thread() -> dict:
    return {"configurable": {"thread_id": str(uuid.uuid4())}}


def chat_on(backend, user_id: str, model: str, **settings) -> tuple[Any, Context, dict]:
    """The graph on the backend's checkpointer and store, the user's Context with ``model`` (and
    any other ``settings``), and a new thread: what a test needs to run a chat's turns."""
    return compile_graph(backend.checkpointer, backend.store), Context(user_id=user_id, model=model, **settings), new_thread()


async def stream_turn(graph, payload: str | dict | Any, config: dict, context) -> Turn:
    """One run through ``graph.astream`` with the CLI's stream modes; ``payload`` may be text, an input dict or a Command."""
    if isinstance(payload, str):
        payload = {"messages": [HumanMessage(payload, id=str(uuid.uuid4()))]}
    turn = Turn()
    async for mode, chunk in graph.astream(payload, config, context=context, stream_mode=["messages", "custom", "updates"]):
        if mode == "messages":
            message, meta = chunk
            if isinstance(message, AIMessageChunk) and isinstance(message.content, str) and message.content:
                if meta.get("langgraph_node") == "reply":
                    turn.tokens.append(message.content)
                else:
                    turn.other_tokens.append((meta.get("langgraph_node"), message.content))
        elif mode == "custom" and isinstance(chunk, dict):
            turn.events.append(chunk)
        elif mode == "updates" and isinstance(chunk, dict) and "__interrupt__" in chunk:
            turn.interrupts.extend(chunk["__interrupt__"])
    snapshot = await graph.aget_state(config)
    turn.values = dict(snapshot.values)
    return turn


def metric(name: str, labels: dict[str, str] | None = None) -> float:
    """Current value of a Prometheus sample (0 when it has not been touched yet)."""
    return REGISTRY.get_sample_value(name, labels or {}) or 0.0


async def turn_paused_at_commit_point(database_url: str, embeddings, user: str, chat_id: str, text: str = "I have a dog named Rex") -> None:
    """A turn of the real graph on chat ``chat_id``, stopped at the commit point: the reply saved,
    memory not yet updated (what a worker that died between reply and memory update leaves)."""
    from core.context import Context
    from graph.assembly import COMMIT_POINT, compile_graph
    from memory.backend import open_memory

    async with open_memory(database_url, embeddings) as backend:
        graph = compile_graph(backend.checkpointer, backend.store)
        config = {"configurable": {"thread_id": chat_id}}
        async for _ in graph.astream(
            {"messages": [HumanMessage(text)]}, config, context=Context(user_id=user, model="offline"), interrupt_before=[COMMIT_POINT]
        ):
            pass
        assert (await graph.aget_state(config)).next == (COMMIT_POINT,)
