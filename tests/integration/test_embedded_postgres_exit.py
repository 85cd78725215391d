"""The embedded Postgres (pgserver) stops when the last process using it exits cleanly,
also after an earlier process was killed and never let go of it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.slow  # processes killed around the embedded Postgres

START_AND_WAIT = """
import sys, time
from pathlib import Path
from storage.postgres import start_embedded_postgres
start_embedded_postgres(Path(sys.argv[1]))
print("ready", flush=True)
time.sleep(600)
"""

START_QUERY_AND_EXIT = """
import sys
from pathlib import Path
import psycopg
from storage.postgres import start_embedded_postgres
url = start_embedded_postgres(Path(sys.argv[1]))
with psycopg.connect(url) as conn:
    assert conn.execute("SELECT 1").fetchone() == (1,)
"""


def postmaster(pgdata: Path) -> psutil.Process | None:
    pid_file = pgdata / "postmaster.pid"
    if not pid_file.exists():
        return None
    try:
        process = psutil.Process(int(pid_file.read_text().split()[0]))
    except psutil.NoSuchProcess:
        return None
    return process if process.is_running() and process.status() != psutil.STATUS_ZOMBIE else None


def test_a_clean_exit_stops_the_server_after_an_earlier_process_was_killed():
    data = Path(tempfile.mkdtemp(prefix="ma-pgx-"))  # short: the socket lives in it
    pgdata = data / "pgdata"
    try:
        # An unclean exit: a process starts the embedded Postgres and is killed.
        killed = subprocess.Popen([sys.executable, "-c", START_AND_WAIT, str(data)], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
        assert killed.stdout.readline().strip() == "ready"
        killed.kill()
        killed.wait(timeout=30)
        server = postmaster(pgdata)
        assert server is not None  # Postgres outlives it,
        assert json.loads((pgdata / ".handle_pids.json").read_text()) == [killed.pid]  # and its dead pid stays listed

        # A clean run afterwards: joins the running server, uses it, exits normally.
        clean = subprocess.run([sys.executable, "-c", START_QUERY_AND_EXIT, str(data)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
        assert clean.returncode == 0, clean.stderr

        deadline = time.monotonic() + 30
        while postmaster(pgdata) is not None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert postmaster(pgdata) is None, "the clean exit left the embedded Postgres running"
        assert json.loads((pgdata / ".handle_pids.json").read_text()) == []
    finally:
        left = postmaster(pgdata)
        if left is not None:
            left.kill()
        shutil.rmtree(data, ignore_errors=True)


def test_a_data_folder_with_a_space_and_other_letters_starts_and_stops():
    """pg_ctl passes the socket folder (the data folder) to postgres through a shell, unquoted: a
    space, as in macOS' default ".../Application Support/memory-agent", split it and the server never
    started ("postgres: invalid argument"), and the error said to delete the folder."""
    data = Path(tempfile.mkdtemp(prefix="ma pgx ä "))
    pgdata = data / "pgdata"
    try:
        run = subprocess.run([sys.executable, "-c", START_QUERY_AND_EXIT, str(data)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        deadline = time.monotonic() + 30
        while postmaster(pgdata) is not None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert postmaster(pgdata) is None, "the embedded Postgres outlived its only process"
    finally:
        left = postmaster(pgdata)
        if left is not None:
            left.kill()
        shutil.rmtree(data, ignore_errors=True)


def test_a_server_that_cannot_start_points_at_its_log_and_never_advises_erasing_the_memory(tmp_path):
    """Whatever the cause, the error said "Delete the folder to start afresh (this erases memory)"; a
    data folder with a space (5abb23a) was such a cause, and its memory was sound."""
    from core.errors import DatabaseUnreachable
    from storage.postgres import start_embedded_postgres

    (tmp_path / "data" / "pgdata").mkdir(parents=True)
    (tmp_path / "data" / "pgdata" / "PG_VERSION").write_text("18\n")  # a folder of this version, missing the rest
    with pytest.raises(DatabaseUnreachable) as failed:
        start_embedded_postgres(tmp_path / "data")
    said = str(failed.value)
    assert "Delete" not in said and "erases memory" not in said
    assert f"Its log, {tmp_path / 'data' / 'pgdata' / 'log'}, says why" in said and "move the folder aside" in said
