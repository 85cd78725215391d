"""A knowledge document's name against concurrent ingests and an existing database (real Postgres)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import knowledge
from knowledge import ingestion
from embeddings import resolve_embeddings
from storage.postgres import open_pool, prepare_database


@pytest.fixture(scope="module")
def hash384():
    return resolve_embeddings("hash:384").embeddings


@pytest.fixture(scope="module")
async def pool(new_database):
    url = new_database("kbnames")
    await prepare_database(url)
    pool = await open_pool(url, max_size=6)
    await knowledge.setup(pool, 384)
    yield pool
    await pool.close()


async def fetch(pool, sql: str, *params):
    async with pool.connection() as conn:
        return await (await conn.execute(sql, params)).fetchall()


def both_pick_a_name_first(monkeypatch) -> None:
    """Each ingest picks its file's name before either writes (two `memory-agent ingest` at once)."""
    barrier = asyncio.Barrier(2)
    real = ingestion._free_name
    calls = 0

    async def free_name(*args):
        nonlocal calls
        name = await real(*args)
        calls += 1
        if calls <= 2:  # the first look of each
            await barrier.wait()
        return name

    monkeypatch.setattr(ingestion, "_free_name", free_name)


async def test_two_files_of_one_name_ingested_at_once_from_two_folders_are_two_documents(pool, tmp_path, hash384, monkeypatch):
    """``a/guide.md`` from ``a`` and ``b/guide.md`` from ``b``, at the same time: both are "guide.md"
    when their names are picked, and the one written second replaced the first (the sequential case
    names it by its absolute path)."""
    a, b = tmp_path / "a", tmp_path / "b"
    for folder, words in ((a, "the heater"), (b, "the boiler")):
        folder.mkdir()
        (folder / "guide.md").write_text(f"# Guide\n\nHow to start {words}.")
    monkeypatch.setattr(ingestion, "source_name", lambda path: Path(path).name)  # as from each folder
    both_pick_a_name_first(monkeypatch)
    reports = await asyncio.gather(*(knowledge.ingest(pool, hash384, [f / "guide.md"], collection="at-once") for f in (a, b)))
    assert all(r.ok for r in reports), [r.summary() for r in reports]
    docs = await fetch(pool, "SELECT source, path FROM knowledge_documents WHERE collection = 'at-once'")
    assert sorted(r["path"] for r in docs) == sorted((f / "guide.md").resolve().as_posix() for f in (a, b)), docs
    chunks = await fetch(pool, "SELECT DISTINCT source FROM knowledge_chunks WHERE collection = 'at-once'")
    assert len(chunks) == 2


async def test_one_file_ingested_at_once_from_two_folders_is_one_document(pool, tmp_path, hash384, monkeypatch):
    folder = tmp_path / "kb"
    folder.mkdir()
    (folder / "guide.md").write_text("# Guide\n\nHow to start the heater.")
    names = iter(["kb/guide.md", "guide.md"])
    monkeypatch.setattr(ingestion, "source_name", lambda path: next(names))
    both_pick_a_name_first(monkeypatch)
    reports = await asyncio.gather(*(knowledge.ingest(pool, hash384, [folder / "guide.md"], collection="same-at-once") for _ in range(2)))
    assert sorted(f.status for r in reports for f in r.files) == ["added", "skipped-unchanged"]
    docs = await fetch(pool, "SELECT source FROM knowledge_documents WHERE collection = 'same-at-once'")
    chunks = await fetch(pool, "SELECT DISTINCT source FROM knowledge_chunks WHERE collection = 'same-at-once'")
    assert len(docs) == 1 and [c["source"] for c in chunks] == [docs[0]["source"]]


async def test_a_table_created_before_the_path_column_is_migrated_and_its_documents_keep_their_names(new_database, tmp_path, hash384, monkeypatch):
    url = new_database("kbold")
    await prepare_database(url)
    pool = await open_pool(url, max_size=2)
    try:
        async with pool.connection() as conn:
            await conn.execute(
                """CREATE TABLE knowledge_documents (collection text NOT NULL, source text NOT NULL, sha256 text NOT NULL,
                   chunk_count integer NOT NULL, ingested_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (collection, source))"""
            )
            await conn.execute("INSERT INTO knowledge_documents VALUES ('default', 'guide.md', 'old', 1, now())")
        await knowledge.setup(pool, 384)
        await knowledge.setup(pool, 384)  # again: idempotent
        (tmp_path / "guide.md").write_text("# Guide\n\nNew words.")
        monkeypatch.chdir(tmp_path)
        report = await knowledge.ingest(pool, hash384, [Path("guide.md")])
        assert [(f.status, f.source) for f in report.files] == [("replaced", "guide.md")], report.summary()
        docs = await fetch(pool, "SELECT source, path FROM knowledge_documents")
        assert [(d["source"], d["path"]) for d in docs] == [("guide.md", (tmp_path / "guide.md").resolve().as_posix())]
    finally:
        await pool.close()
