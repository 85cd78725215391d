"""``memory-agent import`` in a process of its own, held in its third exchange: its indexing of the
third exchange waits for ever, past the two exchanges its import row counts, with that exchange's
first checkpoints written (a fast machine imported all 30 messages of a history before a poll could
see four). The tests then interrupt it (Ctrl-C) or kill it."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

from memory import chat_admin
from storage import thread_owners

REPO_ROOT = Path(__file__).resolve().parents[2]

HELD_IN_THE_THIRD_EXCHANGE = """
import asyncio, sys
from memory import episodes
real = episodes.index_for_run
async def held(store, owner, thread_id, messages, **kwargs):
    if len(messages) > 4:
        await asyncio.Event().wait()
    return await real(store, owner, thread_id, messages, **kwargs)
episodes.index_for_run = held
from app.cli.main import main
sys.exit(main())
"""


def cli_env(backend) -> dict:
    """The CLI's environment: the test's database, the offline model, nothing from a model hub."""
    return {**os.environ, "DATABASE_URL": backend.pool.conninfo, "HF_HUB_OFFLINE": "1", "MEMORY_AGENT_MODEL": "offline"}


def held_cli_import(backend, path: Path, user_id: str, *, stderr=subprocess.PIPE) -> subprocess.Popen:
    """``memory-agent import path --user user_id``, started, to be held in its third exchange."""
    return subprocess.Popen(
        [sys.executable, "-c", HELD_IN_THE_THIRD_EXCHANGE, "import", str(path), "--user", user_id], cwd=REPO_ROOT, env=cli_env(backend),
        stdout=subprocess.DEVNULL, stderr=stderr, text=True,
    )


async def interrupted_in_the_third_exchange(backend, path: Path, user_id: str, chat_id: str | None = None) -> tuple[int, str]:
    """The held import, interrupted with Ctrl-C once its row counts two exchanges (of ``chat_id``, else
    of the user's first chat): its exit status and what it said on stderr."""
    process = held_cli_import(backend, path, user_id)
    try:
        for _ in range(1200):  # up to 4 min on a loaded machine
            threads = [chat_id] if chat_id else await thread_owners.threads_of(backend.pool, user_id)
            row = (await chat_admin.import_states(backend.pool, user_id, threads)).get(threads[0]) if threads else None
            if (row is not None and row.imported >= 4) or process.poll() is not None:
                break
            await asyncio.sleep(0.2)
        assert process.poll() is None, "the import did not get going"
        process.send_signal(signal.SIGINT)
        _, err = await asyncio.to_thread(process.communicate, timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    return process.returncode, err
