"""One-node graphs around the production graph's own node functions.

The node is taken from ``graph.assembly.build_graph()`` by name, i.e. exactly
the function the chat graph runs (``nodes.summarize.summarize``,
``nodes.extract_memories.extract_memories``), and compiled into a graph with
the same ``State`` and ``Context`` schemas and a real store (or several of them in a row,
``nodes_graph``). Running it gives
the node the same runtime it gets in the chat graph: ``get_context(runtime)``,
``runtime.store``, the thread id from the config, the stream writer.
"""

from __future__ import annotations

from langgraph.graph import END, START, StateGraph

from graph.assembly import build_graph
from core.context import Context
from core.state import State

__all__ = ["production_node", "single_node_graph", "nodes_graph"]


def production_node(name: str):
    """The function the production graph registered as node ``name``."""
    spec = build_graph().nodes.get(name)
    if spec is None:
        raise KeyError(f"the production graph has no node {name!r}")
    runnable = spec.runnable
    func = getattr(runnable, "afunc", None) or getattr(runnable, "func", None)
    if func is None:  # pragma: no cover - langgraph always wraps functions in RunnableCallable
        raise TypeError(f"node {name!r} is not a plain function")
    return func


def single_node_graph(name: str, store):
    """``START → <production node> → END`` compiled with ``store`` and no checkpointer.

    No checkpointer on purpose: the replay passes the whole state in on every
    call, which keeps the eval's database small; the node cannot tell.
    """
    return nodes_graph((name,), store)


def nodes_graph(names: tuple[str, ...], store):
    """``START → <production nodes, in order> → END``, as :func:`single_node_graph` (a run of the
    memory phase's nodes, say, each one job, in the production graph's order)."""
    builder = StateGraph(State, context_schema=Context)
    builder.add_sequence([(name, production_node(name)) for name in names])
    builder.add_edge(START, names[0])
    builder.add_edge(names[-1], END)
    return builder.compile(store=store, name=f"eval-{'-'.join(names)}")
