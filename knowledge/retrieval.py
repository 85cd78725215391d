"""Search the knowledge base: hybrid (vectors + full text), fused with reciprocal rank fusion,
then diversified with MMR within ``k`` chunks and a token budget (see :mod:`knowledge.hybrid_ranking`)."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import psycopg
from psycopg_pool import AsyncConnectionPool

from core.contracts import RetrievedChunk
from core.stopwords import FILLER, STOPWORDS
from core.words import hyphenated_words
from knowledge.hybrid_ranking import RELEVANCE_GATE, RRF_K, RelevanceGate, cosine_similarities, mmr_select, reciprocal_rank_fusion
from prompts.reply_prompt import chunk_cost
from knowledge.schema import HNSW_MAX_EF_SEARCH, TEXT_VECTOR_FUNCTION, _conn, _dims_mismatch, _distance_sql, _row

log = logging.getLogger(__name__)

# Function words and conversational filler dropped from the OR-ed full-text query ('simple'
# keeps them in the index, so matching them would make nearly every chunk a "hit", and a "hi"
# would find the README's `echo hi`). English, Italian, a little Hebrew; when a query has
# nothing else, its words are used as they are, but they are no evidence for the relevance gate.
STOP_WORDS: frozenset[str] = STOPWORDS | FILLER


# A query of at most this many content words is a lookup ("XR-2291-B", "scontrino"): a chunk
# holding all of them is evidence enough. A longer question must be similar to the chunk: its
# words can all appear in a chunk that only quotes it.
LOOKUP_MAX_WORDS = 3


def lookup_words(query: str) -> list[str]:
    return [w for w in hyphenated_words(query.casefold()) if w not in STOP_WORDS and len(w.strip("-")) > 1]


_CHUNK_COLUMNS = "id, collection, source, chunk_index, heading_path, content, metadata, embedding"

# Words of the query as the stored vectors hold them (knowledge.schema.TEXT_VECTOR_FUNCTION: the
# 'simple' parser's lexemes, hyphenated codes whole *and* as parts, identifiers such as
# rag_top_k or nodes/load_context.py whole, by segment and by word), minus stop words and
# one-letter words, OR-ed into one tsquery.
# A plain AND of all words (plainto/websearch_to_tsquery) finds too little for natural
# questions. Ranking: chunks matching the whole query as websearch_to_tsquery reads it
# (all words, "quoted phrases"), or holding every kept word (an identifier's words have no
# positions to match a phrase with), first, then BM25 over the OR-ed words: each word counts by
# its rarity in the searched chunks (idf), so "wording" or "mcp" outweighs "change" or "agent",
# which plain cover density (ts_rank_cd) counted alike. No length normalization (b = 0):
# the chunker caps chunks at a few hundred tokens, and the averages it would need cost a scan.
# has_content: the query kept a word that is not a stop word (else its matches prove nothing).
# coverage: the share of the kept words' idf the chunk holds (0 without kept words), the
# relevance gate's measure of how much of the question a chunk's words answer.
_TEXT_SEARCH_SQL = """
WITH lexemes AS (
    SELECT lexeme FROM unnest({text_vector}('', %(q)s)) AS t(lexeme, positions, weights)
), kept AS (
    SELECT lexeme FROM lexemes
    WHERE NOT (lexeme = ANY(%(stop)s::text[])) AND (char_length(lexeme) > 1 OR lexeme ~ '^[0-9]$')
), terms AS (
    SELECT lexeme, true AS is_kept FROM kept
    UNION ALL
    SELECT lexeme, false FROM lexemes WHERE NOT EXISTS (SELECT 1 FROM kept)
), q AS (
    SELECT (SELECT string_agg(quote_literal(lexeme), ' | ') FROM terms)::tsquery AS any_word,
           websearch_to_tsquery('simple', %(q)s) AS whole
), docs AS (
    SELECT count(*)::float8 AS n FROM knowledge_chunks c WHERE true {collection_filter}
), idf AS (
    SELECT t.lexeme, t.is_kept, ln(1 + (d.n - f.df + 0.5) / (f.df + 0.5)) AS idf
    FROM terms t CROSS JOIN docs d
    CROSS JOIN LATERAL (
        SELECT count(*)::float8 AS df FROM knowledge_chunks c
        WHERE c.tsv @@ quote_literal(t.lexeme)::tsquery {collection_filter}
    ) f
), matched AS (
    SELECT c.id, (c.tsv @@ q.whole) AS whole_match, c.tsv
    FROM knowledge_chunks c, q
    WHERE q.any_word IS NOT NULL AND c.tsv @@ q.any_word {collection_filter}
), scored AS (
    SELECT m.id,
           m.whole_match OR (EXISTS (SELECT 1 FROM kept) AND count(*) FILTER (WHERE i.is_kept) = (SELECT count(*) FROM kept))
               AS whole_match,
           sum(i.idf * (u.tf * (%(k1)s + 1)) / (u.tf + %(k1)s)) AS bm25,
           sum(i.idf) FILTER (WHERE i.is_kept) AS kept_idf
    FROM matched m
    CROSS JOIN LATERAL (SELECT lexeme, coalesce(array_length(positions, 1), 1) AS tf FROM unnest(m.tsv)) u
    JOIN idf i ON i.lexeme = u.lexeme
    GROUP BY m.id, m.whole_match
)
SELECT s.id, s.whole_match,
       EXISTS (SELECT 1 FROM kept) AS has_content,
       s.bm25 AS rank,
       coalesce(s.kept_idf / nullif((SELECT sum(idf) FROM idf WHERE is_kept), 0), 0) AS coverage
FROM scored s
ORDER BY s.whole_match DESC, s.bm25 DESC, s.id
LIMIT %(limit)s
"""
BM25_K1 = 1.2


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
    gate: RelevanceGate | None = RELEVANCE_GATE,
) -> list[RetrievedChunk]:
    """Hybrid search: vectors + full text, fused (RRF, k=60), gated for relevance, diversified (MMR).

    Returns at most ``k`` chunks whose ``content`` fits in ``token_budget`` approximate
    tokens together, most relevant first; only chunks the relevance ``gate`` admits, so an
    unrelated query gets ``[]`` (``gate=None``: every fused candidate may be chosen). A blank
    query or an empty knowledge base (or collection) returns ``[]`` without calling the embeddings.
    """
    if k <= 0 or token_budget <= 0:
        return []
    fused, vectors = await _fused(pool, embeddings, query, collection=collection, k=k, candidates=candidates)
    if gate is not None:
        admitted = [
            i for i, c in enumerate(fused)
            if gate.admits(c.vector_similarity, text_match=c.text_match, whole_match=c.whole_match, coverage=c.text_coverage)
        ]
        log.debug("knowledge search %r: %d of %d fused candidates pass the relevance gate", query[:80], len(admitted), len(fused))
        fused, vectors = [fused[i] for i in admitted], vectors[admitted]
    if not fused:
        return []
    chosen = mmr_select(
        vectors,
        mmr_relevance(fused),
        k=k,
        lambda_mult=mmr_lambda,
        token_costs=[c.tokens for c in fused],
        token_budget=token_budget,
    )
    return [fused[i] for i in chosen]


# How much the share of the question's weighted words a chunk holds (``text_coverage``, 0..1) adds
# to its cosine in MMR's relevance. Chosen on the calibration split of the retrieval eval (the
# smallest of the weights that did best there; see the README's knowledge-base section).
MMR_COVERAGE_WEIGHT = 0.3


def mmr_relevance(chunks: list[RetrievedChunk], coverage_weight: float = MMR_COVERAGE_WEIGHT) -> list[float]:
    """The relevance MMR weighs against redundancy: the cosine similarity to the query (the scale
    of the redundancy term, chunk-to-chunk cosine) plus ``coverage_weight`` times the share of the
    question's rarity-weighted words the chunk holds.

    RRF scores are no use there: with k = 60 they differ by a few per cent across the pool, so
    divided by their maximum they are all ~1 and MMR picked by diversity alone, passing over the
    closest chunk when it resembled an earlier pick. Cosine alone passes over the chunk that holds
    the question's words but embeds poorly (a table, a diagram, a command block) when a few
    merely similar chunks fill the token budget first: the section answering "how do I use an
    OpenAI model instead of the offline model" holds most of its words at cosine 0.29, behind
    three chunks at 0.40–0.50 that hold a third of them. The fusion still decides which
    candidates MMR sees; a chunk holding every word of a lookup (``whole_match``), whose vector
    says little, counts as relevant as the most relevant one."""
    scores = [max(0.0, c.vector_similarity or 0.0) + coverage_weight * c.text_coverage for c in chunks]
    top = max(scores, default=0.0) or 1.0
    return [top if c.whole_match else s for c, s in zip(chunks, scores)]


async def fused_candidates(
    pool: AsyncConnectionPool, embeddings, query: str, *, collection: str | None = None, k: int = 6, candidates: int = 50
) -> list[RetrievedChunk]:
    """Every candidate :func:`search` with the same ``k`` would choose from, in RRF order, before
    the relevance gate and MMR (what ``memory-agent eval retrieval --calibrate`` fits the gate on)."""
    fused, _ = await _fused(pool, embeddings, query, collection=collection, k=k, candidates=candidates)
    return fused


async def _fused(
    pool: AsyncConnectionPool, embeddings, query: str, *, collection: str | None, k: int, candidates: int
) -> tuple[list[RetrievedChunk], np.ndarray]:
    """The fused candidates (best RRF first, at most ``max(4k, 20)``) and their vectors."""
    query = (query or "").replace("\x00", " ")  # Postgres text cannot hold NUL
    if not query.strip():
        return [], np.zeros((0, 1), dtype=np.float32)
    candidates = max(1, candidates)
    async with _conn(pool) as conn:
        probe = await _probe(conn, collection)
    if not probe["has_chunks"]:
        return [], np.zeros((0, 1), dtype=np.float32)
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
        collection_filter="AND c.collection = %(collection)s" if collection is not None else "",
        text_vector=TEXT_VECTOR_FUNCTION,
    )
    params = {"qvec": qvec, "q": query, "collection": collection, "limit": candidates, "stop": list(STOP_WORDS),
              "k1": BM25_K1}
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
            text_rows = [_row(r) for r in await (await conn.execute(text_sql, params)).fetchall()]
            text_ids = [r["id"] for r in text_rows]
            log.debug("knowledge search %r in %s: %d vector%s and %d text candidates",
                      query[:80], collection or "all collections", len(vector_ids),
                      " (exact scan)" if exact else "", len(text_ids))

            fused = reciprocal_rank_fusion([vector_ids, text_ids], k=RRF_K)[:pool_size]
            if not fused:
                return [], np.zeros((0, dims), dtype=np.float32)
            async with conn.cursor(binary=True) as cur:  # binary: vectors arrive as float32 buffers
                await cur.execute(
                    f"SELECT {_CHUNK_COLUMNS} FROM knowledge_chunks WHERE id = ANY(%s)", ([cid for cid, _ in fused],)
                )
                by_id = {r["id"]: r for r in map(_row, await cur.fetchall())}

    vector_rank = {cid: i for i, cid in enumerate(vector_ids, start=1)}
    text_rank = {cid: i for i, cid in enumerate(text_ids, start=1)}
    # Matches of stop words and filler alone (a query of only those) are no evidence of relevance.
    text_match = {r["id"] for r in text_rows if r["has_content"]}
    coverage = {r["id"]: float(r["coverage"] or 0.0) for r in text_rows if r["has_content"]}
    lookup = 0 < len(lookup_words(query)) <= LOOKUP_MAX_WORDS
    whole_match = {r["id"] for r in text_rows if lookup and r["has_content"] and r["whole_match"]}
    fused = [(cid, score) for cid, score in fused if cid in by_id]  # a chunk replaced meanwhile is gone
    if not fused:
        return [], np.zeros((0, dims), dtype=np.float32)
    vectors = np.stack([_as_vector(by_id[cid]["embedding"], dims) for cid, _ in fused])
    similarity = cosine_similarities(qvec, vectors)
    chunks: list[RetrievedChunk] = []
    for i, (cid, score) in enumerate(fused):
        r = by_id[cid]
        chunks.append(
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
                text_match=cid in text_match,
                text_coverage=round(coverage.get(cid, 0.0), 6),
                whole_match=cid in whole_match,
                tokens=chunk_cost(f"{r['source']}#{r['chunk_index']}", r["heading_path"], r["content"]),
                metadata=r["metadata"] or {},
            )
        )
    return chunks, vectors
