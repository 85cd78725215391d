"""`memory-agent serve`: the chat API and the web page, on uvicorn with several workers.

Before the workers start, this process prepares the database once (schema set-up in
one place rather than racing in every worker) and, with auth on, makes sure the
``local`` user has an API key: on the first start it creates one and prints it with
a link that hands it to the web page (``/#key=…``: the fragment never leaves the
browser; the page keeps the key in localStorage). Later starts print no key: create
another with ``memory-agent keys create --user local``. The page also asks for a key
when it has none. ``MEMORY_AGENT_AUTH=off`` turns keys off (every caller is ``local``).

Metrics: PROMETHEUS_MULTIPROC_DIR is set to a fresh temporary directory (unless
already set) so that /metrics on any worker reports the sum over all workers.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from core.cli_arguments import port_arg
from app.http.cross_origin import cors_origins

LOCAL_USER = "local"
POOL_SIZE_ENV = "MEMORY_AGENT_POOL_SIZE"  # how serve tells its workers their pool's size
DEFAULT_POOL_SIZE = 20
# Besides its pool, each worker keeps one connection for its runs' heartbeat (app.runs.active_runs).
CONNECTIONS_BESIDES_POOL = 1
LOCAL_KEY_LABEL = "web page (created by memory-agent serve)"


def configured_pool_size() -> int:
    """The documented ``MEMORY_AGENT_POOL_SIZE`` (unset or empty: the default), read alike by serve
    and by its workers; a ValueError naming it when it is no whole number."""
    configured = os.environ.get(POOL_SIZE_ENV, "").strip() or str(DEFAULT_POOL_SIZE)
    if not configured.isdigit():
        raise ValueError(f"{POOL_SIZE_ENV} must be a whole number of connections, not {configured!r}")
    return int(configured)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memory-agent serve", description="Serve the chat API (FastAPI) and the web page.")
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=port_arg, default=8000, help="port (default 8000)")
    parser.add_argument("--workers", type=int, default=2, help="uvicorn worker processes (default 2)")
    parser.add_argument(
        "--pool-size", type=int, default=None,
        help=f"database connections per worker, opened at start (default ${POOL_SIZE_ENV}, else {DEFAULT_POOL_SIZE})",
    )
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    return parser


async def prepare_database(url: str, auth_on: bool) -> str | None:
    """Set up every table once; return a new key for the local user if it never had one."""
    from storage import api_keys
    from memory.backend import open_memory

    async with open_memory(url, max_pool_size=2) as backend:
        if not auth_on:
            return None
        if await api_keys.list_keys(backend.pool, LOCAL_USER):  # revoked ones too: a restart must not undo a revocation
            return None
        return await api_keys.create_key(backend.pool, LOCAL_USER, LOCAL_KEY_LABEL)


async def connections_short(url: str, location: str, workers: int, pool_size: int) -> str | None:
    """Why the workers cannot start, when they would need more connections than Postgres has left:
    each opens its whole pool at start, and one that cannot fails after a wait with no clear reason."""
    from storage.postgres import connection_room

    needed = workers * (pool_size + CONNECTIONS_BESIDES_POOL)
    room = await connection_room(url)
    if needed <= room.free:
        return None
    reserved = f", {room.reserved} reserved for superusers" if room.reserved else ""
    return (
        f"{workers} workers × ({pool_size} pooled + {CONNECTIONS_BESIDES_POOL} heartbeat) = {needed} connections, but Postgres "
        f"({location}) accepts {room.free} more (max_connections {room.max_connections}, {room.in_use} in use{reserved}). "
        "Lower --pool-size or --workers, or raise max_connections."
    )


def metrics_directory() -> tuple[Path, bool]:
    """The multiprocess metrics directory, emptied; and whether we created it (and remove it at exit)."""
    configured = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if configured:
        path = Path(configured)
        path.mkdir(parents=True, exist_ok=True)
        for stale in path.glob("*.db"):  # figures of an earlier run would be added in
            stale.unlink()
        return path, False
    path = Path(tempfile.mkdtemp(prefix="memory-agent-metrics-"))
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(path)
    return path, True


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.workers < 1:
        print("error: --workers must be at least 1", file=sys.stderr)
        return 2
    if args.pool_size is None:
        try:
            args.pool_size = configured_pool_size()
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    if args.pool_size < 1:
        print(f"error: the pool size (--pool-size or {POOL_SIZE_ENV}) must be at least 1", file=sys.stderr)
        return 2
    try:
        cors_origins()  # said once here, not as a traceback from each worker
        from app.http.connection_deadlines import configured_deadlines  # its import reads them: a bad one raises there

        configured_deadlines()
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    # Before anything imports core.metrics: a metric made without the directory stays in this
    # process' memory, and with one worker (run in this process) /metrics would show nothing.
    metrics_dir, created = metrics_directory()
    try:
        return _serve(args)
    finally:
        if created:
            shutil.rmtree(metrics_dir, ignore_errors=True)


def _serve(args) -> int:
    import uvicorn

    from app.http.access_log import log_config
    from app.http.auth import auth_enabled
    from storage.postgres import database_url, describe_location

    url = database_url()  # starts the embedded Postgres when DATABASE_URL is unset
    location = describe_location(url)
    os.environ["DATABASE_URL"] = url  # the workers use this very database
    os.environ[POOL_SIZE_ENV] = str(args.pool_size)
    short = asyncio.run(connections_short(url, location, args.workers, args.pool_size))
    if short:  # before a key is made: a key shown once must not be made and then not shown
        print(f"error: {short}", file=sys.stderr)
        return 2
    new_key = asyncio.run(prepare_database(url, auth_enabled()))

    base = f"http://{args.host}:{args.port}"
    print(f"memory-agent serve: {base}  ({args.workers} workers, {location})", flush=True)
    if not auth_enabled():
        print("Auth is off (MEMORY_AGENT_AUTH=off): every caller is user 'local'.", flush=True)
    elif new_key:
        print(f"API key for user '{LOCAL_USER}' (shown once):\n    {new_key}", flush=True)
        print(f"Open the web page with it: {base}/#key={new_key}", flush=True)
    else:
        print(
            f"The web page asks for an API key. User '{LOCAL_USER}' has had one (`memory-agent keys list --user {LOCAL_USER}`); "
            f"make another with `memory-agent keys create --user {LOCAL_USER}`.",
            flush=True,
        )
    # uvicorn re-raises SIGTERM once it has shut down; turn it into an exit that runs `finally`.
    signal.signal(signal.SIGTERM, _exit_on_signal)
    try:
        uvicorn.run(
            "app.http.app:create_app",
            factory=True,
            host=args.host,
            port=args.port,
            workers=args.workers,
            log_level=args.log_level,
            log_config=log_config(),  # query-string values (a misplaced key) never reach the access log
            http="app.http.connection_deadlines:DeadlineHttpProtocol",  # slow headers and stalled bodies are cut off
            timeout_graceful_shutdown=15,
        )
    except KeyboardInterrupt:
        return 130
    return 0


def _exit_on_signal(signum, frame) -> None:
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    sys.exit(main())
