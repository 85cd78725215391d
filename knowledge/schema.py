"""The knowledge base's tables, indexes and connections, and what is in them.

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

The parser does cut identifiers, though: ``rag_top_k`` becomes the common words ``rag``, ``top``
and ``k``, and a path such as ``nodes/load_context.py`` stays one token whose words (``nodes``)
match nothing. So the stored vector is :data:`TEXT_VECTOR_FUNCTION` of the text: the parser's
lexemes plus, for every identifier (letters and digits joined by ``_ . / -``), the identifier
whole, its ``/``- and ``.``-separated segments, and its words. The query gets the same treatment
(:mod:`knowledge.retrieval`), so a question naming ``rag_top_k`` matches the one chunk that holds
``rag_top_k`` on a rare word of its own, not on three common ones.
"""

from __future__ import annotations

import logging
import weakref
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, AsyncIterator

import psycopg
from psycopg_pool import AsyncConnectionPool

from core.errors import EmbeddingMismatch
from storage.embeddings_record import REINDEX_COMMAND

log = logging.getLogger(__name__)

DEFAULT_COLLECTION = "default"
EMBED_BATCH_SIZE = 64
# pgvector's HNSW index takes at most 2000 dimensions for `vector`, 4000 for `halfvec`.
HNSW_MAX_VECTOR_DIMS = 2000
HNSW_MAX_HALFVEC_DIMS = 4000
HNSW_MAX_EF_SEARCH = 1000
INDEX_NAME = "knowledge_chunks_embedding_hnsw"

# The full-text vector of a chunk (and of a query): the 'simple' parser's lexemes, plus each
# identifier (letters or digits joined by _ . / -) whole, its segments between / or . or both
# (a path's file name, a dotted name's last part), and its words, as extra lexemes without
# positions ("nodes/load_context.py" adds load_context.py, nodes/load_context, load_context,
# nodes, load, context, py; "Context.rag_top_k", which the parser reads as the host name
# "context.rag" then "top" and "k", adds rag_top_k and rag).
# The stored column is generated from it: changing the body needs a new name (the stored vectors
# are only recomputed when the column's expression changes; see _migrate_text_vector).
TEXT_VECTOR_FUNCTION = "knowledge_text_vector"
_IDENTIFIER_PATTERN = "[[:alnum:]]+(?:[_./-]+[[:alnum:]]+)+"
_TEXT_VECTOR_SQL = f"""
CREATE OR REPLACE FUNCTION {TEXT_VECTOR_FUNCTION}(heading text, body text) RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
    SELECT to_tsvector('simple'::regconfig, coalesce(heading, '') || ' ' || coalesce(body, ''))
        || array_to_tsvector(ARRAY(
            SELECT DISTINCT lexeme
            FROM regexp_matches(lower(coalesce(heading, '') || ' ' || coalesce(body, '')), '{_IDENTIFIER_PATTERN}', 'g') AS m,
                 LATERAL (
                     SELECT m[1]
                     UNION ALL SELECT regexp_split_to_table(m[1], '/+')
                     UNION ALL SELECT regexp_split_to_table(m[1], '[.]+')
                     UNION ALL SELECT regexp_split_to_table(m[1], '[./]+')
                     UNION ALL SELECT regexp_split_to_table(m[1], '[_./-]+')
                 ) AS parts(lexeme)
            WHERE lexeme <> ''
        ))
$fn$"""


@dataclass(frozen=True)
class KnowledgeDocument:
    collection: str
    source: str
    sha256: str
    chunk_count: int
    ingested_at: datetime



def _row(row: Any) -> dict:
    """Rows are dicts with the pool's dict_row factory; tolerate tuples from a bare connection."""
    return row if isinstance(row, dict) else dict(row)


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


_TSV_EXPRESSION = f"{TEXT_VECTOR_FUNCTION}(heading_path, content)"


async def _migrate_text_vector(conn: psycopg.AsyncConnection) -> None:
    """A table made before identifiers were indexed gets the column regenerated (its GIN index
    goes with it and is made again by the caller): one rewrite of the table, once."""
    row = await (
        await conn.execute(
            """SELECT pg_get_expr(d.adbin, d.adrelid) AS expression
               FROM pg_attrdef d JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
               WHERE d.adrelid = 'knowledge_chunks'::regclass AND a.attname = 'tsv'"""
        )
    ).fetchone()
    if row is not None and TEXT_VECTOR_FUNCTION in (_row(row)["expression"] or ""):
        return
    log.info("Regenerating the knowledge base's full-text column (identifiers are now indexed whole and by part).")
    await conn.execute("ALTER TABLE knowledge_chunks DROP COLUMN IF EXISTS tsv")
    await conn.execute(f"ALTER TABLE knowledge_chunks ADD COLUMN tsv tsvector GENERATED ALWAYS AS ({_TSV_EXPRESSION}) STORED")


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
            await conn.execute(_TEXT_VECTOR_SQL)
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
                    tsv tsvector GENERATED ALWAYS AS ({_TSV_EXPRESSION}) STORED,
                    created_at timestamptz NOT NULL DEFAULT now(),
                    CONSTRAINT knowledge_chunks_position_key UNIQUE (collection, source, chunk_index)
                )"""
            )
            await _migrate_text_vector(conn)
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
            # Where the file was (its resolved path): the same file ingested from another folder keeps
            # its first name (knowledge.ingestion). Documents ingested before have none until ingested again.
            await conn.execute("ALTER TABLE knowledge_documents ADD COLUMN IF NOT EXISTS path text")
            await conn.execute(
                "CREATE UNIQUE INDEX IF NOT EXISTS knowledge_documents_path_key ON knowledge_documents (collection, path) WHERE path IS NOT NULL"
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


async def list_sections(pool: AsyncConnectionPool, collection: str) -> list[tuple[str, str]]:
    """``(source, heading_path)`` of every chunk of ``collection``, in document order."""
    async with pool.connection() as conn:
        rows = await (
            await conn.execute(
                "SELECT source, heading_path FROM knowledge_chunks WHERE collection = %s ORDER BY source, chunk_index",
                (collection,),
            )
        ).fetchall()
    return [(r["source"], r["heading_path"]) for r in map(_row, rows)]


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


