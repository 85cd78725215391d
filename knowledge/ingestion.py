"""Ingest documents into the knowledge base: load, chunk, embed, store (one transaction a file);
remove them; re-embed everything after a change of embeddings."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from storage.embeddings_record import REINDEX_COMMAND
from knowledge.chunking import DEFAULT_OVERLAP_TOKENS, DEFAULT_TARGET_TOKENS, chunk_text
from knowledge.document_loaders import (
    DocumentLoadError,
    LoadedDocument,
    FoundFile,
    NO_TEXT,
    SymlinkSkipped,
    expand_paths,
    load_document,
    read_file,
    source_name,
)
from knowledge.schema import (
    DEFAULT_COLLECTION,
    EMBED_BATCH_SIZE,
    INDEX_NAME,
    _column_dims,
    _conn,
    _dims_mismatch,
    _has_halfvec,
    _index_sql,
    _row,
    setup,
)

log = logging.getLogger(__name__)

ADDED = "added"
REPLACED = "replaced"
SKIPPED = "skipped-unchanged"
SKIPPED_LINK = "skipped-symlink"
FAILED = "failed"
REMOVED = "removed"
EMPTY_REASONS = frozenset({"the file is empty", NO_TEXT, "no text to index"})
"""A file read as these holds nothing now: its document, if it had one, is removed, not kept as it was."""


@dataclass
class FileOutcome:
    path: str
    source: str | None
    status: str
    """``added``, ``replaced``, ``skipped-unchanged``, ``skipped-symlink``, ``removed`` (a document
    whose file is now empty, or named for removal) or ``failed``."""
    chunks: int = 0
    """Chunks the document has now (for ``skipped-unchanged``: the chunks it already had)."""
    previous_chunks: int = 0
    """For ``replaced``: how many chunks were removed."""
    reason: str | None = None
    """For ``failed`` and ``skipped-symlink``: why."""
    seconds: float = 0.0


def _files_with(status: str) -> property:
    """A report property: the outcomes of the files that ended with ``status``."""

    def files(report: IngestReport) -> list[FileOutcome]:
        return [f for f in report.files if f.status == status]

    return property(files, doc=f"The files whose outcome is {status!r}.")


@dataclass
class IngestReport:
    collection: str
    files: list[FileOutcome] = field(default_factory=list)
    seconds: float = 0.0

    added = _files_with(ADDED)
    replaced = _files_with(REPLACED)
    skipped = _files_with(SKIPPED)
    skipped_links = _files_with(SKIPPED_LINK)
    failed = _files_with(FAILED)
    removed = _files_with(REMOVED)

    @property
    def chunks_written(self) -> int:
        return sum(f.chunks for f in self.files if f.status in (ADDED, REPLACED))

    @property
    def ok(self) -> bool:
        return not self.failed

    def summary(self) -> str:
        """A one-line summary plus one line per skipped link and per failure, for the CLI."""
        head = (
            f"collection {self.collection!r}: {len(self.added)} added, {len(self.replaced)} replaced, "
            f"{len(self.skipped)} unchanged, {len(self.removed)} removed, {len(self.skipped_links)} links skipped, {len(self.failed)} failed; "
            f"{self.chunks_written} chunks written in {self.seconds:.1f}s"
        )
        return "\n".join(
            [head]
            + [f"  named: {f.path} is the document {f.source!r}" for f in self.files if _named_otherwise(f)]
            + [f"  removed: {f.source}: {f.reason}" for f in self.removed]
            + [f"  skipped: {f.path}: {f.reason}" for f in self.skipped_links]
            + [f"  failed: {f.path}: {f.reason}" for f in self.failed]
        )

    def to_dict(self) -> dict[str, Any]:
        return {"collection": self.collection, "seconds": self.seconds, "files": [asdict(f) for f in self.files]}





def _named_otherwise(f: FileOutcome) -> bool:
    """A file ingested under a name that is not its path as given (its first ingest ran in another
    folder, or another file has the name): ``--remove`` takes the name, or the file's path."""
    return f.status in (ADDED, REPLACED, SKIPPED) and f.source is not None and f.source != source_name(f.path)


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




def file_key(path: str | Path) -> str:
    """Where a file is, whatever folder ``ingest`` runs in: its resolved absolute path."""
    return Path(path).expanduser().resolve().as_posix()


async def _source_of_file(conn: psycopg.AsyncConnection, collection: str, key: str) -> str | None:
    """The name the file at ``key`` was ingested under in ``collection`` (None: not yet, or before
    files were keyed): the same file ingested from another folder stays one document, not two."""
    row = await (
        await conn.execute("SELECT source FROM knowledge_documents WHERE collection = %s AND path = %s", (collection, key))
    ).fetchone()
    return None if row is None else _row(row)["source"]


async def _free_name(conn: psycopg.AsyncConnection, collection: str, source: str, key: str) -> str:
    """``source``, unless a document of that name is another file that is still there (``a/guide.md``
    ingested from ``a``, then ``b/guide.md`` from ``b``: both "guide.md"): the new one is then named
    by its absolute path, not written over the other. (A file moved since takes its old name.)"""
    row = await (
        await conn.execute("SELECT path FROM knowledge_documents WHERE collection = %s AND source = %s", (collection, source))
    ).fetchone()
    other = None if row is None else _row(row)["path"]
    return key if other is not None and other != key and Path(other).is_file() else source


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
    follow_symlinks: bool = False,
) -> IngestReport:
    """Load, chunk, embed and store files (directories are walked recursively).

    Each document is written in one transaction (old chunks deleted, new ones inserted,
    ``knowledge_documents`` upserted), so a failure never leaves half a document. A file
    whose bytes are unchanged since it was ingested into ``collection`` is skipped; a
    changed one replaces its chunks. Failures are reported per file, never raised.
    Symbolic links in a folder that lead out of it are skipped and reported, unless
    ``follow_symlinks`` (see :func:`knowledge.document_loaders.expand_paths`).
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    collection = (collection or DEFAULT_COLLECTION).strip() or DEFAULT_COLLECTION
    started = time.perf_counter()
    report = IngestReport(collection=collection)
    files, errors = expand_paths(paths, follow_symlinks=follow_symlinks)
    for error in errors:
        status = SKIPPED_LINK if isinstance(error, SymlinkSkipped) else FAILED
        report.files.append(FileOutcome(path=error.path, source=None, status=status, reason=error.reason))

    async with _conn(pool) as conn:
        dims = await _column_dims(conn)
    if dims is None:
        raise RuntimeError("knowledge.setup() must run before ingest()")

    for found in files:
        t0 = time.perf_counter()
        outcome = await _ingest_file(pool, embeddings, found, collection, dims, target_tokens, overlap_tokens)
        outcome.seconds = time.perf_counter() - t0
        report.files.append(outcome)
        log.info("ingest %s -> %s (%d chunks)%s", outcome.path, outcome.status, outcome.chunks,
                 f": {outcome.reason}" if outcome.reason else "")
    report.seconds = time.perf_counter() - started
    return report


async def _ingest_file(
    pool: AsyncConnectionPool,
    embeddings,
    found: FoundFile,
    collection: str,
    dims: int,
    target_tokens: int,
    overlap_tokens: int,
) -> FileOutcome:
    path = found.path
    source = source_name(path)
    key = file_key(path)
    shown = str(path)
    try:
        async with pool.connection() as conn:
            source = await _source_of_file(conn, collection, key) or await _free_name(conn, collection, source, key)
        # Read once, from one open file checked to lie where the walk found it; hashed and parsed from these bytes.
        data = await asyncio.to_thread(read_file, path, found.within)
        sha = hashlib.sha256(data).hexdigest()
        async with pool.connection() as conn:
            stored = await _stored_document(conn, collection, source)
        if stored is not None and stored["sha256"] == sha:
            return FileOutcome(path=shown, source=source, status=SKIPPED, chunks=stored["chunk_count"])

        doc = await asyncio.to_thread(load_document, path, source=source, data=data)
        chunks = chunk_text(doc.text, target_tokens=target_tokens, overlap_tokens=overlap_tokens, markdown=doc.has_headings)
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
                # Serialize concurrent ingests of the same file (from any folder), then of the same name.
                await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 7384212))", (f"{collection}\x1f{key}",))
                if (known := await _source_of_file(conn, collection, key)) is not None and known != source:
                    source = known  # ingested from another folder meanwhile: under that name
                    rows = [(collection, source, *row[2:]) for row in rows]
                await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 7384211))", (f"{collection}\x1f{source}",))
                current = await _stored_document(conn, collection, source, lock=True)
                if current is not None and known is None and source != key and await _free_name(conn, collection, source, key) == key:
                    # Another file took the name meanwhile (two ingests at once): named by its absolute
                    # path, as when they come one after the other. (Only this file is ever named so: no lock cycle.)
                    source = key
                    rows = [(collection, source, *row[2:]) for row in rows]
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
                    """INSERT INTO knowledge_documents (collection, source, sha256, chunk_count, ingested_at, path)
                       VALUES (%s, %s, %s, %s, now(), %s)
                       ON CONFLICT (collection, source) DO UPDATE
                       SET sha256 = EXCLUDED.sha256, chunk_count = EXCLUDED.chunk_count, ingested_at = now(), path = EXCLUDED.path""",
                    (collection, source, doc.sha256, len(rows), key),
                )
        status = REPLACED if current is not None or previous else ADDED
        return FileOutcome(path=shown, source=source, status=status, chunks=len(rows), previous_chunks=previous)
    except SymlinkSkipped as exc:
        return FileOutcome(path=shown, source=source, status=SKIPPED_LINK, reason=exc.reason)
    except DocumentLoadError as exc:
        if exc.reason in EMPTY_REASONS and (chunks := await remove(pool, source, collection)):
            # Emptied: what it held is gone, and so is its document (its old chunks were still cited).
            return FileOutcome(path=shown, source=source, status=REMOVED, previous_chunks=chunks, reason=f"{exc.reason} now")
        return FileOutcome(path=shown, source=source, status=FAILED, reason=exc.reason)
    except psycopg.Error as exc:
        return FileOutcome(path=shown, source=source, status=FAILED,
                           reason=f"database error: {type(exc).__name__}: {str(exc).strip()}")
    except Exception as exc:  # one bad file must not stop the others
        log.exception("ingesting %s failed", shown)
        return FileOutcome(path=shown, source=source, status=FAILED, reason=f"{type(exc).__name__}: {exc}")


async def remove_documents(pool: AsyncConnectionPool, sources: Sequence[str], collection: str = DEFAULT_COLLECTION) -> IngestReport:
    """Remove the documents named (as ``ingest`` named them, listed by ``knowledge.list_documents``):
    a file deleted from a folder is not removed by ingesting the folder again, which cannot tell a
    file gone from one ingested from elsewhere; a name no document has is a failure."""
    report = IngestReport(collection=(collection or DEFAULT_COLLECTION).strip() or DEFAULT_COLLECTION)
    for given in sources:
        async with pool.connection() as conn:
            is_name = await _stored_document(conn, report.collection, given) is not None
            named = await _source_of_file(conn, report.collection, file_key(given))  # a file's path from here
        if is_name and named is not None and named != given:
            # "guide.md" in b/ is a document's name (a/guide.md's, ingested from a/) and b/guide.md's path:
            # removing either on a guess removed a document `ingest` had just said was another's.
            report.files.append(FileOutcome(path=given, source=None, status=FAILED, reason=(
                f"ambiguous: the document {given!r} has that name, and the file of the document {named!r} that path "
                f"from here; nothing removed (name {named!r}, or give the other's file by its absolute path)")))
            continue
        source = given if is_name or named is None else named
        chunks = await remove(pool, source, report.collection)
        report.files.append(FileOutcome(path=given, source=source, status=REMOVED if chunks else FAILED, previous_chunks=chunks,
                                        reason="removed on request" if chunks else "no document of that name (or file) in the collection"))
    return report


async def remove(pool: AsyncConnectionPool, source: str, collection: str = DEFAULT_COLLECTION) -> int:
    """Forget one document (as named in :func:`list_documents`); returns the chunks deleted."""
    async with pool.connection() as conn:
        async with conn.transaction():
            deleted = await conn.execute(
                "DELETE FROM knowledge_chunks WHERE collection = %s AND source = %s", (collection, source)
            )
            await conn.execute("DELETE FROM knowledge_documents WHERE collection = %s AND source = %s", (collection, source))
            return deleted.rowcount or 0




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

