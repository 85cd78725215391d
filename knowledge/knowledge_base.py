"""The knowledge base: documents the user ingests, chunked, embedded and searchable.

Storage is our own pair of tables (not the LangGraph store), so chunks can be searched
by vectors *and* full text in one place and replaced a document at a time:

* ``knowledge_chunks``: one row per chunk, keeping the plain text (``content``), its
  heading path, the file's hash, an embedding (HNSW index, cosine) and a generated
  ``tsvector`` (GIN index).
* ``knowledge_documents``: one row per ingested file (collection + source), with its hash
  and chunk count, so an unchanged file is skipped on the next ingest.

Full text uses the ``'simple'`` configuration on purpose: it lower-cases words and does
nothing else. A language configuration such as ``'english'`` would stem and drop stop
words *in English only*: Hebrew or Italian text would be stemmed wrongly or not at all,
and product codes such as ``XR-2291-B`` could be mangled. ``'simple'`` keeps every token
(Hebrew included: the default parser treats non-ASCII letters as letters), so exact terms
in any language match, and the vector side handles paraphrases and inflections.

Search is hybrid: nearest neighbours by cosine distance and full-text matches are fused
with reciprocal rank fusion, then diversified with MMR within ``k`` chunks and a token
budget (see :mod:`knowledge.hybrid_ranking`).
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, AsyncIterator, Sequence

import numpy as np
import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel, computed_field

from knowledge.chunking import DEFAULT_OVERLAP_TOKENS, DEFAULT_TARGET_TOKENS, approx_tokens, chunk_text
from knowledge.document_loaders import (
    DocumentLoadError,
    LoadedDocument,
    expand_paths,
    file_sha256,
    load_document,
    source_name,
)
from embeddings.record import REINDEX_COMMAND
from core.errors import EmbeddingMismatch
from knowledge.hybrid_ranking import RRF_K, cosine_similarities, mmr_select, reciprocal_rank_fusion

log = logging.getLogger(__name__)

DEFAULT_COLLECTION = "default"
EMBED_BATCH_SIZE = 64
# pgvector's HNSW index takes at most 2000 dimensions for `vector`, 4000 for `halfvec`.
HNSW_MAX_VECTOR_DIMS = 2000
HNSW_MAX_HALFVEC_DIMS = 4000
HNSW_MAX_EF_SEARCH = 1000
INDEX_NAME = "knowledge_chunks_embedding_hnsw"

# Function words dropped from the OR-ed full-text query ('simple' keeps them in the
# index, so matching them would make nearly every chunk a "hit"). English and Italian;
# when a query has nothing else, its words are used as they are.
STOP_WORDS: frozenset[str] = frozenset(
    """
    a an and are as at be been but by can could did do does for from had has have how i if in into is it
    its me my no not of on or our so such than that the their them then there these they this to
    was we were what when where which who whom why will with would you your
    il lo la i gli le un uno una di da del della dei delle in con su per tra fra e ed o che chi come
    dove quando perché non è sono si ci mi ti vi al allo alla ai agli alle nel nella nei nelle
    """.split()
)


# --------------------------------------------------------------------------- results


class RetrievedChunk(BaseModel):
    """One chunk returned by :func:`search`, with how it was found."""

    id: int
    source: str
    chunk_index: int
    heading_path: str
    content: str
    collection: str
    vector_rank: int | None = None
    """1-based rank among the vector candidates (None: not among them)."""
    text_rank: int | None = None
    """1-based rank among the full-text candidates (None: no full-text match)."""
    rrf_score: float
    vector_similarity: float | None = None
    """Cosine similarity between the query and the chunk."""
    tokens: int
    """Approximate tokens of ``content`` (what counts against the token budget)."""
    metadata: dict[str, Any] = {}

    @computed_field  # type: ignore[prop-decorator]
    @property
    def citation(self) -> str:
        return f"{self.source}#{self.chunk_index}"


ADDED = "added"
REPLACED = "replaced"
SKIPPED = "skipped-unchanged"
FAILED = "failed"


@dataclass
class FileOutcome:
    path: str
    source: str | None
    status: str
    """``added``, ``replaced``, ``skipped-unchanged`` or ``failed``."""
    chunks: int = 0
    """Chunks the document has now (for ``skipped-unchanged``: the chunks it already had)."""
    previous_chunks: int = 0
    """For ``replaced``: how many chunks were removed."""
    reason: str | None = None
    """For ``failed``: why."""
    seconds: float = 0.0


@dataclass
class IngestReport:
    collection: str
    files: list[FileOutcome] = field(default_factory=list)
    seconds: float = 0.0

    def _with(self, status: str) -> list[FileOutcome]:
        return [f for f in self.files if f.status == status]

    @property
    def added(self) -> list[FileOutcome]:
        return self._with(ADDED)

    @property
    def replaced(self) -> list[FileOutcome]:
        return self._with(REPLACED)

    @property
    def skipped(self) -> list[FileOutcome]:
        return self._with(SKIPPED)

    @property
    def failed(self) -> list[FileOutcome]:
        return self._with(FAILED)

    @property
    def chunks_written(self) -> int:
        return sum(f.chunks for f in self.files if f.status in (ADDED, REPLACED))

    @property
    def ok(self) -> bool:
        return not self.failed

    def summary(self) -> str:
        """A one-line summary plus one line per failure, for the CLI."""
        head = (
            f"collection {self.collection!r}: {len(self.added)} added, {len(self.replaced)} replaced, "
            f"{len(self.skipped)} unchanged, {len(self.failed)} failed; "
            f"{self.chunks_written} chunks written in {self.seconds:.1f}s"
        )
        return "\n".join([head] + [f"  failed: {f.path}: {f.reason}" for f in self.failed])

    def to_dict(self) -> dict[str, Any]:
        return {"collection": self.collection, "seconds": self.seconds, "files": [asdict(f) for f in self.files]}


@dataclass(frozen=True)
class KnowledgeDocument:
    collection: str
    source: str
    sha256: str
    chunk_count: int
    ingested_at: datetime


# --------------------------------------------------------------------------- connections

_registered: "weakref.WeakSet[psycopg.AsyncConnection]" = weakref.WeakSet()


@asynccontextmanager
async def _conn(pool: AsyncConnectionPool) -> AsyncIterator[psycopg.AsyncConnection]:
    """A pool connection that can send and receive pgvector values (numpy arrays).

    The vector types are registered once per physical connection (the pool hands the
    same connection objects out again). The extension must exist, which
    ``prepare_database`` makes sure of.
    """
    async with pool.connection() as conn:
        if conn not in _registered:
            from pgvector.psycopg import register_vector_async

            await register_vector_async(conn)
            _registered.add(conn)
        yield conn


# --------------------------------------------------------------------------- schema


async def _column_dims(conn: psycopg.AsyncConnection) -> int | None:
    """The dims of ``knowledge_chunks.embedding``, or None when the table does not exist."""
    row = await (
        await conn.execute(
            """SELECT a.atttypmod AS dims FROM pg_attribute a
               WHERE a.attrelid = to_regclass('knowledge_chunks') AND a.attname = 'embedding' AND NOT a.attisdropped"""
        )
    ).fetchone()
    return None if row is None else _row(row)["dims"]


async def _has_halfvec(conn: psycopg.AsyncConnection) -> bool:
    row = await (await conn.execute("SELECT to_regtype('halfvec') IS NOT NULL AS ok")).fetchone()
    return bool(_row(row)["ok"])


def _distance_sql(dims: int, halfvec: bool, param: str = "%(qvec)s") -> str:
    """The cosine-distance expression the HNSW index serves (halfvec above 2000 dims)."""
    if dims > HNSW_MAX_VECTOR_DIMS and halfvec:
        return f"(embedding::halfvec({dims}) <=> {param}::vector::halfvec({dims}))"
    return f"(embedding <=> {param}::vector)"


def _index_sql(dims: int, halfvec: bool) -> str | None:
    if dims <= HNSW_MAX_VECTOR_DIMS:
        return f"CREATE INDEX IF NOT EXISTS {INDEX_NAME} ON knowledge_chunks USING hnsw (embedding vector_cosine_ops)"
    if halfvec and dims <= HNSW_MAX_HALFVEC_DIMS:
        return (
            f"CREATE INDEX IF NOT EXISTS {INDEX_NAME} ON knowledge_chunks "
            f"USING hnsw ((embedding::halfvec({dims})) halfvec_cosine_ops)"
        )
    return None


def _dims_mismatch(existing: int, dims: int) -> EmbeddingMismatch:
    return EmbeddingMismatch(
        f"The knowledge base's vectors have {existing} dimensions but the configured embeddings have {dims}. "
        f"Run `{REINDEX_COMMAND}` to re-embed the knowledge base (and all memory) with the configured model, "
        "or configure the model the knowledge base was built with."
    )


async def setup(pool: AsyncConnectionPool, dims: int) -> None:
    """Create the knowledge-base tables and indexes (idempotent).

    Raises :class:`EmbeddingMismatch` naming ``memory-agent reindex`` when the table
    already exists with another number of dimensions.
    """
    if dims < 1:
        raise ValueError("dims must be positive")
    async with pool.connection() as conn:
        existing = await _column_dims(conn)
        if existing is not None and existing != dims:
            raise _dims_mismatch(existing, dims)
        halfvec = await _has_halfvec(conn)
        async with conn.transaction():
            await conn.execute(
                f"""
                CREATE TABLE IF NOT EXISTS knowledge_chunks (
                    id bigserial PRIMARY KEY,
                    collection text NOT NULL,
                    source text NOT NULL,
                    chunk_index integer NOT NULL,
                    heading_path text NOT NULL DEFAULT '',
                    content text NOT NULL,
                    file_sha256 text NOT NULL,
                    metadata jsonb NOT NULL DEFAULT '{{}}'::jsonb,
                    embedding vector({int(dims)}),
                    -- 'simple': lower-casing only, so codes and any language match (see module docstring)
                    tsv tsvector GENERATED ALWAYS AS
                        (to_tsvector('simple', coalesce(heading_path, '') || ' ' || content)) STORED,
                    created_at timestamptz NOT NULL DEFAULT now(),
                    CONSTRAINT knowledge_chunks_position_key UNIQUE (collection, source, chunk_index)
                )"""
            )
            await conn.execute("CREATE INDEX IF NOT EXISTS knowledge_chunks_tsv_gin ON knowledge_chunks USING gin (tsv)")
            await conn.execute(
                """
                CREATE TABLE IF NOT EXISTS knowledge_documents (
                    collection text NOT NULL,
                    source text NOT NULL,
                    sha256 text NOT NULL,
                    chunk_count integer NOT NULL,
                    ingested_at timestamptz NOT NULL DEFAULT now(),
                    PRIMARY KEY (collection, source)
                )"""
            )
            index = _index_sql(dims, halfvec)
            if index:
                await conn.execute(index)
            else:
                log.warning(
                    "No HNSW index for %d-dimensional embeddings (pgvector allows at most %d, or %d with halfvec, "
                    "which this pgvector lacks): knowledge search scans every chunk.",
                    dims, HNSW_MAX_VECTOR_DIMS, HNSW_MAX_HALFVEC_DIMS,
                )


# --------------------------------------------------------------------------- ingest


def _embedding_text(heading_path: str, content: str) -> str:
    """What is embedded for a chunk: its heading path gives the text its context."""
    return f"{heading_path}\n\n{content}" if heading_path else content


async def _embed_all(embeddings, texts: Sequence[str], batch_size: int = EMBED_BATCH_SIZE) -> list[np.ndarray]:
    vectors: list[np.ndarray] = []
    for start in range(0, len(texts), batch_size):
        batch = list(texts[start : start + batch_size])
        result = await embeddings.aembed_documents(batch)
        if len(result) != len(batch):
            raise ValueError(f"the embeddings returned {len(result)} vectors for {len(batch)} texts")
        vectors.extend(np.asarray(v, dtype=np.float32) for v in result)
    return vectors


def _row(row: Any) -> dict:
    """Rows are dicts with the pool's dict_row factory; tolerate tuples from a bare connection."""
    return row if isinstance(row, dict) else dict(row)


async def _stored_document(conn: psycopg.AsyncConnection, collection: str, source: str, *, lock: bool = False) -> dict | None:
    row = await (
        await conn.execute(
            "SELECT sha256, chunk_count FROM knowledge_documents WHERE collection = %s AND source = %s"
            + (" FOR UPDATE" if lock else ""),
            (collection, source),
        )
    ).fetchone()
    return None if row is None else _row(row)


def _chunk_metadata(doc: LoadedDocument, start: int, end: int, tokens: int) -> dict[str, Any]:
    meta: dict[str, Any] = {"kind": doc.kind, "char_start": start, "char_end": end, "tokens": tokens}
    pages = doc.pages_for_span(start, end)
    if pages:
        meta["pages"] = pages
    return meta


async def ingest(
    pool: AsyncConnectionPool,
    embeddings,
    paths: Sequence[str | Path],
    collection: str = DEFAULT_COLLECTION,
    *,
    target_tokens: int = DEFAULT_TARGET_TOKENS,
    overlap_tokens: int = DEFAULT_OVERLAP_TOKENS,
) -> IngestReport:
    """Load, chunk, embed and store files (directories are walked recursively).

    Each document is written in one transaction (old chunks deleted, new ones inserted,
    ``knowledge_documents`` upserted), so a failure never leaves half a document. A file
    whose bytes are unchanged since it was ingested into ``collection`` is skipped; a
    changed one replaces its chunks. Failures are reported per file, never raised.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    collection = (collection or DEFAULT_COLLECTION).strip() or DEFAULT_COLLECTION
    started = time.perf_counter()
    report = IngestReport(collection=collection)
    files, errors = expand_paths(paths)
    for error in errors:
        report.files.append(FileOutcome(path=error.path, source=None, status=FAILED, reason=error.reason))

    async with _conn(pool) as conn:
        dims = await _column_dims(conn)
    if dims is None:
        raise RuntimeError("knowledge_base.setup() must run before ingest()")

    for path in files:
        t0 = time.perf_counter()
        outcome = await _ingest_file(pool, embeddings, path, collection, dims, target_tokens, overlap_tokens)
        outcome.seconds = time.perf_counter() - t0
        report.files.append(outcome)
        log.info("ingest %s -> %s (%d chunks)%s", outcome.path, outcome.status, outcome.chunks,
                 f": {outcome.reason}" if outcome.reason else "")
    report.seconds = time.perf_counter() - started
    return report


async def _ingest_file(
    pool: AsyncConnectionPool,
    embeddings,
    path: Path,
    collection: str,
    dims: int,
    target_tokens: int,
    overlap_tokens: int,
) -> FileOutcome:
    source = source_name(path)
    shown = str(path)
    try:
        sha = await asyncio.to_thread(file_sha256, path)
        async with pool.connection() as conn:
            stored = await _stored_document(conn, collection, source)
        if stored is not None and stored["sha256"] == sha:
            return FileOutcome(path=shown, source=source, status=SKIPPED, chunks=stored["chunk_count"])

        doc = await asyncio.to_thread(load_document, path, source=source)
        chunks = chunk_text(doc.text, target_tokens=target_tokens, overlap_tokens=overlap_tokens)
        if not chunks:
            raise DocumentLoadError(path, "no text to index")
        try:
            vectors = await _embed_all(embeddings, [_embedding_text(c.heading_path, c.text) for c in chunks])
        except Exception as exc:
            return FileOutcome(path=shown, source=source, status=FAILED,
                               reason=f"embedding failed: {type(exc).__name__}: {exc}")
        wrong = next((len(v) for v in vectors if len(v) != dims), None)
        if wrong is not None:
            return FileOutcome(path=shown, source=source, status=FAILED,
                               reason=f"the embeddings give {wrong}-dimensional vectors but the knowledge base holds "
                                      f"{dims}; run `{REINDEX_COMMAND}`")

        rows = [
            (
                collection, source, c.index, c.heading_path, c.text, doc.sha256,
                Jsonb(_chunk_metadata(doc, c.start, c.end, c.tokens)), vector,
            )
            for c, vector in zip(chunks, vectors)
        ]
        async with _conn(pool) as conn:
            async with conn.transaction():
                # Serialize concurrent ingests of the same document.
                await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 7384211))", (f"{collection}\x1f{source}",))
                current = await _stored_document(conn, collection, source, lock=True)
                if current is not None and current["sha256"] == doc.sha256:
                    return FileOutcome(path=shown, source=source, status=SKIPPED, chunks=current["chunk_count"])
                deleted = await conn.execute(
                    "DELETE FROM knowledge_chunks WHERE collection = %s AND source = %s", (collection, source)
                )
                previous = deleted.rowcount or 0
                async with conn.cursor() as cur:
                    await cur.executemany(
                        """INSERT INTO knowledge_chunks
                               (collection, source, chunk_index, heading_path, content, file_sha256, metadata, embedding)
                           VALUES (%s, %s, %s, %s, %s, %s, %s, %s)""",
                        rows,
                    )
                await conn.execute(
                    """INSERT INTO knowledge_documents (collection, source, sha256, chunk_count, ingested_at)
                       VALUES (%s, %s, %s, %s, now())
                       ON CONFLICT (collection, source) DO UPDATE
                       SET sha256 = EXCLUDED.sha256, chunk_count = EXCLUDED.chunk_count, ingested_at = now()""",
                    (collection, source, doc.sha256, len(rows)),
                )
        status = REPLACED if current is not None or previous else ADDED
        return FileOutcome(path=shown, source=source, status=status, chunks=len(rows), previous_chunks=previous)
    except DocumentLoadError as exc:
        return FileOutcome(path=shown, source=source, status=FAILED, reason=exc.reason)
    except psycopg.Error as exc:
        return FileOutcome(path=shown, source=source, status=FAILED,
                           reason=f"database error: {type(exc).__name__}: {str(exc).strip()}")
    except Exception as exc:  # one bad file must not stop the others
        log.exception("ingesting %s failed", shown)
        return FileOutcome(path=shown, source=source, status=FAILED, reason=f"{type(exc).__name__}: {exc}")


async def remove(pool: AsyncConnectionPool, source: str, collection: str = DEFAULT_COLLECTION) -> int:
    """Forget one document (as named in :func:`list_documents`); returns the chunks deleted."""
    async with pool.connection() as conn:
        async with conn.transaction():
            deleted = await conn.execute(
                "DELETE FROM knowledge_chunks WHERE collection = %s AND source = %s", (collection, source)
            )
            await conn.execute("DELETE FROM knowledge_documents WHERE collection = %s AND source = %s", (collection, source))
            return deleted.rowcount or 0


# --------------------------------------------------------------------------- search

_CHUNK_COLUMNS = "id, collection, source, chunk_index, heading_path, content, metadata, embedding"

# Words of the query (as the 'simple' parser sees them: hyphenated codes are kept whole
# *and* as parts), minus stop words and one-letter words, OR-ed into one tsquery.
# A plain AND of all words (plainto/websearch_to_tsquery) finds too little for natural
# questions. Ranking: chunks matching the whole query as websearch_to_tsquery reads it
# (all words, "quoted phrases") first, then by cover density over the OR-ed words.
_TEXT_SEARCH_SQL = f"""
WITH lexemes AS (
    SELECT lexeme FROM unnest(to_tsvector('simple', %(q)s)) AS t(lexeme, positions, weights)
), kept AS (
    SELECT lexeme FROM lexemes
    WHERE NOT (lexeme = ANY(%(stop)s::text[])) AND (char_length(lexeme) > 1 OR lexeme ~ '^[0-9]$')
), terms AS (
    SELECT lexeme FROM kept
    UNION ALL
    SELECT lexeme FROM lexemes WHERE NOT EXISTS (SELECT 1 FROM kept)
), q AS (
    SELECT (SELECT string_agg(quote_literal(lexeme), ' | ') FROM terms)::tsquery AS any_word,
           websearch_to_tsquery('simple', %(q)s) AS whole
)
SELECT c.id,
       (c.tsv @@ q.whole) AS whole_match,
       ts_rank_cd(c.tsv, q.any_word, 1) AS rank
FROM knowledge_chunks c, q
WHERE q.any_word IS NOT NULL AND c.tsv @@ q.any_word {{collection_filter}}
ORDER BY whole_match DESC, rank DESC, c.id
LIMIT %(limit)s
"""


async def _probe(conn: psycopg.AsyncConnection, collection: str | None) -> dict:
    row = await (
        await conn.execute(
            """SELECT EXISTS (SELECT 1 FROM knowledge_chunks WHERE %(collection)s::text IS NULL OR collection = %(collection)s)
                          AS has_chunks,
                      (SELECT atttypmod FROM pg_attribute WHERE attrelid = 'knowledge_chunks'::regclass
                          AND attname = 'embedding') AS dims,
                      to_regtype('halfvec') IS NOT NULL AS halfvec,
                      (SELECT extversion FROM pg_extension WHERE extname = 'vector') AS pgvector""",
            {"collection": collection},
        )
    ).fetchone()
    return _row(row)


def _version_at_least(version: str | None, wanted: tuple[int, ...]) -> bool:
    try:
        parts = tuple(int(p) for p in (version or "0").split(".")[: len(wanted)])
    except ValueError:
        return False
    return parts >= wanted


def _as_vector(value: Any, dims: int) -> np.ndarray:
    if value is None:
        return np.zeros(dims, dtype=np.float32)
    if hasattr(value, "to_numpy"):
        return value.to_numpy()
    return np.asarray(value, dtype=np.float32)


async def search(
    pool: AsyncConnectionPool,
    embeddings,
    query: str,
    *,
    collection: str | None = None,
    k: int = 6,
    token_budget: int = 1200,
    candidates: int = 50,
    mmr_lambda: float = 0.7,
) -> list[RetrievedChunk]:
    """Hybrid search: vectors + full text, fused (RRF, k=60), diversified (MMR).

    Returns at most ``k`` chunks whose ``content`` fits in ``token_budget`` approximate
    tokens together, most relevant first. A blank query or an empty knowledge base (or
    collection) returns ``[]`` without calling the embeddings.
    """
    query = (query or "").replace("\x00", " ")  # Postgres text cannot hold NUL
    if not query.strip() or k <= 0 or token_budget <= 0:
        return []
    candidates = max(1, candidates)
    async with _conn(pool) as conn:
        probe = await _probe(conn, collection)
    if not probe["has_chunks"]:
        return []
    dims = int(probe["dims"])

    qvec = np.asarray(await embeddings.aembed_query(query), dtype=np.float32)
    if qvec.shape != (dims,):
        raise _dims_mismatch(dims, int(qvec.size))

    collection_filter = "AND collection = %(collection)s" if collection is not None else ""
    distance = _distance_sql(dims, bool(probe["halfvec"]))
    # Candidates are ids only; the columns and embeddings of the fused pool are fetched once, after RRF.
    vector_sql = f"""
        SELECT id, {distance} AS distance
        FROM knowledge_chunks
        WHERE embedding IS NOT NULL {collection_filter}
        ORDER BY {distance}
        LIMIT %(limit)s"""
    text_sql = _TEXT_SEARCH_SQL.format(
        collection_filter="AND c.collection = %(collection)s" if collection is not None else ""
    )
    params = {"qvec": qvec, "q": query, "collection": collection, "limit": candidates, "stop": list(STOP_WORDS)}
    pool_size = max(4 * k, 20)

    async with _conn(pool) as conn:
        async with conn.transaction():
            ef_search = min(HNSW_MAX_EF_SEARCH, max(40, candidates * (4 if collection is not None else 1)))
            iterative = collection is not None and _version_at_least(probe["pgvector"], (0, 8))
            await conn.execute(
                "SELECT set_config('hnsw.ef_search', %s, true)"
                + (", set_config('hnsw.iterative_scan', 'strict_order', true)" if iterative else ""),
                (str(ef_search),),
            )
            vector_ids = [_row(r)["id"] for r in await (await conn.execute(vector_sql, params)).fetchall()]
            exact = False
            if collection is not None and len(vector_ids) < candidates:
                # HNSW filters *after* the graph walk: a small collection in a big table can come back
                # short. If the collection has more chunks than we got, rank it exactly instead.
                count = _row(await (await conn.execute(
                    "SELECT count(*) AS n FROM knowledge_chunks WHERE embedding IS NOT NULL AND collection = %s",
                    (collection,),
                )).fetchone())["n"]
                if count > len(vector_ids):
                    await conn.execute("SELECT set_config('enable_indexscan', 'off', true)")
                    exact = True
                    vector_ids = [_row(r)["id"] for r in await (await conn.execute(vector_sql, params)).fetchall()]
            text_ids = [_row(r)["id"] for r in await (await conn.execute(text_sql, params)).fetchall()]
            log.debug("knowledge search %r in %s: %d vector%s and %d text candidates",
                      query[:80], collection or "all collections", len(vector_ids),
                      " (exact scan)" if exact else "", len(text_ids))

            fused = reciprocal_rank_fusion([vector_ids, text_ids], k=RRF_K)[:pool_size]
            if not fused:
                return []
            async with conn.cursor(binary=True) as cur:  # binary: vectors arrive as float32 buffers
                await cur.execute(
                    f"SELECT {_CHUNK_COLUMNS} FROM knowledge_chunks WHERE id = ANY(%s)", ([cid for cid, _ in fused],)
                )
                by_id = {r["id"]: r for r in map(_row, await cur.fetchall())}

    vector_rank = {cid: i for i, cid in enumerate(vector_ids, start=1)}
    text_rank = {cid: i for i, cid in enumerate(text_ids, start=1)}
    fused = [(cid, score) for cid, score in fused if cid in by_id]  # a chunk replaced meanwhile is gone
    if not fused:
        return []
    ids = [cid for cid, _ in fused]
    vectors = np.stack([_as_vector(by_id[cid]["embedding"], dims) for cid in ids])
    similarity = cosine_similarities(qvec, vectors)
    costs = [approx_tokens(by_id[cid]["content"]) for cid in ids]
    chosen = mmr_select(
        vectors,
        [score for _, score in fused],
        k=k,
        lambda_mult=mmr_lambda,
        token_costs=costs,
        token_budget=token_budget,
    )
    results: list[RetrievedChunk] = []
    for i in chosen:
        cid, score = fused[i]
        r = by_id[cid]
        results.append(
            RetrievedChunk(
                id=cid,
                source=r["source"],
                chunk_index=r["chunk_index"],
                heading_path=r["heading_path"],
                content=r["content"],
                collection=r["collection"],
                vector_rank=vector_rank.get(cid),
                text_rank=text_rank.get(cid),
                rrf_score=score,
                vector_similarity=None if r["embedding"] is None else float(similarity[i]),
                tokens=costs[i],
                metadata=r["metadata"] or {},
            )
        )
    return results


# --------------------------------------------------------------------------- inspection


async def is_empty(pool: AsyncConnectionPool, collection: str | None = None) -> bool:
    """True when there are no chunks (in ``collection``, when given)."""
    async with pool.connection() as conn:
        if await _column_dims(conn) is None:
            return True
        row = await (
            await conn.execute(
                "SELECT NOT EXISTS (SELECT 1 FROM knowledge_chunks WHERE %(c)s::text IS NULL OR collection = %(c)s) AS empty",
                {"c": collection},
            )
        ).fetchone()
    return bool(_row(row)["empty"])


async def list_documents(pool: AsyncConnectionPool, collection: str | None = None) -> list[KnowledgeDocument]:
    """The ingested documents, by collection then source."""
    async with pool.connection() as conn:
        rows = await (
            await conn.execute(
                """SELECT collection, source, sha256, chunk_count, ingested_at FROM knowledge_documents
                   WHERE %(c)s::text IS NULL OR collection = %(c)s ORDER BY collection, source""",
                {"c": collection},
            )
        ).fetchall()
    return [KnowledgeDocument(**_row(r)) for r in rows]


async def stats(pool: AsyncConnectionPool) -> dict[str, Any]:
    """``{"documents": n, "chunks": n, "collections": {name: {"documents": n, "chunks": n}}}``."""
    async with pool.connection() as conn:
        rows = await (
            await conn.execute(
                """SELECT coalesce(d.collection, c.collection) AS collection,
                          coalesce(d.documents, 0) AS documents, coalesce(c.chunks, 0) AS chunks
                   FROM (SELECT collection, count(*) AS documents FROM knowledge_documents GROUP BY collection) d
                   FULL JOIN (SELECT collection, count(*) AS chunks FROM knowledge_chunks GROUP BY collection) c
                     ON c.collection = d.collection
                   ORDER BY 1"""
            )
        ).fetchall()
    collections = {r["collection"]: {"documents": int(r["documents"]), "chunks": int(r["chunks"])} for r in map(_row, rows)}
    return {
        "documents": sum(c["documents"] for c in collections.values()),
        "chunks": sum(c["chunks"] for c in collections.values()),
        "collections": collections,
    }


# --------------------------------------------------------------------------- reindex


async def reembed(pool: AsyncConnectionPool, embeddings, dims: int, *, batch_size: int = EMBED_BATCH_SIZE) -> int:
    """Re-embed every chunk with ``embeddings`` (for ``memory-agent reindex``); returns the chunk count.

    Vectors are computed first, outside any transaction; then one transaction drops the
    HNSW index, changes the column to ``vector(dims)`` if needed, writes the vectors
    (embedding any chunk added meanwhile) and recreates the index. A failure leaves the
    knowledge base as it was.
    """
    if dims < 1:
        raise ValueError("dims must be positive")
    async with pool.connection() as conn:
        table_exists = await _column_dims(conn) is not None
    if not table_exists:
        await setup(pool, dims)
        return 0
    async with pool.connection() as conn:
        rows = [_row(r) for r in await (
            await conn.execute("SELECT id, heading_path, content FROM knowledge_chunks ORDER BY id")
        ).fetchall()]

    def key(r: dict) -> tuple[str, str]:
        return (r["heading_path"], r["content"])

    computed: dict[tuple[str, str], np.ndarray] = {}

    async def embed_missing(items: list[dict]) -> None:
        todo = list(dict.fromkeys(key(r) for r in items if key(r) not in computed))
        vectors = await _embed_all(embeddings, [_embedding_text(h, c) for h, c in todo], batch_size)
        for item, vector in zip(todo, vectors):
            if vector.shape != (dims,):
                raise _dims_mismatch(dims, int(vector.size))
            computed[item] = vector

    await embed_missing(rows)

    async with _conn(pool) as conn:
        async with conn.transaction():
            await conn.execute("LOCK TABLE knowledge_chunks IN SHARE ROW EXCLUSIVE MODE")
            current = [_row(r) for r in await (
                await conn.execute("SELECT id, heading_path, content FROM knowledge_chunks ORDER BY id")
            ).fetchall()]
            await embed_missing(current)  # chunks ingested while we were embedding
            existing = await _column_dims(conn)
            halfvec = await _has_halfvec(conn)
            await conn.execute(f"DROP INDEX IF EXISTS {INDEX_NAME}")
            if existing != dims:
                await conn.execute(
                    f"ALTER TABLE knowledge_chunks ALTER COLUMN embedding TYPE vector({int(dims)}) USING NULL"
                )
            async with conn.cursor() as cur:
                await cur.executemany(
                    "UPDATE knowledge_chunks SET embedding = %s WHERE id = %s",
                    [(computed[key(r)], r["id"]) for r in current],
                )
            index = _index_sql(dims, halfvec)
            if index:
                await conn.execute(index)
    return len(current)
