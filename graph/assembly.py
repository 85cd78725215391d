"""The graph, as it reads in the diagram, in two phases with the commit point between them:

    reply phase:   load_context → retrieve → reply ⇄ tools
    ── commit point (a run pauses here: the reply is complete and stays) ──
    memory phase:  summarize → record_chat → index_messages → extract_memories

``REPLY_PHASE``, ``MEMORY_PHASE`` and ``COMMIT_POINT`` below are what the graph is wired from
and what app/runs/turn_runner.py pauses at (``interrupt_before=[COMMIT_POINT]``); the memory phase
is one node per job: the fold into the running summary, the chat's record (the thread's claim,
its title and searchable text, which read the fold's board), the index of what was said (filed
only under a thread the record claimed), then what memory learns from the turn.

``graph`` (compiled without checkpointer or store) is what ``langgraph dev`` serves
with our Postgres saver and store from langgraph.json. ``compile_graph`` attaches
them for the CLI and the HTTP app.
"""

from __future__ import annotations

from langchain_core.messages import AIMessage
from langgraph.graph import END, START, StateGraph
from langgraph.types import Durability

from core.context import Context
from core.state import LAST_NODE, InputState, State
from nodes.extract_memories import extract_memories
from nodes.index_messages import index_messages
from nodes.load_context import load_context
from nodes.record_chat import record_chat
from nodes.reply import reply
from nodes.retrieve import retrieve
from nodes.summarize import summarize
from nodes.tools import tools

GRAPH_NAME = "memory-agent"

REPLY_PHASE = ("load_context", "retrieve", "reply", "tools")
"""Stoppable: a stopped or failed reply phase is taken back (app/runs/turn_runner.py)."""
MEMORY_PHASE = ("summarize", "record_chat", "index_messages", LAST_NODE)
"""After the commit point, in this order; cannot be stopped. (LAST_NODE is "extract_memories",
named in core.state because memory/ below this layer writes states as if it had run.)"""
COMMIT_POINT = MEMORY_PHASE[0]
"""The first node of the memory phase: a turn runs with ``interrupt_before=[COMMIT_POINT]``."""


def reply_phase_durability(first_turn: bool) -> Durability:
    """How a turn's reply phase is saved (``astream(durability=...)``): once, where it stops
    (``"exit"``). A reply cut short is taken back to the thread's mark and kept from the run's row,
    never resumed from a step, so a checkpoint per step was work before the first token that nothing
    read. A thread without a checkpoint saves each step (``"async"``): its input checkpoint, the chat
    before the message, is the fork point when that message is edited or its reply regenerated. The
    app's chats have one from the start, the empty chat's (``memory.chat_admin.write_empty_chat``),
    so their first turn is saved once too. The memory phase keeps a checkpoint per node, so a worker
    that dies in it leaves the nodes done behind."""
    return "async" if first_turn else "exit"


NODES = {
    "load_context": load_context,
    "retrieve": retrieve,
    "reply": reply,
    "tools": tools,
    "summarize": summarize,
    "record_chat": record_chat,
    "index_messages": index_messages,
    "extract_memories": extract_memories,
}


def after_load_context(state: State) -> str:
    return END if state.error else "retrieve"


def after_reply(state: State) -> str:
    # Bounded: reply stops offering tools (and drops stray calls) once max_tool_steps is reached.
    last = state.messages[-1] if state.messages else None
    return "tools" if isinstance(last, AIMessage) and last.tool_calls else COMMIT_POINT


def build_graph() -> StateGraph:
    assert set(NODES) == {*REPLY_PHASE, *MEMORY_PHASE}, "every node belongs to exactly one phase"
    builder = StateGraph(State, input_schema=InputState, context_schema=Context)
    for name in REPLY_PHASE:
        builder.add_node(name, NODES[name])
    # The memory phase is a straight line: each node, then the next.
    builder.add_sequence([(name, NODES[name]) for name in MEMORY_PHASE])

    builder.add_edge(START, "load_context")
    builder.add_conditional_edges("load_context", after_load_context, ["retrieve", END])
    builder.add_edge("retrieve", "reply")
    builder.add_conditional_edges("reply", after_reply, ["tools", COMMIT_POINT])
    builder.add_edge("tools", "reply")
    builder.add_edge(MEMORY_PHASE[-1], END)
    return builder


def compile_graph(checkpointer=None, store=None):
    return build_graph().compile(checkpointer=checkpointer, store=store, name=GRAPH_NAME)


# For `langgraph dev` / LangGraph Server: no checkpointer or store compiled in.
graph = compile_graph()
