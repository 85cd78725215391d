"""The graph, as it reads in the diagram:

    load_context → retrieve → reply ⇄ tools → summarize → extract_memories

``graph`` (compiled without checkpointer or store) is what ``langgraph dev`` serves
with our Postgres saver and store from langgraph.json. ``compile_graph`` attaches
them for the CLI and the HTTP app.
"""

from __future__ import annotations

from langchain_core.messages import AIMessage
from langgraph.graph import END, START, StateGraph

from core.context import Context
from core.state import InputState, State
from nodes.extract_memories import extract_memories
from nodes.load_context import load_context
from nodes.reply import reply
from nodes.retrieve import retrieve
from nodes.summarize import summarize
from nodes.tools import tools

GRAPH_NAME = "memory-agent"


def after_load_context(state: State) -> str:
    return END if state.error else "retrieve"


def after_reply(state: State) -> str:
    # Bounded: reply stops offering tools (and drops stray calls) once max_tool_steps is reached.
    last = state.messages[-1] if state.messages else None
    return "tools" if isinstance(last, AIMessage) and last.tool_calls else "summarize"


def build_graph() -> StateGraph:
    builder = StateGraph(State, input_schema=InputState, context_schema=Context)
    builder.add_node("load_context", load_context)
    builder.add_node("retrieve", retrieve)
    builder.add_node("reply", reply)
    builder.add_node("tools", tools)
    builder.add_node("summarize", summarize)
    builder.add_node("extract_memories", extract_memories)

    builder.add_edge(START, "load_context")
    builder.add_conditional_edges("load_context", after_load_context, ["retrieve", END])
    builder.add_edge("retrieve", "reply")
    builder.add_conditional_edges("reply", after_reply, ["tools", "summarize"])
    builder.add_edge("tools", "reply")
    builder.add_edge("summarize", "extract_memories")
    builder.add_edge("extract_memories", END)
    return builder


def compile_graph(checkpointer=None, store=None):
    return build_graph().compile(checkpointer=checkpointer, store=store, name=GRAPH_NAME)


# For `langgraph dev` / LangGraph Server: no checkpointer or store compiled in.
graph = compile_graph()
