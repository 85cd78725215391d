"""User ids are refused where they carry the store's special characters (core.namespaces.check_user_id):
at key creation, at key verification (the HTTP API's and the LangGraph server's one gate), in the
CLI's --user, and in thread ownership, so nothing is half-written for them."""

from __future__ import annotations

import asyncio
import io
import sys
import uuid

import psycopg
import pytest

from storage import api_keys, thread_owners

# '*' is the wildcard of the store's list_namespaces; '.' joins namespace labels; the rest read as paths or are invisible.
SPECIAL = ["*", "a.b", "..", "../alice", "a/b", "a\\b", "a b", " alice", "a\tb", "a\nb", "a\x00b", "a\x1bb", "\u200b", ""]


@pytest.mark.parametrize("bad", SPECIAL)
async def test_a_key_cannot_be_created_for_a_user_id_with_the_stores_special_characters(backend, bad):
    with pytest.raises(ValueError, match="invalid user id"):
        await api_keys.create_key(backend.pool, bad)
    assert not [k for k in await api_keys.list_keys(backend.pool) if k.user_id == bad]


@pytest.fixture(scope="module")
def empty_database(new_database) -> str:
    """A database nothing has set up: a command refused before opening it leaves it empty."""
    return new_database("userids")


@pytest.mark.parametrize("bad", ["*", "a.b", "../alice"])
def test_keys_create_on_the_command_line_refuses_it_with_one_clear_line(bad, empty_database, monkeypatch, capsys):
    from app.cli.keys_command import main

    monkeypatch.setenv("DATABASE_URL", empty_database)
    with pytest.raises(SystemExit) as exit_:
        main(["create", "--user", bad])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert "invalid user id" in err and "Traceback" not in err


async def test_a_key_or_prefix_postgres_cannot_store_names_no_key_instead_of_failing(backend, monkeypatch, capsys):
    """`keys revoke` of an argument with a byte that is not UTF-8 (a lone surrogate to Python) was a traceback."""
    from app.cli.keys_command import main

    for unstorable in ("\udcff", "ma_\udcff", "\x00", "ma_a\x00b_secret"):
        assert await api_keys.revoke_key(backend.pool, unstorable) is False
        assert await api_keys.authenticate(backend.pool, f"ma_{unstorable}_secret") is None
    monkeypatch.setenv("DATABASE_URL", backend.url)
    assert await asyncio.to_thread(main, ["revoke", "\udcff"]) == 1
    err = capsys.readouterr().err
    assert "no active key with prefix" in err and "Traceback" not in err


async def test_a_key_stored_for_the_wildcard_user_before_the_rule_authenticates_no_one(backend):
    key = await api_keys.create_key(backend.pool, f"u{uuid.uuid4().hex[:8]}")
    async with backend.pool.connection() as conn:  # as a key created before the rule was
        await conn.execute("UPDATE memory_agent_api_keys SET user_id = '*' WHERE prefix = %s", (key.split("_")[1],))
    assert await api_keys.verify_key(backend.pool, key) is None


@pytest.mark.parametrize("bad", ["a.b", "../alice", "*"])
async def test_a_thread_gets_no_owner_row_for_an_unusable_user_id(backend, bad):
    thread_id = str(uuid.uuid4())
    with pytest.raises(ValueError):
        await thread_owners.claim_ownership(backend.pool, thread_id, bad)
    with pytest.raises(ValueError):
        await thread_owners.create(backend.pool, thread_id, bad)
    assert await thread_owners.owner_of(backend.pool, thread_id) is None


@pytest.mark.parametrize("bad", ["a.b", "../alice", "*"])
def test_cli_chat_refuses_the_user_id_before_anything_is_written(bad, empty_database, monkeypatch, capsys):
    from app.cli.main import main

    url = empty_database
    monkeypatch.setenv("DATABASE_URL", url)
    monkeypatch.setenv("MEMORY_AGENT_MODEL", "offline")
    monkeypatch.setattr(sys, "stdin", io.StringIO("hello\n"))
    with pytest.raises(SystemExit) as exit_:
        main(["chat", "--user", bad, "--new"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert "invalid user id" in err and "Traceback" not in err
    with psycopg.connect(url) as conn:  # the database was not even set up, so it holds no orphan owner row
        assert conn.execute("SELECT to_regclass('memory_agent_thread_owners')").fetchone()[0] is None


async def test_a_keys_last_use_is_written_once_a_minute_not_on_every_request(backend, monkeypatch):
    """Every request verified its key with an UPDATE of last_used_at: a write, and its commit, before
    each reply started. Now the row is written only when its last use is over a minute old, and a
    process that wrote it within the minute sends no statement for it."""
    key = await api_keys.create_key(backend.pool, f"u{uuid.uuid4().hex[:8]}")
    prefix = key.split("_")[1]

    async def row():
        async with backend.pool.connection() as conn:
            return await (
                await conn.execute("SELECT xmin::text AS version, last_used_at FROM memory_agent_api_keys WHERE prefix = %s", (prefix,))
            ).fetchone()

    assert (await row())["last_used_at"] is None
    assert await api_keys.verify_key(backend.pool, key) is not None
    first = await row()
    assert first["last_used_at"] is not None  # the first use is recorded at once
    statements: list[str] = []
    real_execute = psycopg.AsyncConnection.execute

    async def counted(self, query, *args, **kwargs):
        statements.append(str(query))
        return await real_execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.AsyncConnection, "execute", counted)
    for _ in range(3):
        assert await api_keys.verify_key(backend.pool, key) is not None
    assert await row() == first  # no new row version: nothing written
    assert sum("key_hash" in q for q in statements) == 3 and not any("last_used_at = now()" in q for q in statements)  # nor asked
    async with backend.pool.connection() as conn:
        await conn.execute("UPDATE memory_agent_api_keys SET last_used_at = now() - interval '2 minutes' WHERE prefix = %s", (prefix,))
    later = api_keys._clock() + api_keys.LAST_USE_EVERY
    monkeypatch.setattr(api_keys, "_clock", lambda: later)  # a minute on
    assert await api_keys.verify_key(backend.pool, key) is not None
    assert (await row())["last_used_at"] > first["last_used_at"]  # an older last use moves on
