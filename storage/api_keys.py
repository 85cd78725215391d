"""API keys: a bearer token maps to a user. Only a hash of each key is stored.

Keys look like ``ma_<prefix>_<secret>``; the short prefix is kept in clear so a key
can be listed and revoked without revealing it. Verification hashes the presented
key with SHA-256 (keys are long random strings, so a slow hash adds nothing) and
compares in constant time. It reads the user's forget generation in the same statement
(:func:`authenticate`): what a request writes later is checked against it (storage.owner_forgets).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from datetime import datetime

from psycopg_pool import AsyncConnectionPool

import logging

from core.namespaces import check_user_id, user_id_problem
from core.text_validation import label_problem, unstorable_reason
from storage import owner_forgets

log = logging.getLogger(__name__)

LAST_USE_EVERY = 60.0
"""Seconds between two writes of a key's ``last_used_at`` (``keys list`` shows minutes)."""
_written: dict[str, float] = {}  # prefix → when this process last wrote it (time.monotonic)
_clock = time.monotonic  # a module attribute, so a test can move time alone

CREATE_TABLE = """
CREATE TABLE IF NOT EXISTS memory_agent_api_keys (
    prefix text PRIMARY KEY,
    key_hash text NOT NULL,
    user_id text NOT NULL,
    label text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at timestamptz
)
"""


@dataclass(frozen=True)
class ApiKeyInfo:
    prefix: str
    user_id: str
    label: str
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


@dataclass(frozen=True)
class Caller:
    """Whom a key authenticates, and the user's forget generation the key was valid under."""

    user_id: str
    generation: int


def _hash(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


async def setup(pool: AsyncConnectionPool) -> None:
    async with pool.connection() as conn:
        await conn.execute(CREATE_TABLE)
        await conn.execute(owner_forgets.CREATE)  # read with every key


async def create_key(pool: AsyncConnectionPool, user_id: str, label: str = "") -> str:
    """Create a key for ``user_id`` and return it: the only time it is shown."""
    check_user_id(user_id)
    if label and (problem := label_problem(label)) is not None:  # `keys list` prints it on a terminal
        raise ValueError(f"invalid key label: {problem}")
    prefix = secrets.token_hex(4)
    key = f"ma_{prefix}_{secrets.token_urlsafe(24)}"
    await setup(pool)
    async with pool.connection() as conn:
        await conn.execute(
            "INSERT INTO memory_agent_api_keys (prefix, key_hash, user_id, label) VALUES (%s, %s, %s, %s)",
            (prefix, _hash(key), user_id, label),
        )
    return key


async def verify_key(pool: AsyncConnectionPool, key: str) -> str | None:
    """The user a key belongs to, or None for an unknown, malformed or revoked key."""
    caller = await authenticate(pool, key)
    return caller.user_id if caller is not None else None


async def authenticate(pool: AsyncConnectionPool, key: str) -> Caller | None:
    """The user a key belongs to and their forget generation, read in one statement (a forget-me
    deletes the keys in the transaction that bumps the generation: a key that still matches was
    valid under the generation read with it); None for an unknown, malformed or revoked key."""
    parts = key.split("_", 2)
    if len(parts) != 3 or parts[0] != "ma" or unstorable_reason(parts[1]) is not None:
        return None
    async with pool.connection() as conn:
        row = await (
            await conn.execute(
                "SELECT k.key_hash, k.user_id, k.revoked_at, COALESCE(f.generation, 0) AS generation "
                f"FROM memory_agent_api_keys k LEFT JOIN {owner_forgets.TABLE} f ON f.owner = k.user_id WHERE k.prefix = %s",
                (parts[1],),
            )
        ).fetchone()
        if row is None or row["revoked_at"] is not None or not hmac.compare_digest(row["key_hash"], _hash(key)):
            return None
        if (problem := user_id_problem(row["user_id"])) is not None:
            # A key created before user ids were checked (e.g. for "*", the store's wildcard) is not honoured.
            log.warning("API key %s refused: its user id %r is not usable (%s)", parts[1], row["user_id"][:60], problem)
            return None
        # At most once a minute per key (`keys list` shows minutes): a write on every request cost
        # each turn a commit, and its WAL flush, before the reply started; and a process that wrote
        # it within the minute does not even ask (a statement before every reply otherwise). So the
        # time shown may be up to two minutes old.
        now = _clock()
        if now - _written.get(parts[1], -LAST_USE_EVERY) >= LAST_USE_EVERY:
            await conn.execute(
                "UPDATE memory_agent_api_keys SET last_used_at = now() "
                "WHERE prefix = %s AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')",
                (parts[1],),
            )
            if len(_written) >= 10_000:  # bounded: many keys, each written again at most a minute early
                _written.clear()
            _written[parts[1]] = now
    return Caller(row["user_id"], row["generation"])


async def list_keys(pool: AsyncConnectionPool, user_id: str | None = None) -> list[ApiKeyInfo]:
    await setup(pool)
    async with pool.connection() as conn:
        rows = await (
            await conn.execute(
                "SELECT prefix, user_id, label, created_at, last_used_at, revoked_at FROM memory_agent_api_keys "
                "WHERE %(u)s::text IS NULL OR user_id = %(u)s ORDER BY created_at",
                {"u": user_id},
            )
        ).fetchall()
    return [ApiKeyInfo(**r) for r in rows]


def key_prefix(given: str) -> str:
    """The prefix a key is listed and revoked by, from the prefix itself or any start of the key
    as it was shown ("ma_51ddc24b", or the whole key): the key shown starts "ma_<prefix>_"."""
    given = given.strip()
    if given.startswith("ma_"):
        return given[3:].split("_", 1)[0]
    return given


async def revoke_key(pool: AsyncConnectionPool, prefix: str) -> bool:
    """Revoke the active key ``prefix`` names (:func:`key_prefix`: "ma_51ddc24b" or the whole key too)."""
    prefix = key_prefix(prefix)
    if unstorable_reason(prefix) is not None:  # no key has it (`keys revoke $'\xff'` was a traceback)
        return False
    async with pool.connection() as conn:
        cur = await conn.execute(
            "UPDATE memory_agent_api_keys SET revoked_at = now() WHERE prefix = %s AND revoked_at IS NULL", (prefix,)
        )
        return cur.rowcount == 1


async def delete_user_keys(pool: AsyncConnectionPool, user_id: str) -> int:
    async with pool.connection() as conn:
        return await delete_user_keys_on(conn, user_id)


async def delete_user_keys_on(conn, user_id: str) -> int:
    """:func:`delete_user_keys` in the caller's transaction (forget-me's first step)."""
    cur = await conn.execute("DELETE FROM memory_agent_api_keys WHERE user_id = %s", (user_id,))
    return cur.rowcount
