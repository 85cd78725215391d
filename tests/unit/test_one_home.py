"""One concept, one place, checked over the production packages' source (ARCHITECTURE.md):
every write to a user's memory goes through the writer package, memory/writer/, SQL on LangGraph's
tables lives in storage/, there is one stopword list (core/stopwords.py), one home for word splitters (core/words.py), one
table of similarity thresholds (embeddings/calibration.py), no private LangGraph import, and the store's
pool, embeddings and checkpoint reader are reached through storage/memory_store.py only."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.support.source_trees import parsed

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
            found.append((path.relative_to(ROOT).as_posix(), parsed(path)))
    return found


def found_outside(check, allowed: str | tuple[str, ...]) -> dict[str, list]:
    """What ``check`` finds in each source file outside the ``allowed`` paths."""
    return {path: hits for path, tree in sources() if not path.startswith(allowed) and (hits := check(tree))}


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
    outside = found_outside(store_writes, WRITER)
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


# A regular expression that matches a run of word characters: ``\w+``, ``[\w-]+``, ``[a-z0-9]+``,
# ``[^\W_]+``, ``\w+(?:'\w+)?``... (a pattern that only starts with one, such as a function name's
# ``[a-z][a-z0-9]*``, is not a splitter).
WORD_SPLITTER = re.compile(r"^(?:\\w|\[\^?(?:\\[wWd]|a-z|A-Z|0-9|[-_'’])+\])\+")
# The published scorers' own tokenizers (ROUGE's, LoCoMo's), kept as they define them.
SPLITTERS_ALLOWED = ("core/words.py", "evals/metrics/")


def word_splitters(tree: ast.Module) -> list[int]:
    """Lines passing a word-run pattern to ``re`` (compile, findall, finditer, split, ...)."""
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "re"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
        and WORD_SPLITTER.match(node.args[0].value)
    ]


def test_words_are_split_only_in_core_words():
    outside = found_outside(word_splitters, SPLITTERS_ALLOWED)
    assert outside == {}, f"word splitters outside core/words.py (use or add one there): {outside}"


# A name of a similarity floor (weights such as W_SIMILARITY are not floors).
THRESHOLD_NAME = re.compile(r"^(?!W_)\w*(?:similarity|threshold|duplicate)", re.I)
# evals/ scores runs with its own pinned matcher and options (--threshold): a measurement's settings.
THRESHOLDS_ALLOWED = ("embeddings/calibration.py", "evals/")


def threshold_constants(tree: ast.Module) -> list[str]:
    """Names bound to a float literal (assignments, fields, parameter defaults) that name a similarity floor."""
    found = []
    for node in ast.walk(tree):
        pairs: list[tuple[ast.AST, ast.AST]] = []
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    pairs += list(zip(target.elts, node.value.elts))
                else:
                    pairs.append((target, node.value))
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            pairs.append((node.target, node.value))
        elif isinstance(node, ast.arguments):
            positional = node.posonlyargs + node.args
            pairs += list(zip(positional[len(positional) - len(node.defaults) :], node.defaults))
            pairs += [(a, d) for a, d in zip(node.kwonlyargs, node.kw_defaults) if d is not None]
        for target, value in pairs:
            name = getattr(target, "id", None) or getattr(target, "arg", None) or getattr(target, "attr", None) or ""
            if THRESHOLD_NAME.match(name) and isinstance(value, ast.Constant) and isinstance(value.value, float):
                found.append(f"{name}@{target.lineno}")
    return found


def test_similarity_thresholds_are_only_in_the_calibration_table():
    outside = found_outside(threshold_constants, THRESHOLDS_ALLOWED)
    assert outside == {}, f"similarity thresholds outside embeddings/calibration.py: {outside}"


@pytest.mark.parametrize(
    "check, source, found",
    [
        (word_splitters,
         'a = re.findall(r"[a-z0-9]+", t)\nb = re.compile(r"\\w+")\nc = re.compile(r"[^\\W_]+(?:\'x)*")\n'
         'd = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+")\ne = re.compile(r"\\s+")',
         [1, 2, 3]),
        (threshold_constants,
         "MERGE_THRESHOLD = 0.9\nMIN_FACTS, MIN_SIMILARITY = 3, 0.25\nclass G:\n    min_similarity: float = 0.4\n"
         "def f(k, duplicate_threshold: float = 0.95): pass\nW_SIMILARITY = 0.6\nMIN_SIMILARITY = CALIBRATED.fact_recall",
         ["MERGE_THRESHOLD@1", "MIN_SIMILARITY@2", "min_similarity@4", "duplicate_threshold@5"]),
    ],
    ids=["the splitter check sees a new splitter and not a name pattern", "the threshold check sees constants, fields and defaults"],
)
def test_a_check_sees_what_it_looks_for(check, source, found):
    assert check(ast.parse(source)) == found


def test_every_embedding_model_has_every_threshold():
    from dataclasses import asdict

    from embeddings.calibration import FIELDS, MINILM, THRESHOLDS

    assert MINILM in THRESHOLDS
    for model, row in THRESHOLDS.items():
        values = asdict(row)
        assert tuple(values) == FIELDS, model
        assert all(isinstance(v, float) and 0.0 < v <= 1.0 for v in values.values()), (model, values)


# The index of what was said (the ``messages`` kind) is derived data with its own writer, not
# memory/writer/: memory/episodes.py indexes and rebuilds it; the statements are in storage/.
EPISODE_INDEX_WRITER = "memory/episodes.py"
EPISODE_INDEX_SQL = ("storage/episodes.py", "storage/episode_rewrites.py")
EPISODE_INDEX_WRITES = {"sync_thread", "copy_episodes", "delete_thread", "delete_messages", "delete_owner", "resize", "rewrite"}
# Besides the writer, only these remove or redact rows, each as part of a larger deletion.
EPISODE_INDEX_DELETERS = {
    "memory/chat_admin.py": "a chat's rows go with the chat (delete_chat)",
    "memory/kinds.py": "forget-me: the messages kind's forget=",
    "memory/forgetting.py": "forgetting one thing rewrites it out of the rows that said it",
    "memory/reindex.py": "a new embedding model's dimensions empty the table",
}


def episode_index_writes(tree: ast.Module) -> list[int]:
    """Lines using a write of storage.episodes or storage.episode_rewrites, by any imported name."""
    modules, functions = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "storage":
            modules |= {a.asname or a.name for a in node.names if a.name in ("episodes", "episode_rewrites")}
        elif isinstance(node, ast.ImportFrom) and node.module in ("storage.episodes", "storage.episode_rewrites"):
            functions |= {a.asname or a.name for a in node.names if a.name in EPISODE_INDEX_WRITES}
    return [
        node.lineno
        for node in ast.walk(tree)
        if (isinstance(node, ast.Attribute) and node.attr in EPISODE_INDEX_WRITES and isinstance(node.value, ast.Name) and node.value.id in modules)
        or (isinstance(node, ast.Name) and node.id in functions)
    ]


def test_only_its_writer_writes_the_index_of_what_was_said():
    allowed = (EPISODE_INDEX_WRITER, *EPISODE_INDEX_SQL, *EPISODE_INDEX_DELETERS)
    outside = {path: lines for path, tree in sources() if path not in allowed and (lines := episode_index_writes(tree))}
    assert outside == {}, f"writes of the episodic index outside {EPISODE_INDEX_WRITER}: {outside}"
    sql = [
        f"{path}:{node.lineno}"
        for path, tree in sources()
        if path not in EPISODE_INDEX_SQL
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "memory_agent_episodes" in node.value
        and re.search(r"\b(?:INSERT|UPDATE|DELETE|COPY|TRUNCATE)\b", node.value)
    ]
    assert sql == [], f"SQL writing the episodic index outside storage/: {sql}"


def test_the_index_write_check_sees_each_way_of_naming_it():
    tree = ast.parse(
        "from storage import episodes as table, forget_ledger\nfrom storage.episode_rewrites import rewrite\n"
        "table.sync_thread(p)\nforget_ledger.delete_owner(p)\nrewrite(p)\ntable.count(p)"
    )
    assert sorted(episode_index_writes(tree)) == [3, 5]


# Names a module is called by, never imported bare: every storage module has its own ``setup``
# (``episodes.setup(...)``); nodes/tools.py names its tools as the model sees them, each over the
# read layer's function of the same name and shape; the server-modes file's ``forget`` is its own.
MODULE_VERBS = {"setup", "finish", "delete_owner", "search"}
SAME_NAME_ON_PURPOSE = {frozenset({"nodes/tools.py", "memory/queries.py"}), frozenset({"llm/server_modes.py", "memory/forgetting.py"})}
READ_AND_MEMORY_PACKAGES = ("core", "embeddings", "graph", "knowledge", "llm", "memory", "nodes", "prompts", "storage")


def test_one_name_means_one_function_across_the_memory_packages():
    """Issue 29: `search_chats` and `list_tasks` meant two different shapes in two modules. A public
    function's name belongs to one module of the packages below the entry points."""
    homes: dict[str, list[str]] = {}
    for path, tree in sources():
        if not path.startswith(READ_AND_MEMORY_PACKAGES):
            continue
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
                homes.setdefault(node.name, []).append(path)
    clashes = {
        name: paths for name, paths in homes.items()
        if len(paths) > 1 and name not in MODULE_VERBS and frozenset(paths) not in SAME_NAME_ON_PURPOSE
    }
    assert clashes == {}, f"one name, several functions: {clashes}"


# Modules whose job is reading memory (or the tables under it): the entry points read them through
# memory/queries.py, which re-exports what they offer.
READ_LAYER = "memory.queries"
READ_ONLY_MODULES = {
    "memory.user_memory", "memory.chat_search", "memory.episodes", "memory.recall", "memory.provenance",
    "storage.store_rows", "storage.store_lookups", "storage.episodes", "storage.vector_search", "storage.embeddings_record",
}


def _module_of(node: ast.ImportFrom, name: str) -> str:
    """The module an ``import from`` reads ``name`` from (``from memory import user_memory`` reads memory.user_memory)."""
    base = node.module or ""
    return f"{base}.{name}" if (ROOT / base.replace(".", "/") / f"{name}.py").exists() else base


def read_layer_names() -> set[str]:
    """The readers memory/queries.py re-exports from beside their writers (functions and models, not modules)."""
    names = set()
    for node in ast.walk(parsed(ROOT / "memory/queries.py")):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(("memory", "storage")):
            names |= {a.name for a in node.names if _module_of(node, a.name) == node.module}
    return names


def reads_around_the_layer(tree: ast.Module, reads: set[str]) -> list[str]:
    """``module.name@line`` for each import of a read-only module, or of a name the read layer
    re-exports, from anywhere but the read layer."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"{a.name}@{node.lineno}" for a in node.names if a.name in READ_ONLY_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module != READ_LAYER:
            for alias in node.names:
                module = _module_of(node, alias.name)
                if module in READ_ONLY_MODULES or (module.startswith(("memory", "storage")) and alias.name in reads):
                    found.append(f"{module}.{alias.name}@{node.lineno}")
    return found


def test_the_entry_points_read_memory_only_through_the_read_layer():
    """Issue 29: routes, the CLI and doctor read chats and counts around memory/queries.py."""
    reads = read_layer_names()
    assert {"find_chat", "owned_chats", "memory_sources"} <= reads, "the read layer's re-exports are found"
    outside = {path: hits for path, tree in sources() if path.startswith("app/") and (hits := reads_around_the_layer(tree, reads))}
    assert outside == {}, f"entry points reading around memory/queries.py: {outside}"


def test_the_read_check_sees_each_way_around_the_layer():
    source = (
        "from memory.chat_search import find_chat\nfrom storage import store_rows\nimport memory.recall\n"
        "from memory.chat_admin import owned_chats, delete_chat\nfrom memory.queries import find_chat\nfrom memory import queries as q"
    )
    found = reads_around_the_layer(ast.parse(source), {"find_chat", "owned_chats"})
    assert found == ["memory.chat_search.find_chat@1", "storage.store_rows.store_rows@2", "memory.recall@3", "memory.chat_admin.owned_chats@4"]
