"""The knowledge base on a real Postgres + pgvector (never mocked).

One database per module holds the sample documents of tests/fixtures/kb (embedded with
the real all-MiniLM-L6-v2) in the "default" collection; tests that change things use
their own collection, or their own database.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from langchain_core.embeddings import Embeddings

import knowledge
from core.tokens import count_tokens
from prompts.reply_prompt import render_knowledge
from knowledge.chunking import chunk_text
from knowledge.document_loaders import SUPPORTED_EXTENSIONS, html_to_text, load_document, source_name
from storage.embeddings_record import REINDEX_COMMAND
from embeddings import resolve_embeddings
from core.errors import EmbeddingMismatch
from storage.postgres import open_pool, prepare_database

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kb"
INSTALL = FIXTURES / "install_guide.md"
ACCOUNT = FIXTURES / "account_help.html"
GARANZIA = FIXTURES / "garanzia.txt"


# --------------------------------------------------------------------------- helpers


class CountingEmbeddings(Embeddings):
    """Real embeddings that count how often they are called."""

    def __init__(self, inner: Embeddings) -> None:
        self.inner = inner
        self.calls = 0

    def embed_documents(self, texts):
        self.calls += 1
        return self.inner.embed_documents(texts)

    def embed_query(self, text):
        self.calls += 1
        return self.inner.embed_query(text)

    async def aembed_documents(self, texts):
        self.calls += 1
        return await self.inner.aembed_documents(texts)

    async def aembed_query(self, text):
        self.calls += 1
        return await self.inner.aembed_query(text)


class PoisonEmbeddings(Embeddings):
    """Real embeddings, except texts containing ``marker`` get a NaN vector, which pgvector rejects."""

    def __init__(self, inner: Embeddings, marker: str) -> None:
        self.inner = inner
        self.marker = marker

    def embed_documents(self, texts):
        raise NotImplementedError

    def embed_query(self, text):
        return self.inner.embed_query(text)

    async def aembed_documents(self, texts):
        vectors = await self.inner.aembed_documents(texts)
        return [[float("nan")] * len(v) if self.marker in t else v for t, v in zip(texts, vectors)]


def minimal_pdf(pages: list[list[str]], to_unicode: str | None = None) -> bytes:
    """A valid PDF with one text line per string, Helvetica, one page per list (``to_unicode``: the
    font's character map, as the last object)."""

    def esc(s: str) -> str:
        return s.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")

    objects: dict[int, str] = {
        1: "<< /Type /Catalog /Pages 2 0 R >>",
        2: "<< /Type /Pages /Kids [{}] /Count {} >>".format(" ".join(f"{4 + 2 * i} 0 R" for i in range(len(pages))), len(pages)),
        3: "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    }
    for i, lines in enumerate(pages):
        stream = "\n".join(["BT", "/F1 12 Tf", "14 TL", "72 720 Td"] + [f"({esc(line)}) Tj T*" for line in lines] + ["ET"])
        objects[4 + 2 * i] = (
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            f"/Resources << /Font << /F1 3 0 R >> >> /Contents {5 + 2 * i} 0 R >>"
        )
        objects[5 + 2 * i] = f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream"
    if to_unicode is not None:
        last = max(objects) + 1
        objects[3] = objects[3].replace(" >>", f" /ToUnicode {last} 0 R >>")
        objects[last] = f"<< /Length {len(to_unicode)} >>\nstream\n{to_unicode}\nendstream"
    out = b"%PDF-1.4\n"
    offsets: dict[int, int] = {}
    for number in sorted(objects):
        offsets[number] = len(out)
        out += f"{number} 0 obj\n{objects[number]}\nendobj\n".encode("latin-1")
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    for number in sorted(objects):
        out += f"{offsets[number]:010d} 00000 n \n".encode()
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return out


def pdf_mapping_a_glyph_to_a_lone_surrogate() -> bytes:
    """A PDF whose font's ToUnicode map sends 'B' to U+D800 (a broken map, as found in the wild):
    pypdf reads its page as 'Hello \ud800 there, …'."""
    pairs = [f"<{c:02X}> <{c:04X}>" for c in range(32, 127) if c != 0x42] + ["<42> <D800>"]
    cmap = (
        "/CIDInit /ProcSet findresource begin 12 dict begin begincmap /CMapName /Broken def\n"
        "1 begincodespacerange <00> <FF> endcodespacerange\n"
        f"{len(pairs)} beginbfchar\n" + "\n".join(pairs) + "\nendbfchar\n"
        "endcmap CMapName currentdict /CMap defineresource pop end end"
    )
    return minimal_pdf([["Hello B there, the hub manual"]], to_unicode=cmap)


async def fetch(pool, sql: str, *params):
    async with pool.connection() as conn:
        return await (await conn.execute(sql, params)).fetchall()


async def chunk_rows(pool, collection: str, source: str):
    return await fetch(
        pool,
        "SELECT id, chunk_index, heading_path, content, file_sha256, metadata FROM knowledge_chunks "
        "WHERE collection = %s AND source = %s ORDER BY chunk_index",
        collection,
        source,
    )


async def new_kb(new_database, dims: int):
    url = new_database("kb")
    await prepare_database(url)
    pool = await open_pool(url, max_size=4)
    await knowledge.setup(pool, dims)
    return pool


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
async def kb(new_database, minilm):
    pool = await new_kb(new_database, minilm.dims)
    report = await knowledge.ingest(pool, minilm.embeddings, [FIXTURES])
    yield SimpleNamespace(pool=pool, embeddings=minilm.embeddings, dims=minilm.dims, report=report)
    await pool.close()


@pytest.fixture(scope="module")
def hash384():
    """Fast deterministic 384-d embeddings for tests that need no semantics."""
    return resolve_embeddings("hash:384").embeddings


# --------------------------------------------------------------------------- setup


async def test_setup_is_idempotent(kb):
    await knowledge.setup(kb.pool, kb.dims)
    await knowledge.setup(kb.pool, kb.dims)
    indexes = {r["indexname"] for r in await fetch(kb.pool, "SELECT indexname FROM pg_indexes WHERE tablename = 'knowledge_chunks'")}
    assert {"knowledge_chunks_embedding_hnsw", "knowledge_chunks_tsv_gin", "knowledge_chunks_position_key"} <= indexes


async def test_setup_with_other_dims_raises_a_clear_error_naming_reindex(kb):
    with pytest.raises(EmbeddingMismatch) as caught:
        await knowledge.setup(kb.pool, 16)
    message = str(caught.value)
    assert REINDEX_COMMAND in message and "384" in message and "16" in message


# --------------------------------------------------------------------------- loading and ingest


async def test_ingesting_a_directory_adds_its_markdown_html_and_text_files(kb):
    report = kb.report
    assert report.ok, report.summary()
    assert sorted(f.source for f in report.added) == sorted(source_name(p) for p in (INSTALL, ACCOUNT, GARANZIA))
    rows = await fetch(
        kb.pool,
        """SELECT d.source, d.chunk_count, count(c.id) AS stored FROM knowledge_documents d
           JOIN knowledge_chunks c USING (collection, source) WHERE d.collection = 'default'
           GROUP BY d.source, d.chunk_count""",
    )
    assert len(rows) == 3
    for row in rows:
        assert row["chunk_count"] == row["stored"] > 0
    assert report.chunks_written == sum(r["stored"] for r in rows)


async def test_html_headings_become_heading_paths_and_script_style_nav_are_dropped(kb):
    rows = await chunk_rows(kb.pool, "default", source_name(ACCOUNT))
    assert [r["heading_path"] for r in rows] == ["Account help > Resetting your password", "Account help > Billing"]
    everything = " ".join(r["content"] for r in rows)
    for dropped in ("tracking-snippet", "not indexed", "navigation link", "font-family"):
        assert dropped not in everything
    assert "- Card payments are charged immediately.\n- Bank transfers" in rows[1]["content"]
    assert all(r["metadata"]["kind"] == "html" for r in rows)


def test_a_page_whose_body_is_one_form_keeps_its_text_and_drops_the_controls():
    html = (
        '<html><body><form id="form1" method="post"><h1>Warranty</h1><p>Two years on every hub.</p>'
        '<label>Serial</label><input name="s"><select><option>Italy</option></select>'
        "<textarea>type here</textarea><button>Send</button></form></body></html>"
    )
    assert html_to_text(html) == "# Warranty\n\nTwo years on every hub.\n\nSerial"


def test_a_pre_holding_a_code_fence_stays_one_block_of_code_without_headings():
    html = "<h1>Writing docs</h1><p>End a block, then a heading:</p><pre>make\n```\n# Next section\n</pre><p>Done.</p>"
    chunks = chunk_text(html_to_text(html))
    assert [c.heading_path for c in chunks] == ["Writing docs"]
    assert "make\n```\n# Next section" in chunks[0].text and "Done." in chunks[0].text


def test_a_paragraph_that_reads_as_a_heading_or_a_fence_is_kept_as_text_escaped():
    """"<p># 1 reason</p>" became a heading, lost when another came next; "<p>``` x</p>" made the rest code."""
    html = "<h1>Why</h1><p># 1 reason: speed</p><p># 2 reason: cost</p><p>``` not code</p><h2>Next</h2><p>Body.</p>"
    chunks = chunk_text(html_to_text(html))
    assert [c.heading_path for c in chunks] == ["Why", "Why > Next"]
    assert chunks[0].text == "\\# 1 reason: speed\n\n\\# 2 reason: cost\n\n\\``` not code" and chunks[1].text == "Body."


async def test_markdown_sections_keep_their_heading_path_and_code_comments_are_not_headings(kb):
    rows = await chunk_rows(kb.pool, "default", source_name(INSTALL))
    paths = [r["heading_path"] for r in rows]
    assert "Installation > Linux" in paths
    assert "Installation > Troubleshooting > The hub does not power on" in paths
    assert not any("comment inside a code block" in p for p in paths)
    linux = rows[paths.index("Installation > Linux")]
    assert "# a comment inside a code block is not a heading" in linux["content"]


async def test_hash_lines_of_a_text_file_are_stored_as_text_not_lost_as_headings(kb, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("Upgrade steps\n# stop the hub before flashing\n# keep it plugged in\nThen flash it.\n")
    report = await knowledge.ingest(kb.pool, kb.embeddings, [notes], collection="plain")
    assert [f.status for f in report.files] == ["added"], report.summary()
    rows = await chunk_rows(kb.pool, "plain", source_name(notes))
    stored = " ".join(r["content"] for r in rows)
    assert "# stop the hub before flashing" in stored and "# keep it plugged in" in stored
    assert {r["heading_path"] for r in rows} == {""}


async def test_a_pdf_whose_character_map_gives_a_lone_surrogate_is_ingested_with_it_replaced(kb, tmp_path):
    """Postgres refused its insert, and ingest said only "UnicodeEncodeError: 'utf-8' codec can't encode"."""
    pdf = tmp_path / "broken-map.pdf"
    pdf.write_bytes(pdf_mapping_a_glyph_to_a_lone_surrogate())
    report = await knowledge.ingest(kb.pool, kb.embeddings, [pdf], collection="broken-map")
    assert report.ok, report.summary()
    [row] = await chunk_rows(kb.pool, "broken-map", source_name(pdf))
    assert row["content"] == "Hello \ufffd there, the hub manual"


async def test_a_pdf_loads_with_its_text_and_page_numbers(kb, tmp_path):
    pdf = tmp_path / "specs.pdf"
    pdf.write_bytes(minimal_pdf([
        ["Nimbus hub technical sheet.", "Operating temperature from 0 to 40 degrees."],
        ["Page two lists the radio: dual band Wi-Fi and Zigbee 3.0."],
    ]))
    doc = load_document(pdf)
    assert doc.kind == "pdf" and "Zigbee 3.0" in doc.text and [p.page for p in doc.pages] == [1, 2]

    report = await knowledge.ingest(kb.pool, kb.embeddings, [pdf], collection="pdf", target_tokens=20, overlap_tokens=0)
    assert [f.status for f in report.files] == ["added"], report.summary()
    rows = await chunk_rows(kb.pool, "pdf", source_name(pdf))
    assert rows[0]["metadata"]["pages"] == [1] and "Operating temperature" in " ".join(r["content"] for r in rows)
    assert rows[-1]["metadata"]["pages"] == [2] and "Zigbee 3.0" in rows[-1]["content"]
    found = await knowledge.search(kb.pool, kb.embeddings, "Zigbee", collection="pdf")
    assert found and found[0].metadata["pages"] == [2]


async def test_a_failing_file_is_reported_and_the_others_are_still_ingested(kb, tmp_path):
    (tmp_path / "good.md").write_text("# Good\n\nThis one is fine.")
    (tmp_path / "empty.txt").write_text("   \n")
    (tmp_path / "latin1.txt").write_bytes("caff\xe8 corretto".encode("latin-1"))
    unsupported = tmp_path / "data.xyz"
    unsupported.write_text("not a document type we read")
    missing = tmp_path / "nope.md"

    report = await knowledge.ingest(kb.pool, kb.embeddings, [tmp_path, unsupported, missing], collection="mixed")

    by_name = {Path(f.path).name: f for f in report.files}
    assert by_name["good.md"].status == "added" and by_name["good.md"].chunks == 1
    assert by_name["empty.txt"].status == "failed" and "empty" in by_name["empty.txt"].reason
    assert by_name["latin1.txt"].status == "failed" and "UTF-8" in by_name["latin1.txt"].reason
    assert by_name["data.xyz"].status == "failed" and "unsupported file type .xyz" in by_name["data.xyz"].reason
    assert by_name["nope.md"].status == "failed" and "no such file" in by_name["nope.md"].reason
    assert not report.ok and "data.xyz" in report.summary()
    stored = await fetch(kb.pool, "SELECT source FROM knowledge_documents WHERE collection = 'mixed'")
    assert [r["source"] for r in stored] == [source_name(tmp_path / "good.md")]


async def test_a_symlink_out_of_the_folder_is_skipped_and_reported_unless_asked(kb, tmp_path, hash384):
    folder, outside = tmp_path / "docs", tmp_path / "private"
    (folder / "inner").mkdir(parents=True)
    outside.mkdir()
    (folder / "guide.md").write_text("# Guide\n\nHow to start.")
    secret = outside / "passwd.txt"
    secret.write_text("root:x:0:0:root:/root:/bin/bash")
    (outside / "notes.md").write_text("# Notes\n\nPrivate notes.")
    (folder / "passwd.txt").symlink_to(secret)  # a link to a file outside
    (folder / "elsewhere").symlink_to(outside, target_is_directory=True)  # a link to a folder outside
    (folder / "inner" / "same-guide.md").symlink_to(folder / "guide.md")  # a link that stays inside

    report = await knowledge.ingest(kb.pool, hash384, [folder], collection="links")

    stored = await fetch(kb.pool, "SELECT source FROM knowledge_documents WHERE collection = 'links'")
    assert [r["source"] for r in stored] == [source_name(folder / "guide.md")]
    skipped = {Path(f.path).name: f.reason for f in report.skipped_links}
    assert set(skipped) == {"passwd.txt", "elsewhere"}
    assert str(secret) in skipped["passwd.txt"] and "--follow-symlinks" in skipped["passwd.txt"]
    summary = report.summary()
    assert "2 links skipped" in summary and f"skipped: {folder / 'passwd.txt'}" in summary
    assert report.ok  # skipping is not a failure

    followed = await knowledge.ingest(kb.pool, hash384, [folder], collection="links-followed", follow_symlinks=True)
    assert followed.skipped_links == [] and len(followed.added) == 3  # the guide, the linked file, the linked folder's note
    contents = await fetch(kb.pool, "SELECT content FROM knowledge_chunks WHERE collection = 'links-followed'")
    assert any("root:x:0:0" in r["content"] for r in contents)


async def test_an_empty_path_or_an_unreadable_folder_is_reported_not_passed_over(kb, tmp_path, hash384, monkeypatch):
    """`ingest ""` ingested the current folder (Path("") is "."), and a folder inside that could not
    be read was skipped without a word, the ingest reported as whole (stop 63, a fuzzing of the CLI)."""
    import os

    folder = tmp_path / "docs"
    (folder / "locked").mkdir(parents=True)
    (folder / "guide.md").write_text("# Guide\n\nHow to start.")
    (folder / "locked" / "hidden.md").write_text("# Hidden\n\nNever read.")
    scandir = os.scandir

    def refusing(path="."):  # what chmod 000 does to a user who is not root
        if Path(path).name == "locked":
            raise PermissionError(13, "Permission denied", str(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", refusing)
    monkeypatch.chdir(folder)  # where an empty path would have led
    report = await knowledge.ingest(kb.pool, hash384, ["", folder], collection="unreadable")

    stored = await fetch(kb.pool, "SELECT source FROM knowledge_documents WHERE collection = 'unreadable'")
    assert [r["source"] for r in stored] == [source_name(folder / "guide.md")]
    failed = {f.path: f.reason for f in report.failed}
    assert failed["''"] == "an empty path names no file or folder"
    assert "cannot read the folder: Permission denied" in failed[str(folder / "locked")]
    assert not report.ok

    empty = tmp_path / "empty"
    (empty / ".git").mkdir(parents=True)
    nothing = await knowledge.ingest(kb.pool, hash384, [empty], collection="unreadable")
    assert [f.reason for f in nothing.failed] == [f"the folder holds no file to ingest ({', '.join(sorted(SUPPORTED_EXTENSIONS))}; hidden ones are left out)"]


@pytest.mark.parametrize("swap", ["file", "folder"])
async def test_a_file_swapped_for_a_link_out_of_the_folder_after_the_walk_is_refused_not_read(kb, tmp_path, hash384, monkeypatch, swap):
    import knowledge.ingestion as ingestion

    folder, outside = tmp_path / "docs", tmp_path / "private"
    (folder / "inner").mkdir(parents=True)
    outside.mkdir()
    (folder / "guide.md").write_text("# Guide\n\nHow to start.")
    (folder / "inner" / "notes.md").write_text("# Notes\n\nHarmless notes.")
    (outside / "notes.md").write_text("# Secret\n\nroot:x:0:0:root:/root:/bin/bash")
    walk = ingestion.expand_paths

    def walk_then_swap(*args, **kwargs):
        found = walk(*args, **kwargs)  # the walk saw a plain file; it is swapped before it is read
        if swap == "file":
            (folder / "inner" / "notes.md").unlink()
            (folder / "inner" / "notes.md").symlink_to(outside / "notes.md")
        else:  # the folder on its path becomes a link out
            (folder / "inner" / "notes.md").unlink()
            (folder / "inner").rmdir()
            (folder / "inner").symlink_to(outside, target_is_directory=True)
        return found

    monkeypatch.setattr(ingestion, "expand_paths", walk_then_swap)
    report = await knowledge.ingest(kb.pool, hash384, [folder], collection=f"swapped-{swap}")

    contents = await fetch(kb.pool, "SELECT content FROM knowledge_chunks WHERE collection = %s", f"swapped-{swap}")
    assert contents  # the guide was stored
    assert not any("root:x:0:0" in r["content"] for r in contents)
    (refused,) = report.skipped_links
    assert Path(refused.path).name == "notes.md" and "after the folder was walked" in refused.reason
    assert [Path(f.path).name for f in report.added] == ["guide.md"]


def test_ingest_has_a_follow_symlinks_flag():
    from app.cli.main import build_parser

    assert build_parser().parse_args(["ingest", "docs"]).follow_symlinks is False
    assert build_parser().parse_args(["ingest", "docs", "--follow-symlinks"]).follow_symlinks is True
    assert build_parser().parse_args(["ingest", "--remove", "kb/security.md"]).remove is True


async def test_reingesting_an_unchanged_file_is_skipped_and_a_changed_file_replaces_its_chunks(kb, tmp_path, hash384):
    doc = tmp_path / "versions.md"
    doc.write_text("# One\n\nfirst section\n\n# Two\n\nsecond section\n\n# Three\n\nthird section")
    source = source_name(doc)

    first = await knowledge.ingest(kb.pool, hash384, [doc], collection="versions")
    assert [(f.status, f.chunks) for f in first.files] == [("added", 3)]
    ids_before = [r["id"] for r in await chunk_rows(kb.pool, "versions", source)]
    assert len(ids_before) == 3

    again = await knowledge.ingest(kb.pool, hash384, [doc], collection="versions")
    assert [(f.status, f.chunks) for f in again.files] == [("skipped-unchanged", 3)]
    assert [r["id"] for r in await chunk_rows(kb.pool, "versions", source)] == ids_before  # untouched

    doc.write_text("# Only\n\nthe rewritten document")
    changed = await knowledge.ingest(kb.pool, hash384, [doc], collection="versions")
    assert [(f.status, f.chunks, f.previous_chunks) for f in changed.files] == [("replaced", 1, 3)]
    rows = await chunk_rows(kb.pool, "versions", source)
    assert [(r["chunk_index"], r["heading_path"], r["content"]) for r in rows] == [(0, "Only", "the rewritten document")]
    document = await fetch(kb.pool, "SELECT sha256, chunk_count FROM knowledge_documents WHERE collection = 'versions'")
    assert [(d["sha256"], d["chunk_count"]) for d in document] == [(load_document(doc).sha256, 1)]
    assert rows[0]["file_sha256"] == document[0]["sha256"]


async def test_a_page_emptied_of_text_loses_its_document_as_an_emptied_file_does(kb, tmp_path, hash384):
    """An HTML page left with only markup failed ("no text could be extracted") and its old chunks
    were still retrieved and cited."""
    page = tmp_path / "prices.html"
    page.write_text("<p>The hub costs 10 EUR.</p>")
    await knowledge.ingest(kb.pool, hash384, [page], collection="emptied-page")
    page.write_text("<html><body><script>x()</script></body></html>")
    emptied = await knowledge.ingest(kb.pool, hash384, [page], collection="emptied-page")
    assert [(f.status, f.previous_chunks) for f in emptied.files] == [("removed", 1)], emptied.summary()
    assert await fetch(kb.pool, "SELECT 1 FROM knowledge_chunks WHERE collection = 'emptied-page'") == []
    never = await knowledge.ingest(kb.pool, hash384, [page], collection="never-had-text")
    assert [(f.status, f.reason) for f in never.files] == [("failed", "the file holds no text")]


async def test_an_emptied_file_loses_its_chunks_and_a_document_is_removed_by_its_name(kb, tmp_path, hash384):
    """An emptied file failed ("the file is empty") keeping its old chunks, and nothing removed a
    document whose file was deleted: both were still cited. A folder ingested again does not remove
    what it no longer holds (a document's name cannot tell a file gone from one ingested elsewhere)."""
    folder = tmp_path / "kb"
    folder.mkdir()
    (folder / "parking.txt").write_text("Parking is in garage B, level 2.")
    (folder / "security.md").write_text("# Badges\n\nShow your badge at the door.")
    (folder / "holidays.md").write_text("# Holidays\n\nThe office closes on 24 December.")
    first = await knowledge.ingest(kb.pool, hash384, [folder], collection="synced")
    assert sorted(f.status for f in first.files) == ["added"] * 3

    (folder / "security.md").unlink()
    (folder / "parking.txt").write_text("")
    again = await knowledge.ingest(kb.pool, hash384, [folder], collection="synced")
    outcomes = {Path(f.source).name: f.status for f in again.files}
    assert outcomes == {"parking.txt": "removed", "holidays.md": "skipped-unchanged"}, again.summary()
    assert again.ok and "1 removed" in again.summary()
    security = source_name(folder / "security.md")
    removed = await knowledge.remove_documents(kb.pool, [security, "no/such/document.md"], collection="synced")
    assert [(f.source, f.status) for f in removed.files] == [(security, "removed"), ("no/such/document.md", "failed")]
    assert not removed.ok
    left = await fetch(kb.pool, "SELECT DISTINCT source FROM knowledge_chunks WHERE collection = 'synced'")
    assert {Path(r["source"]).name for r in left} == {"holidays.md"}
    # An empty file never ingested is a failure to read, not a removal.
    (folder / "new.txt").write_text("   ")
    assert [(Path(f.source).name, f.status) for f in (await knowledge.ingest(kb.pool, hash384, [folder / "new.txt"], collection="synced")).files] == [
        ("new.txt", "failed")]


async def test_the_same_file_in_another_collection_is_ingested_separately(kb, hash384, tmp_path):
    copy = tmp_path / "install_guide.md"
    shutil.copy(INSTALL, copy)
    for collection in ("copy-a", "copy-b"):
        report = await knowledge.ingest(kb.pool, hash384, [copy], collection=collection)
        assert [f.status for f in report.files] == ["added"]


async def test_a_write_that_fails_midway_leaves_the_previous_version_intact(kb, tmp_path, hash384):
    doc = tmp_path / "atomic.md"
    doc.write_text("# A\n\nversion one alpha\n\n# B\n\nversion one beta")
    source = source_name(doc)
    await knowledge.ingest(kb.pool, hash384, [doc], collection="atomic")
    before = await chunk_rows(kb.pool, "atomic", source)

    # the third chunk's vector is NaN: Postgres rejects that row after the first two were written
    doc.write_text("# A\n\nversion two alpha\n\n# B\n\nversion two beta\n\n# C\n\nPOISON chunk")
    report = await knowledge.ingest(kb.pool, PoisonEmbeddings(hash384, "POISON"), [doc], collection="atomic")

    assert report.files[0].status == "failed" and "database error" in report.files[0].reason
    assert await chunk_rows(kb.pool, "atomic", source) == before
    stored = await fetch(kb.pool, "SELECT chunk_count FROM knowledge_documents WHERE collection = 'atomic'")
    assert [r["chunk_count"] for r in stored] == [2]


# --------------------------------------------------------------------------- search


async def test_a_product_code_that_appears_in_one_chunk_is_found_by_full_text(kb):
    holders = await fetch(kb.pool, "SELECT id FROM knowledge_chunks WHERE collection = 'default' AND content LIKE '%%XR-2291-B%%'")
    assert len(holders) == 1

    results = await knowledge.search(kb.pool, kb.embeddings, "XR-2291-B", collection="default")

    assert results[0].id == holders[0]["id"]
    assert results[0].text_rank == 1
    assert [r.id for r in results if r.text_rank is not None] == [holders[0]["id"]]
    assert results[0].heading_path == "Installation > Troubleshooting > The hub does not power on"
    assert results[0].citation == f"{source_name(INSTALL)}#{results[0].chunk_index}"


async def test_a_natural_question_with_the_code_ranks_its_chunk_first(kb):
    results = await knowledge.search(kb.pool, kb.embeddings, "which power supply is the XR-2291-B?", collection="default")
    assert "XR-2291-B" in results[0].content and results[0].text_rank == 1


async def test_a_paraphrase_with_no_shared_words_is_found_by_vector_search(kb):
    results = await knowledge.search(
        kb.pool, kb.embeddings, "I forgot my login credentials, how can I get back into my profile?", collection="default"
    )
    top = results[0]
    assert top.heading_path == "Account help > Resetting your password"
    assert top.vector_rank == 1
    assert top.text_rank is None  # no word in common: only the vectors could find it


async def test_hebrew_and_italian_words_are_matched_by_the_simple_text_search_config(kb):
    for word in ("scontrino", "ראשון"):
        results = await knowledge.search(kb.pool, kb.embeddings, word, collection="default")
        assert results[0].source == source_name(GARANZIA) and results[0].text_rank == 1, word


async def test_search_respects_the_collection_boundary(kb, tmp_path):
    recipe = tmp_path / "risotto.md"
    recipe.write_text("# Risotto\n\nToast the carnaroli rice, add saffron broth slowly and stir. XR-2291-B is not an ingredient.")
    await knowledge.ingest(kb.pool, kb.embeddings, [recipe], collection="recipes")

    # The boundary, not relevance, is under test: the gate is off (the recipe only shares the code).
    in_recipes = await knowledge.search(kb.pool, kb.embeddings, "XR-2291-B power adapter", collection="recipes", gate=None)
    assert in_recipes and {r.collection for r in in_recipes} == {"recipes"}
    assert {r.source for r in in_recipes} == {source_name(recipe)}

    # Without the relevance gate: the default collection's best candidates for a query it has nothing about.
    in_default = await knowledge.search(kb.pool, kb.embeddings, "carnaroli rice with saffron", collection="default", gate=None)
    assert in_default and all(r.collection == "default" and r.source != source_name(recipe) for r in in_default)
    assert await knowledge.search(kb.pool, kb.embeddings, "carnaroli rice with saffron", collection="default") == []

    everywhere = await knowledge.search(kb.pool, kb.embeddings, "carnaroli rice with saffron", k=20)
    assert source_name(recipe) in {r.source for r in everywhere}


@pytest.mark.parametrize(
    "message",
    ["I'm hungry, any ideas for dinner?", "My name is Lee.", "thanks!", "Should we store the click events as Parquet or Avro?"],
)
async def test_an_unrelated_message_gets_no_knowledge_at_all(kb, message):
    assert await knowledge.search(kb.pool, kb.embeddings, message) == []
    assert await knowledge.search(kb.pool, kb.embeddings, message, gate=None)  # there were candidates to refuse


async def test_a_related_message_still_gets_its_section_through_the_gate(kb):
    results = await knowledge.search(kb.pool, kb.embeddings, "the hub's light stays dark and it will not turn on")
    assert results and results[0].heading_path == "Installation > Troubleshooting > The hub does not power on"
    assert all(knowledge.RELEVANCE_GATE.admits(r.vector_similarity, text_match=r.text_match, whole_match=r.whole_match) for r in results)


async def test_a_lone_product_code_passes_the_gate_on_its_words_though_it_embeds_poorly(kb):
    [code] = await knowledge.search(kb.pool, kb.embeddings, "XR-2291-B", k=1)
    assert code.whole_match and code.vector_similarity < knowledge.RELEVANCE_GATE.min_similarity
    # A greeting is filler: matching it is no evidence (nor is "thanks" in any document).
    assert not any(r.text_match for r in await knowledge.search(kb.pool, kb.embeddings, "hello thanks", gate=None))


@pytest.mark.slow
async def test_an_empty_knowledge_base_returns_nothing_without_calling_the_embeddings(new_database, hash384):
    pool = await new_kb(new_database, 384)
    try:
        counting = CountingEmbeddings(hash384)
        assert await knowledge.is_empty(pool)
        assert await knowledge.search(pool, counting, "anything at all") == []
        assert counting.calls == 0
        assert await knowledge.stats(pool) == {"documents": 0, "chunks": 0, "collections": {}}
    finally:
        await pool.close()


async def test_a_blank_query_or_an_empty_collection_returns_nothing_without_calling_the_embeddings(kb):
    counting = CountingEmbeddings(kb.embeddings)
    assert await knowledge.search(kb.pool, counting, "   ") == []
    assert await knowledge.search(kb.pool, counting, "hub", collection="no-such-collection") == []
    assert counting.calls == 0
    assert await knowledge.is_empty(kb.pool, "no-such-collection")
    assert not await knowledge.is_empty(kb.pool, "default")


async def test_mmr_returns_no_near_duplicate_chunks_when_duplicates_exist(kb, tmp_path):
    text = "# Returns\n\nYou can return any product within thirty days for a full refund, shipping included."
    for name in ("copy1.md", "copy2.md", "copy3.md"):
        (tmp_path / name).write_text(text)
    (tmp_path / "other.md").write_text("# Exchanges\n\nA faulty product can be exchanged for a new one in any shop.")
    (tmp_path / "more.md").write_text("# Gift cards\n\nGift cards cannot be refunded or returned.")
    await knowledge.ingest(kb.pool, kb.embeddings, [tmp_path], collection="dups")

    results = await knowledge.search(kb.pool, kb.embeddings, "can I return a product for a refund?", collection="dups", k=5)

    contents = [r.content for r in results]
    assert contents.count(text.split("\n\n", 1)[1]) == 1
    assert len(results) == 3  # one of the three copies plus the two different chunks


async def test_results_stay_within_k_and_the_token_budget(kb):
    query = "how do I set up and troubleshoot the hub?"
    for k, budget in [(6, 1200), (10, 120), (2, 1200), (10, 60)]:
        results = await knowledge.search(kb.pool, kb.embeddings, query, k=k, token_budget=budget)
        assert len(results) <= k
        assert sum(r.tokens for r in results) <= budget
        assert results, (k, budget)
        # The budget is of the section as the prompt renders it (citations, headings, separators), whole chunks.
        rendered = render_knowledge([r.as_chunk() for r in results])
        assert count_tokens(rendered) <= budget, (k, budget)
    assert await knowledge.search(kb.pool, kb.embeddings, query, token_budget=3) == []


async def test_retrieved_chunks_serialize_with_their_citation(kb):
    result = (await knowledge.search(kb.pool, kb.embeddings, "invoices", collection="default"))[0]
    data = result.model_dump()
    assert data["citation"] == f"{result.source}#{result.chunk_index}"
    assert {"source", "chunk_index", "heading_path", "content", "collection", "vector_rank", "text_rank", "rrf_score"} <= set(data)


# --------------------------------------------------------------------------- inspection and reindex


async def test_list_documents_and_stats_count_documents_and_chunks_per_collection(kb):
    docs = await knowledge.list_documents(kb.pool, "default")
    assert sorted(d.source for d in docs) == sorted(source_name(p) for p in (INSTALL, ACCOUNT, GARANZIA))
    stats = await knowledge.stats(kb.pool)
    default = stats["collections"]["default"]
    assert default["documents"] == 3 and default["chunks"] == sum(d.chunk_count for d in docs)
    assert stats["chunks"] == (await fetch(kb.pool, "SELECT count(*) AS n FROM knowledge_chunks"))[0]["n"]


async def test_remove_forgets_a_document_and_its_chunks(kb, tmp_path, hash384):
    doc = tmp_path / "gone.md"
    doc.write_text("# Gone\n\nsoon forgotten")
    await knowledge.ingest(kb.pool, hash384, [doc], collection="removal")
    assert await knowledge.remove(kb.pool, source_name(doc), "removal") == 1
    assert await knowledge.is_empty(kb.pool, "removal")
    assert await knowledge.list_documents(kb.pool, "removal") == []


@pytest.mark.slow
async def test_reembed_changes_the_dimensions_and_search_works_with_the_new_model(new_database, tmp_path):
    old, new = resolve_embeddings("hash:32").embeddings, resolve_embeddings("hash:48").embeddings
    pool = await new_kb(new_database, 32)
    try:
        (tmp_path / "a.md").write_text("# Alpha\n\nThe XR-2291-B adapter.\n\n# Beta\n\nSomething else entirely.")
        await knowledge.ingest(pool, old, [tmp_path])

        assert await knowledge.reembed(pool, new, 48) == 2

        await knowledge.setup(pool, 48)  # no mismatch any more
        with pytest.raises(EmbeddingMismatch):
            await knowledge.setup(pool, 32)
        nulls = await fetch(pool, "SELECT count(*) AS n FROM knowledge_chunks WHERE embedding IS NULL")
        assert nulls[0]["n"] == 0
        indexes = await fetch(pool, "SELECT indexname FROM pg_indexes WHERE indexname = 'knowledge_chunks_embedding_hnsw'")
        assert len(indexes) == 1
        results = await knowledge.search(pool, new, "XR-2291-B adapter")
        assert results[0].heading_path == "Alpha" and results[0].vector_rank == 1
    finally:
        await pool.close()


async def test_full_text_ranks_by_the_rarity_of_the_words_matched_and_reports_their_coverage(kb):
    # "hub" is in most install-guide chunks, "microwave" in one: that one ranks first in full text.
    query = "should the hub be kept away from microwave ovens"
    results = await knowledge.search(kb.pool, kb.embeddings, query, collection="default", k=20, token_budget=10_000, gate=None)
    by_text = sorted((r for r in results if r.text_rank is not None), key=lambda r: r.text_rank)
    assert by_text[0].heading_path.endswith("The hub loses its Wi-Fi connection")
    # It holds every word of the question the documents have; the others only the common "hub".
    assert len(by_text) > 1 and by_text[0].text_coverage > 0.5 > max(r.text_coverage for r in by_text[1:])
    assert all(r.text_coverage == 0.0 for r in results if r.text_rank is None)


# --------------------------------------------------------------------------- identifiers

SETTINGS_DOC = """# Settings

| field | default | meaning |
| --- | --- | --- |
| `max_facts` | `7` | facts in the prompt at most |
| `rag_collection` | `""` | knowledge-base collection (`""` = all) |
| `rag_top_k` | `6` | knowledge chunks at most |
| `rag_token_budget` | `1200` | tokens of the knowledge section |

# Ranking

Retrieval (RAG) ranks the candidates and keeps the top ones. The top of the vector list and the
top of the full-text list are fused, and the RAG step keeps the top chunks by default. A RAG
answer quotes the top chunk first.

# Nodes

The retrieve step lives in `nodes/retrieve.py`; the prompt is assembled in `prompts/reply_prompt.py`.
"""


@pytest.fixture(scope="module")
async def settings_kb(kb, tmp_path_factory):
    folder = tmp_path_factory.mktemp("identifiers")
    (folder / "settings.md").write_text(SETTINGS_DOC)
    report = await knowledge.ingest(kb.pool, kb.embeddings, [folder], collection="identifiers")
    assert report.ok, report.summary()
    return SimpleNamespace(pool=kb.pool, embeddings=kb.embeddings, collection="identifiers")


async def test_an_identifier_in_a_question_matches_the_chunk_naming_it_not_its_common_words(settings_kb):
    # The parser cuts rag_top_k into "rag", "top", "k": the prose about the top RAG chunks held those
    # words more often and ranked first. The identifier is a rare word of its own now.
    query = "What does rag_top_k do?"
    results = await knowledge.search(
        settings_kb.pool, settings_kb.embeddings, query, collection=settings_kb.collection, k=10, token_budget=10_000, gate=None
    )
    by_text = sorted((r for r in results if r.text_rank is not None), key=lambda r: r.text_rank)
    assert by_text[0].heading_path == "Settings" and "`rag_top_k`" in by_text[0].content
    prose = next(r for r in by_text if r.heading_path == "Ranking")
    assert by_text[0].text_coverage == 1.0 > prose.text_coverage

    gated = await knowledge.search(settings_kb.pool, settings_kb.embeddings, query, collection=settings_kb.collection)
    assert "Settings" in {r.heading_path for r in gated}


async def test_a_word_inside_a_path_matches_the_chunk_naming_the_path(settings_kb):
    # The parser keeps nodes/retrieve.py as one token: "retrieve" alone matched nothing in it.
    results = await knowledge.search(
        settings_kb.pool, settings_kb.embeddings, "reply_prompt", collection=settings_kb.collection, gate=None
    )
    assert results and results[0].heading_path == "Nodes" and results[0].whole_match
    for words in ("nodes retrieve", "retrieve.py", "prompts/reply_prompt.py", "reply_prompt.py"):
        found = await knowledge.search(settings_kb.pool, settings_kb.embeddings, words, collection=settings_kb.collection)
        assert found and found[0].heading_path == "Nodes" and found[0].whole_match, words


@pytest.mark.slow
async def test_setup_regenerates_an_old_full_text_column_so_identifiers_are_indexed(new_database, hash384):
    pool = await new_kb(new_database, 384)
    try:
        # The column as tables made before identifiers were indexed have it.
        async with pool.connection() as conn:
            await conn.execute("ALTER TABLE knowledge_chunks DROP COLUMN tsv")
            await conn.execute(
                "ALTER TABLE knowledge_chunks ADD COLUMN tsv tsvector GENERATED ALWAYS AS "
                "(to_tsvector('simple', coalesce(heading_path, '') || ' ' || content)) STORED"
            )
            await conn.execute(
                "INSERT INTO knowledge_chunks (collection, source, chunk_index, content, file_sha256) "
                "VALUES ('default', 'old.md', 0, 'Set `rag_top_k` in nodes/retrieve.py', 'x')"
            )
        has = "SELECT tsv @@ quote_literal(%s)::tsquery AS hit FROM knowledge_chunks"
        assert not (await fetch(pool, has, "rag_top_k"))[0]["hit"]

        await knowledge.setup(pool, 384)
        await knowledge.setup(pool, 384)  # once is enough

        for lexeme in ("rag_top_k", "nodes/retrieve.py", "retrieve.py", "retrieve", "nodes", "rag"):
            assert (await fetch(pool, has, lexeme))[0]["hit"], lexeme
        indexes = {r["indexname"] for r in await fetch(pool, "SELECT indexname FROM pg_indexes WHERE tablename = 'knowledge_chunks'")}
        assert "knowledge_chunks_tsv_gin" in indexes
    finally:
        await pool.close()


async def test_the_same_file_ingested_from_another_folder_stays_one_document_under_its_first_name(kb, tmp_path, hash384, monkeypatch):
    """A document is named by its path from the folder ``ingest`` ran in. The same file ingested
    again from another folder was a second document (the turn's knowledge showed both, cited two
    ways): it now keeps the name it was first given, skipped when unchanged, replaced when changed."""
    folder = tmp_path / "kb"
    folder.mkdir()
    doc = folder / "guide.md"
    doc.write_text("# Guide\n\nHow to start the heater.")
    monkeypatch.chdir(tmp_path)
    first = await knowledge.ingest(kb.pool, hash384, [Path("kb/guide.md")], collection="from-anywhere")
    assert [(f.status, f.source) for f in first.files] == [("added", "kb/guide.md")]
    monkeypatch.chdir(folder)
    again = await knowledge.ingest(kb.pool, hash384, [Path("guide.md")], collection="from-anywhere")
    assert [(f.status, f.source) for f in again.files] == [("skipped-unchanged", "kb/guide.md")]
    doc.write_text("# Guide\n\nHow to stop the heater.")
    changed = await knowledge.ingest(kb.pool, hash384, [doc], collection="from-anywhere")  # an absolute path too
    assert [(f.status, f.source) for f in changed.files] == [("replaced", "kb/guide.md")]
    stored = await fetch(kb.pool, "SELECT source FROM knowledge_documents WHERE collection = 'from-anywhere'")
    chunks = await fetch(kb.pool, "SELECT DISTINCT source, content FROM knowledge_chunks WHERE collection = 'from-anywhere'")
    assert [r["source"] for r in stored] == ["kb/guide.md"]
    assert [(r["source"], "stop" in r["content"]) for r in chunks] == [("kb/guide.md", True)]
    # Its name is said where it is not the path given, and --remove takes the file's path from here too.
    assert "named: guide.md is the document 'kb/guide.md'" in again.summary()
    removed = await knowledge.remove_documents(kb.pool, ["guide.md"], collection="from-anywhere")
    assert [(f.status, f.path, f.source) for f in removed.files] == [("removed", "guide.md", "kb/guide.md")]
    assert await fetch(kb.pool, "SELECT source FROM knowledge_documents WHERE collection = 'from-anywhere'") == []


async def test_removing_a_name_that_is_also_another_documents_file_from_here_is_refused_not_guessed(kb, tmp_path, hash384, monkeypatch):
    """``a/guide.md`` ingested from ``a`` is "guide.md"; ``b/guide.md`` ingested from above is
    "b/guide.md". In ``b``, ``--remove guide.md`` removed a's document, though ``ingest guide.md``
    there had just said "guide.md is the document 'b/guide.md'"."""
    a, b = tmp_path / "a", tmp_path / "b"
    for folder, words in ((a, "the heater"), (b, "the boiler")):
        folder.mkdir()
        (folder / "guide.md").write_text(f"# Guide\n\nHow to start {words}.")
    monkeypatch.chdir(a)
    await knowledge.ingest(kb.pool, hash384, [Path("guide.md")], collection="ambiguous")
    monkeypatch.chdir(tmp_path)
    await knowledge.ingest(kb.pool, hash384, [Path("b/guide.md")], collection="ambiguous")
    monkeypatch.chdir(b)
    refused = await knowledge.remove_documents(kb.pool, ["guide.md"], collection="ambiguous")
    assert [f.status for f in refused.files] == ["failed"]
    assert "ambiguous" in refused.files[0].reason and "'b/guide.md'" in refused.files[0].reason
    stored = await fetch(kb.pool, "SELECT source FROM knowledge_documents WHERE collection = 'ambiguous' ORDER BY source")
    assert [r["source"] for r in stored] == ["b/guide.md", "guide.md"]
    by_name = await knowledge.remove_documents(kb.pool, ["b/guide.md"], collection="ambiguous")
    assert [(f.status, f.source) for f in by_name.files] == [("removed", "b/guide.md")]
    assert [r["source"] for r in await fetch(kb.pool, "SELECT source FROM knowledge_documents WHERE collection = 'ambiguous'")] == ["guide.md"]


async def test_two_files_of_one_name_from_two_folders_are_two_documents_and_a_moved_file_keeps_its_name(kb, tmp_path, hash384, monkeypatch):
    """``a/guide.md`` ingested from ``a`` and ``b/guide.md`` from ``b`` are both named "guide.md":
    the second replaced the first, which was lost from the knowledge base. The second is now named
    by its absolute path. A file moved (its old place gone) still takes its old name."""
    a, b, c = (tmp_path / n for n in "abc")
    for folder, words in ((a, "the heater"), (b, "the boiler")):
        folder.mkdir()
        (folder / "guide.md").write_text(f"# Guide\n\nHow to start {words}.")
    monkeypatch.chdir(a)
    await knowledge.ingest(kb.pool, hash384, [Path("guide.md")], collection="one-name")
    monkeypatch.chdir(b)
    second = await knowledge.ingest(kb.pool, hash384, [Path("guide.md")], collection="one-name")
    assert [(f.status, f.source) for f in second.files] == [("added", (b / "guide.md").resolve().as_posix())]
    stored = await fetch(kb.pool, "SELECT source FROM knowledge_documents WHERE collection = 'one-name' ORDER BY source")
    assert sorted(r["source"] for r in stored) == sorted(["guide.md", (b / "guide.md").resolve().as_posix()])
    c.mkdir()
    (a / "guide.md").rename(c / "guide.md")
    monkeypatch.chdir(c)
    moved = await knowledge.ingest(kb.pool, hash384, [Path("guide.md")], collection="one-name")
    assert [(f.status, f.source) for f in moved.files] == [("skipped-unchanged", "guide.md")]
