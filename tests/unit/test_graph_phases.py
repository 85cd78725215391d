"""The graph declares its phases (graph/assembly.py) and everything that pauses or resumes a turn
takes them from there: the compiled graph runs in the declared order, and the turn runner pauses
at the declared commit point rather than at a node name of its own."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.source_trees import parsed

from langgraph.graph import END, START

from core.state import LAST_NODE
from graph.assembly import COMMIT_POINT, MEMORY_PHASE, REPLY_PHASE, graph

ROOT = Path(__file__).resolve().parents[2]


def _edges() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for edge in graph.get_graph().edges:
        out.setdefault(edge.source, set()).add(edge.target)
    return out


def test_every_node_of_the_compiled_graph_is_in_exactly_one_phase():
    nodes = set(graph.get_graph().nodes) - {START, END}
    assert nodes == {*REPLY_PHASE, *MEMORY_PHASE}
    assert not set(REPLY_PHASE) & set(MEMORY_PHASE)
    assert len(MEMORY_PHASE) == len(set(MEMORY_PHASE))


def test_the_compiled_graph_runs_the_reply_phase_then_the_memory_phase_in_the_declared_order():
    edges = _edges()
    assert edges[START] == {REPLY_PHASE[0]}
    # The reply phase: load_context (or a refusal, which ends the turn) → retrieve → reply ⇄ tools.
    assert edges["load_context"] == {"retrieve", END}
    assert edges["retrieve"] == {"reply"}
    assert edges["reply"] == {"tools", COMMIT_POINT}
    assert edges["tools"] == {"reply"}
    # The only way into the memory phase is from reply, at the commit point, its first node.
    into_memory = {(s, t) for s, targets in edges.items() for t in targets if t in MEMORY_PHASE and s not in MEMORY_PHASE}
    assert into_memory == {("reply", COMMIT_POINT)} and COMMIT_POINT == MEMORY_PHASE[0]
    # Then a straight line, in the declared order, to the end; nothing leads back.
    for node, following in zip(MEMORY_PHASE, [*MEMORY_PHASE[1:], END]):
        assert edges[node] == {following}, node
    assert MEMORY_PHASE[-1] == LAST_NODE


def test_the_memory_phase_folds_then_records_the_chat_then_indexes_it_then_extracts():
    # record_chat reads the board the fold leaves; index_messages files only under a thread
    # record_chat claimed; what memory learns comes last, as before the split.
    assert MEMORY_PHASE == ("summarize", "record_chat", "index_messages", "extract_memories")


def _tree(relative: str) -> ast.Module:
    return parsed(ROOT / relative)


def test_the_turn_runner_pauses_at_the_assemblys_commit_point():
    tree = _tree("app/runs/turn_runner.py")
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "graph.assembly"
        for alias in node.names
    }
    assert {"COMMIT_POINT", "MEMORY_PHASE"} <= imported
    pauses = [kw.value for node in ast.walk(tree) if isinstance(node, ast.Call) for kw in node.keywords if kw.arg == "interrupt_before"]
    assert pauses and all(ast.unparse(value) == "[COMMIT_POINT]" for value in pauses)


def test_no_entry_point_pauses_a_turn_at_a_node_name_of_its_own():
    # A node named in a string here would silently stop pausing (or pause elsewhere) when the phases change.
    literal = []
    for package in ("app", "evals", "memory", "benchmarks", "tests"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if "interrupt_" not in path.read_text(encoding="utf-8"):
                continue  # parsing every test file took ~4 s
            for node in ast.walk(parsed(path)):
                if isinstance(node, ast.Call):
                    for kw in node.keywords:
                        if kw.arg in ("interrupt_before", "interrupt_after") and any(
                            isinstance(c, ast.Constant) and isinstance(c.value, str) for c in ast.walk(kw.value)
                        ):
                            literal.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert literal == []
