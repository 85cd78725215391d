"""Rewriting rows of the index of what was said in place: a forget replaces the text (and so the
words, the dates it meant and the vector) of the messages that carried what was forgotten. Every statement names the
owner. The rows' other columns, and the owner's message count, do not change."""

from __future__ import annotations

import os
import re
import unicodedata
from dataclasses import dataclass
from typing import AsyncIterator, Sequence

from psycopg_pool import AsyncConnectionPool

from core.past_dates import dates_meant
from core.words import plain_word, stem
from storage.episodes import TABLE, Said
from storage.vector_literal import vector_literal


@dataclass
class Rewrite:
    thread_id: str
    message_id: str
    content: str
    embedding: Sequence[float]


async def rows_with_words(
    pool: AsyncConnectionPool, owner: str, words: Sequence[str], messages: Sequence[tuple[str, str]] = (), *,
    limit: int = 2_000, after: tuple[str, str] | None = None,
) -> list[Said]:
    """The owner's rows that may hold any of ``words`` or are one of ``messages`` ((thread_id,
    message_id)), at most ``limit``, in key order after ``after`` (the last row of the page before).

    A row is taken when Postgres' English stems hold a word (as the index reads them), or when a
    word starting as the word's stem does stands anywhere in it, accents aside: Postgres reads
    "bob@quixotic.io" or "www.quixotic-labs.com" as one token and "Zürich" is not "Zurich" to it.
    It is a superset: the caller's redactor decides which rows carry the words."""
    words = [w for w in dict.fromkeys(words) if w.strip()]
    threads = [t for t, _ in messages]
    ids = [m for _, m in messages]
    after_thread, after_message = after or ("", "")
    async with pool.connection() as conn:
        rows = await (
            await conn.execute(
                f"""SELECT thread_id, message_id, position, role, sent_at, content FROM {TABLE}
                WHERE owner = %(owner)s AND (thread_id, message_id) > (%(after_thread)s, %(after_message)s) AND (
                    (cardinality(%(words)s::text[]) > 0 AND tsv @@ (
                        SELECT string_agg(quote_literal(w) || ':A', ' | ')::tsquery FROM (
                            SELECT unnest(tsvector_to_array(to_tsvector('english', array_to_string(%(words)s::text[], ' ')))) AS w) q))
                    OR (%(pattern)s <> '' AND content ~* %(pattern)s)
                    OR (thread_id, message_id) IN (SELECT * FROM unnest(%(threads)s::text[], %(ids)s::text[])))
                ORDER BY thread_id, message_id
                LIMIT %(limit)s""",
                {"owner": owner, "words": words, "pattern": word_pattern(words), "threads": threads, "ids": ids,
                 "after_thread": after_thread, "after_message": after_message, "limit": limit},
            )
        ).fetchall()
    return [Said(r["thread_id"], r["message_id"], r["position"], r["role"], r["sent_at"], r["content"]) for r in rows]


async def pages_with_words(
    pool: AsyncConnectionPool, owner: str, words: Sequence[str], messages: Sequence[tuple[str, str]] = (), *, page: int = 2_000
) -> AsyncIterator[list[Said]]:
    """:func:`rows_with_words`, every one of them, a page at a time (a user's rows may be many
    and long: they are never all held at once, and none is left out past a limit)."""
    after = None
    while True:
        rows = await rows_with_words(pool, owner, words, messages, limit=page, after=after)
        if rows:
            yield rows
        if len(rows) < page:
            return
        after = (rows[-1].thread_id, rows[-1].message_id)


def _accented() -> dict[str, str]:
    """Each ASCII letter with the Latin letters that are it with accents ("u": "ùúûüũūŭůűų…")."""
    found: dict[str, str] = {}
    for code in range(0xC0, 0x250):
        c = chr(code).casefold()
        base = "".join(b for b in unicodedata.normalize("NFKD", c) if not unicodedata.combining(b))
        if len(c) == 1 and len(base) == 1 and base.isascii() and base.isalpha() and base != c and c not in found.get(base, ""):
            found[base] = found.get(base, "") + c
    return found


_ACCENTED = _accented()


PATTERN_WORDS = 20
"""At most this many words are looked for by pattern (a forget names a thing in a few; a message
deleted outright may hold hundreds, whose pattern would cost seconds over a user's rows: those are
looked for by the index's words alone)."""
PATTERN_MIN = 3
"""A word's pattern starts with at least this many letters ("Li" or "Xi" would match nearly every
row); a shorter word is looked for by the index's words alone."""


def word_pattern(words: Sequence[str]) -> str:
    """A regular expression (Postgres', case-blind) for a word beginning as one of ``words`` does up
    to its stem (less a last "i" or "e" where stemming changed the word's end: "studies" -> "studi",
    said "study"), accented or not ("ss" also as "ß"), at the start of any run of letters: '' for
    none (no word, or each too short)."""
    parts = []
    for word in list(dict.fromkeys(plain_word(w.casefold()) for w in words if w.strip()))[:PATTERN_WORDS]:
        stemmed = stem(word)
        head = os.path.commonprefix([word, stemmed])
        if stemmed != word and head[-1:] in ("i", "e"):
            head = head[:-1]
        if len(head) < PATTERN_MIN:
            continue
        letters = "".join(f"[{c}{_ACCENTED[c]}]" if c in _ACCENTED else re.escape(c) for c in head)
        parts.append(letters.replace("[sśŝşšș][sśŝşšș]", "(?:[sśŝşšș][sśŝşšș]|ß)"))
    return f"(^|[^[:alnum:]])({'|'.join(parts)})" if parts else ""


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
