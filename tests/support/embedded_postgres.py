"""Throwaway embedded Postgres servers (pgserver) for tests, and URLs of databases on them."""

from __future__ import annotations

import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Awaitable, Callable, Iterator, TypeVar

import psycopg

T = TypeVar("T")


@contextmanager
def throwaway_postgres(prefix: str = "ma-pg-") -> Iterator:
    """A pgserver in a fresh temporary folder, deleted afterwards.

    The folder path is kept short: Postgres' unix socket lives in it (~107 byte limit).
    """
    import pgserver

    directory = Path(tempfile.mkdtemp(prefix=prefix))
    server = pgserver.get_server(directory, cleanup_mode="delete")
    try:
        yield server
    finally:
        server.cleanup()
        shutil.rmtree(directory, ignore_errors=True)


def with_database(url: str, dbname: str) -> str:
    """``url`` pointing at database ``dbname`` instead."""
    info = psycopg.conninfo.conninfo_to_dict(url)
    info["dbname"] = dbname
    return psycopg.conninfo.make_conninfo(**info)


@contextmanager
def throwaway_database(prefix: str = "ma-pg-") -> Iterator[str]:
    """The URL of a new, empty database on a :func:`throwaway_postgres` (the benchmarks' default when
    no ``--database-url`` is given); the server and its folder go on leaving the block."""
    import uuid

    with throwaway_postgres(prefix) as pg:
        name = f"db_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(pg.get_uri(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        yield with_database(pg.get_uri(), name)


async def on_database(database_url: str | None, prefix: str, run: Callable[[str], Awaitable[T]]) -> T:
    """``run(url)`` on ``database_url`` when given, else on a :func:`throwaway_database` (the
    benchmarks' ``--database-url``)."""
    if database_url:
        return await run(database_url)
    with throwaway_database(prefix) as url:
        return await run(url)
