"""One concept, one place, checked over the production packages' source (ARCHITECTURE.md):
every write to a user's memory goes through the writer package, memory/writer/, SQL on LangGraph's
tables lives in storage/, there is one stopword list (core/stopwords.py), no private
LangGraph import, and the store's pool, embeddings and checkpoint reader are reached through
storage/memory_store.py only."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from core.stopwords import STOPWORDS

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("app", "core", "embeddings", "evals", "graph", "knowledge", "llm", "memory", "nodes", "offline_model", "prompts", "storage")
WRITER = "memory/writer/"
STORE_HOME = "storage/memory_store.py"
STORE_HANDLES = {"conn", "embeddings", "index_config", "pool"}
STORE_WRITES = {"aput", "adelete", "abatch", "put", "delete", "batch"}
LANGGRAPH_TABLES = r"(?:store|store_vectors|checkpoints|checkpoint_writes|checkpoint_blobs|checkpoint_migrations|store_migrations|vector_migrations)"
SQL_ON_LANGGRAPH = re.compile(rf"\b(?:FROM|INTO|UPDATE|JOIN|ON|TABLE)\s+{LANGGRAPH_TABLES}\b", re.I)
SQL_WORDS = re.compile(r"\b(?:SELECT|DELETE|UPDATE|INSERT|CREATE|ALTER|DROP)\b")


def sources() -> list[tuple[str, ast.Module]]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found.append((path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(encoding="utf-8"))))
    return found


def _is_super_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"


def store_writes(tree: ast.Module) -> list[int]:
    """Lines calling a store's write methods or building a PutOp (a class's own ``super()`` call aside)."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id == "PutOp":
            lines.append(node.lineno)
        elif isinstance(func, ast.Attribute) and func.attr in STORE_WRITES and not _is_super_call(func.value):
            receiver = ast.unparse(func.value)
            # Route decorators (@router.delete) and queues (.put) are not stores.
            if "store" in receiver.lower() or receiver in {"tx", "self"}:
                lines.append(node.lineno)
    return lines


def test_only_the_writer_writes_or_deletes_memory_items():
    outside = {path: lines for path, tree in sources() if not path.startswith(WRITER) and (lines := store_writes(tree))}
    assert outside == {}, f"memory writes outside {WRITER}: {outside}"


def test_the_write_check_sees_a_bare_store_write():
    tree = ast.parse("async def f(store, tx):\n    await store.aput(ns, 'k', {})\n    await tx.adelete(ns, 'k')\n    PutOp(ns, 'k', {})")
    assert sorted(store_writes(tree)) == [2, 3, 4]


def test_only_storage_holds_sql_on_langgraphs_tables():
    outside = []
    for path, tree in sources():
        if path.startswith("storage/"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
                if SQL_WORDS.search(text) and SQL_ON_LANGGRAPH.search(text):
                    outside.append(f"{path}:{node.lineno}")
    assert outside == [], f"SQL on LangGraph's tables outside storage/: {outside}"


def word_lists(tree: ast.Module) -> list[tuple[int, list[str]]]:
    """String literals that are lists of words (``"a an the ...".split()``, set/list/tuple literals of words)."""
    found = []
    for node in ast.walk(tree):
        words: list[str] = []
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "split":
            if isinstance(node.func.value, ast.Constant) and isinstance(node.func.value.value, str):
                words = node.func.value.value.split()
        elif isinstance(node, (ast.Set, ast.List, ast.Tuple)) and node.elts and all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts
        ):
            words = [e.value for e in node.elts]
        if words:
            found.append((node.lineno, words))
    return found


def looks_like_a_stopword_list(words: list[str]) -> bool:
    return len(words) >= 25 and sum(w.lower() in STOPWORDS for w in words) >= 0.6 * len(words)


def test_there_is_one_stopword_list():
    seconds = [
        f"{path}:{line}"
        for path, tree in sources()
        if path != "core/stopwords.py"
        for line, words in word_lists(tree)
        if looks_like_a_stopword_list(words)
    ]
    assert seconds == [], f"stopword lists outside core/stopwords.py: {seconds}"


def test_the_stopword_check_sees_a_second_list():
    tree = ast.parse('_STOP = frozenset("a an and are as at be but by can did do for from had has have how i if in is it its me my".split())')
    assert [line for line, words in word_lists(tree) if looks_like_a_stopword_list(words)] == [1]


def test_no_private_langgraph_module_is_imported():
    private = [
        f"{path}:{node.lineno}"
        for path, tree in sources()
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("langgraph") and "._" in node.module
    ]
    assert private == [], f"private langgraph imports: {private}"


def store_fishing(tree: ast.Module) -> list[int]:
    """Lines that reach into a store by name instead of through storage.memory_store.memory_store:
    ``getattr(x, "conn" | "embeddings" | "index_config" | "pool")``, a ``pool_of``, or a branch on
    ``isinstance(x, AsyncPostgresStore)`` (a fallback for a store the product does not run on)."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, (ast.Name, ast.Attribute)):
            continue
        name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
        args = node.args
        if name == "getattr" and len(args) >= 2 and isinstance(args[1], ast.Constant) and args[1].value in STORE_HANDLES:
            lines.append(node.lineno)
        elif name == "pool_of":
            lines.append(node.lineno)
        elif name == "isinstance" and len(args) == 2 and "AsyncPostgresStore" in ast.unparse(args[1]):
            lines.append(node.lineno)
    return lines


def test_the_store_is_reached_through_its_one_accessor():
    outside = {path: lines for path, tree in sources() if path != STORE_HOME and (lines := store_fishing(tree))}
    assert outside == {}, f"a store's pool, embeddings or type fished for outside {STORE_HOME} (use memory_store(store)): {outside}"


def test_the_store_check_sees_fishing():
    tree = ast.parse(
        "pool = getattr(store, 'conn', None)\n"
        "emb = (getattr(store, 'index_config', None) or {}).get('embed')\n"
        "p = thread_owners.pool_of(store)\n"
        "if isinstance(store, AsyncPostgresStore): pass\n"
        "x = getattr(item, 'text', '')"
    )
    assert sorted(store_fishing(tree)) == [1, 2, 3, 4]
