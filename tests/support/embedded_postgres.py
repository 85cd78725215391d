"""Throwaway embedded Postgres servers (pgserver) for tests, and URLs of databases on them."""

from __future__ import annotations

import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import psycopg


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
