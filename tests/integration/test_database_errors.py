"""Database failures give errors that say what to do; embeddings are never mixed."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
import pytest

from memory.backend import open_memory
from embeddings import resolve_embeddings
from core.errors import DatabaseUnreachable, EmbeddingMismatch, ExtensionPermissionDenied, PgvectorMissing
from storage.postgres import open_pool, prepare_database
from memory.reindex import reindex
from core.schemas import ExtractionResult, NewFact
from memory.writer.extraction import apply_extraction
from memory.user_memory import search_facts

DEBIAN_PG15 = Path("/usr/lib/postgresql/15/bin")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_unreachable_postgres_names_the_url_and_what_to_do():
    url = f"postgresql://someone:secret@127.0.0.1:{free_port()}/memory"
    with pytest.raises(DatabaseUnreachable) as err:
        await prepare_database(url)
    message = str(err.value)
    assert "Cannot connect to Postgres at postgresql://someone:***@127.0.0.1" in message
    assert "secret" not in message  # the password is never printed
    assert "unset DATABASE_URL" in message


async def test_a_user_without_rights_to_create_pgvector_is_told_to_ask_a_superuser(server_url, new_database):
    url = new_database("noext")
    role = f"limited_{os.getpid()}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP ROLE IF EXISTS "{role}"')
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
    info = psycopg.conninfo.conninfo_to_dict(url)
    info["user"] = role
    with pytest.raises(ExtensionPermissionDenied) as err:
        await prepare_database(psycopg.conninfo.make_conninfo(**info))
    assert f"User '{role}' may not create the pgvector extension" in str(err.value)
    assert "CREATE EXTENSION vector" in str(err.value)


@pytest.fixture(scope="module")
def postgres15_without_pgvector():
    """Debian's Postgres 15 (no pgvector package installed), run as the postgres user."""
    if not (DEBIAN_PG15 / "initdb").exists() or shutil.which("runuser") is None:
        pytest.skip("Debian's postgresql-15 is not installed (.ci/run installs it)")
    directory = Path(tempfile.mkdtemp(prefix="ma-pg15-"))
    shutil.chown(directory, "postgres", "postgres")
    port = free_port()
    as_postgres = ["runuser", "-u", "postgres", "--"]
    subprocess.run([*as_postgres, str(DEBIAN_PG15 / "initdb"), "-D", str(directory / "data"), "-A", "trust"], check=True, capture_output=True)
    subprocess.run(
        [*as_postgres, str(DEBIAN_PG15 / "pg_ctl"), "-D", str(directory / "data"), "-l", str(directory / "log"), "-w",
         "-o", f"-p {port} -k {directory} -c listen_addresses=''", "start"],
        check=True,
        capture_output=True,
    )
    try:
        yield f"postgresql://postgres@/postgres?host={directory}&port={port}"
    finally:
        subprocess.run([*as_postgres, str(DEBIAN_PG15 / "pg_ctl"), "-D", str(directory / "data"), "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.slow  # initdb and start a Postgres 15
async def test_postgres_without_pgvector_is_refused_with_install_instructions(postgres15_without_pgvector):
    with pytest.raises(PgvectorMissing) as err:
        await prepare_database(postgres15_without_pgvector)
    assert "pgvector extension is not available" in str(err.value)
    assert "unset DATABASE_URL" in str(err.value)


@pytest.mark.slow
async def test_other_embeddings_are_refused_until_reindex_then_recall_works_again(new_database):
    url = new_database("emb")
    small, large = resolve_embeddings("hash:16"), resolve_embeddings("hash:24")
    async with open_memory(url, small) as backend:
        await apply_extraction(backend.store, "dana", ExtractionResult(new_facts=[NewFact(text="Lives in Haifa")]))

    with pytest.raises(EmbeddingMismatch) as err:
        async with open_memory(url, large):
            pass
    message = str(err.value)
    assert "hash:16 (16 dims)" in message and "hash:24 (24 dims)" in message
    assert "memory-agent reindex" in message

    await prepare_database(url)
    pool = await open_pool(url)
    try:
        started = time.perf_counter()
        counts = await reindex(pool, large)
        assert counts["store_items"] >= 1
        assert time.perf_counter() - started < 60
    finally:
        await pool.close()

    async with open_memory(url, large) as backend:
        hits = await search_facts(backend.store, "dana", "Lives in Haifa")
        assert hits and hits[0][0].text == "Lives in Haifa"
        async with backend.pool.connection() as conn:
            row = await (await conn.execute("SELECT vector_dims(embedding) AS d FROM store_vectors LIMIT 1")).fetchone()
        assert row["d"] == 24


@pytest.mark.slow
async def test_reindex_works_on_a_database_no_chat_has_opened_and_leaves_it_ready_for_one(new_database):
    """Before, `memory-agent reindex` there stopped with UndefinedTable (no thread owners' table)."""
    from memory.backend import make_store
    from storage import episodes as episode_table

    url = new_database("partial")
    small, large = resolve_embeddings("hash:16"), resolve_embeddings("hash:24")
    await prepare_database(url)
    pool = await open_pool(url)
    try:  # a database with the store and the index of what was said only, as an eval's tools leave one
        await make_store(pool, small).setup()
        await episode_table.setup(pool, small.dims)
        counts = await reindex(pool, large)
    finally:
        await pool.close()
    assert counts["messages"] == 0

    async with open_memory(url, large) as backend:  # the new embeddings are the recorded ones now
        await apply_extraction(backend.store, "dana", ExtractionResult(new_facts=[NewFact(text="Lives in Haifa")]))
        hits = await search_facts(backend.store, "dana", "Lives in Haifa")
        assert hits and hits[0][0].text == "Lives in Haifa"


@pytest.mark.slow
async def test_reindex_of_the_episodes_alone_refuses_a_model_other_than_the_recorded_one(new_database, minilm):
    """Before, only the vectors' size was checked: a model of the same size was mixed in silently."""
    from memory.reindex import reindex_episodes

    url = new_database("epsame")
    same_size = resolve_embeddings(f"hash:{minilm.dims}")
    async with open_memory(url, same_size):
        pass
    pool = await open_pool(url)
    try:
        with pytest.raises(EmbeddingMismatch) as err:
            await reindex_episodes(pool, minilm)
    finally:
        await pool.close()
    assert "memory-agent reindex" in str(err.value)


@pytest.mark.parametrize(
    "setting, value, says",
    [
        ("MEMORY_AGENT_MINILM_DIR", "{empty}", "does not contain model.safetensors"),
        ("MEMORY_AGENT_EMBEDDINGS", "bogus", "could not initialise embeddings 'bogus'"),
    ],
)
def test_embeddings_that_cannot_be_loaded_are_said_as_an_error_not_a_traceback(
    setting, value, says, new_database, tmp_path, monkeypatch, capsys
):
    """EmbeddingModelUnavailable was a RuntimeError, so every command showed it as a traceback."""
    from app.cli.main import main

    monkeypatch.setenv("DATABASE_URL", new_database("noweights"))
    monkeypatch.setenv(setting, value.format(empty=tmp_path))
    assert main(["doctor"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and says in err and "Traceback" not in err


@pytest.mark.parametrize(
    "url",
    [
        "host=127.0.0.1 port={port} user=someone password=s3cret dbname=memory",  # libpq's key/value form
        "host=127.0.0.1 port={port} user=someone password='s3cret with spaces' dbname=memory",
        "postgresql://someone@127.0.0.1:{port}/memory?password=s3cret&sslmode=disable",
    ],
)
async def test_a_password_given_as_a_parameter_is_never_printed(url):
    """Only postgresql://user:password@ was masked: these forms were printed whole, password and all."""
    with pytest.raises(DatabaseUnreachable) as err:
        await prepare_database(url.format(port=free_port()))
    assert "s3cret" not in str(err.value) and "password=***" in str(err.value)
