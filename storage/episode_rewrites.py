"""Rewriting rows of the index of what was said in place: a forget replaces the text (and so the
words, the dates it meant and the vector) of the messages that carried what was forgotten. Every statement names the
owner. The rows' other columns, and the owner's message count, do not change."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from psycopg_pool import AsyncConnectionPool

from core.past_dates import dates_meant
from storage.episodes import TABLE, Said
from storage.vector_literal import vector_literal


@dataclass
class Rewrite:
    thread_id: str
    message_id: str
    content: str
    embedding: Sequence[float]


async def rows_with_words(
    pool: AsyncConnectionPool, owner: str, words: Sequence[str], messages: Sequence[tuple[str, str]] = (), *, limit: int = 20_000
) -> list[Said]:
    """The owner's rows holding any of ``words`` in what was said (Postgres' English stems, as the
    index reads them; not the dates it meant) or being one of ``messages`` ((thread_id, message_id))."""
    words = [w for w in dict.fromkeys(words) if w.strip()]
    threads = [t for t, _ in messages]
    ids = [m for _, m in messages]
    async with pool.connection() as conn:
        rows = await (
            await conn.execute(
                f"""SELECT thread_id, message_id, position, role, sent_at, content FROM {TABLE}
                WHERE owner = %(owner)s AND (
                    (cardinality(%(words)s::text[]) > 0 AND tsv @@ (
                        SELECT string_agg(quote_literal(w) || ':A', ' | ')::tsquery FROM (
                            SELECT unnest(tsvector_to_array(to_tsvector('english', array_to_string(%(words)s::text[], ' ')))) AS w) q))
                    OR (thread_id, message_id) IN (SELECT * FROM unnest(%(threads)s::text[], %(ids)s::text[])))
                LIMIT %(limit)s""",
                {"owner": owner, "words": words, "threads": threads, "ids": ids, "limit": limit},
            )
        ).fetchall()
    return [Said(r["thread_id"], r["message_id"], r["position"], r["role"], r["sent_at"], r["content"]) for r in rows]


async def rewrite(pool: AsyncConnectionPool, owner: str, rewrites: Sequence[Rewrite]) -> int:
    """Set each row's text and vector in one transaction; its words and the dates it meant follow
    the new text (a forgotten "yesterday" leaves no date behind)."""
    if not rewrites:
        return 0
    async with pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
        times = await (
            await conn.execute(
                f"SELECT thread_id, message_id, sent_at FROM {TABLE} WHERE owner = %s AND (thread_id, message_id) IN (SELECT * FROM unnest(%s::text[], %s::text[])) FOR UPDATE",
                (owner, [r.thread_id for r in rewrites], [r.message_id for r in rewrites]),
            )
        ).fetchall()
        sent = {(t["thread_id"], t["message_id"]): t["sent_at"] for t in times}
        await cur.executemany(
            f"UPDATE {TABLE} SET content = %s, dates_meant = %s, embedding = %s::vector WHERE owner = %s AND thread_id = %s AND message_id = %s",
            [
                (r.content, dates_meant(r.content, sent[(r.thread_id, r.message_id)]) if (r.thread_id, r.message_id) in sent else "",
                 vector_literal(r.embedding), owner, r.thread_id, r.message_id)
                for r in rewrites
            ],
        )
    return len(rewrites)
