"""`memory-agent studio`: LangGraph Studio on our Postgres, through ``langgraph dev``.

Runs ``langgraph dev`` of this environment on the repository's langgraph.json
(graph without its own persistence; our saver, store and API-key auth from
``app/studio/backend.py`` and ``app/studio/auth.py``), offline-safe: no CLI
analytics, no version check, no LangSmith tracing unless ``LANGSMITH_API_KEY`` is
set, no browser opened. Prints the Studio, API and API-docs URLs and a LangGraph SDK line, on the
port the server really has, once it answers, and passes Ctrl-C / SIGTERM / SIGHUP on to it (as SIGINT, see ``forward``).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from core.cli_arguments import port_arg
from core.auth_user import STUDIO_USER_ENV, studio_user
from core.namespaces import user_id_arg
from storage.postgres import data_dir, redact

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIG = REPO_ROOT / "langgraph.json"
DEFAULT_PORT = 2024
STUDIO_ORIGIN = "https://smith.langchain.com"
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memory-agent studio",
        description="Serve the agent with `langgraph dev` on our Postgres and open it in LangGraph Studio.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=port_arg, default=None, help=f"port (default: {DEFAULT_PORT}, or a free one if it is taken)")
    parser.add_argument(
        "--user",
        type=user_id_arg,
        help="the memory user Studio and key-less requests act as (default: $MEMORY_AGENT_STUDIO_USER, else 'studio'; "
        "'local' shares the CLI's and the web page's memory)",
    )
    parser.add_argument(
        "--reload",
        action="store_true",
        help="restart the server when code changes (its worker processes skip exit hooks, so an embedded "
        "Postgres stays running after the studio stops)",
    )
    parser.add_argument(
        "--detect-blocking",
        action="store_true",
        help="let langgraph dev fail runs that block the event loop (off by default: loading the embedding model on first use reads files)",
    )
    return parser


def langgraph_command() -> list[str]:
    """``langgraph`` of this interpreter's environment (the .venv's bin dir)."""
    script = Path(sys.executable).parent / "langgraph"
    return [str(script)] if script.exists() else [sys.executable, "-m", "langgraph_cli"]


def port_is_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


class PortInUse(RuntimeError):
    pass


def choose_port(host: str, requested: int | None) -> int:
    """The requested port (an error if taken), else 2024, else any free one.

    Checked here because ``langgraph dev`` silently moves to another port, which
    would make the URLs printed for Studio wrong.
    """
    if requested is not None:
        if not port_is_free(host, requested):
            raise PortInUse(f"port {requested} on {host} is in use; pass another --port")
        return requested
    if port_is_free(host, DEFAULT_PORT):
        return DEFAULT_PORT
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def server_env(base: dict[str, str]) -> dict[str, str]:
    env = dict(base)
    env["LANGGRAPH_CLI_NO_ANALYTICS"] = "1"
    env["LANGGRAPH_NO_VERSION_CHECK"] = "true"
    if not env.get("LANGSMITH_API_KEY"):
        env["LANGSMITH_TRACING"] = "false"  # tracing without a key would only retry and warn
    return env


def server_command(host: str, port: int, *, reload: bool, detect_blocking: bool) -> list[str]:
    command = [*langgraph_command(), "dev", "--config", str(CONFIG), "--host", host, "--port", str(port), "--no-browser"]
    if not reload:
        command.append("--no-reload")
    if not detect_blocking:
        command.append("--allow-blocking")
    return command


def urls(host: str, port: int) -> tuple[str, str, str]:
    """API base, Studio and API-docs URLs (a wildcard host is reached through loopback)."""
    reachable = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    if ":" in reachable:
        reachable = f"[{reachable}]"
    base = f"http://{reachable}:{port}"
    return base, f"{STUDIO_ORIGIN}/studio/?baseUrl={base}", f"{base}/docs"


def ready_text(host: str, port: int, *, asked: int | None = None) -> str:
    """What is printed once the server answers: the URLs and a LangGraph SDK line, all on the port
    the server really has (2024 when free, another one otherwise; the docs say to use these).
    ``asked``: the port given with --port, which is no move from 2024."""
    base_url, studio_url, docs_url = urls(host, port)
    moved = f"   (port {asked or DEFAULT_PORT} was taken)" if port != (asked or DEFAULT_PORT) else ""
    return (
        f"\n  Studio:   {studio_url}\n  API:      {base_url}{moved}\n  API docs: {docs_url}\n"
        f'  SDK:      get_client(url="{base_url}")   # + headers={{"Authorization": "Bearer <key>"}} to act as a key\'s user\n'
    )


def describe_memory(env: dict[str, str]) -> str:
    if env.get("DATABASE_URL"):
        return f"DATABASE_URL {redact(env['DATABASE_URL'])}"
    return f"embedded Postgres in {data_dir() / 'pgdata'}"


def dev_auth_mode(env: dict[str, str]) -> str:
    """The auth mode app/studio/auth.py will apply under ``langgraph dev``; ValueError if misspelt."""
    from app.studio.auth import auth_mode

    return auth_mode({**env, "LANGSMITH_LANGGRAPH_API_VARIANT": "local_dev"})


def describe_auth(mode: str, user: str) -> str:
    if mode == "required":
        return "required: every request needs 'Authorization: Bearer <key>' (memory-agent keys create --user U); Studio is refused"
    return f"optional: Studio and requests without a key act as user '{user}'; API keys act as their user"


def wait_until_ready(process: subprocess.Popen, base_url: str, *, hint_after: float = 60) -> bool:
    """Poll ``/ok`` until it answers (True) or the server exits (False)."""
    started = time.monotonic()
    hinted = False
    while process.poll() is None:
        try:
            with urllib.request.urlopen(f"{base_url}/ok", timeout=2) as response:
                if response.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            pass
        if not hinted and time.monotonic() - started > hint_after:
            print("  still starting… (the first start of the embedded Postgres can take a minute)", flush=True)
            hinted = True
        time.sleep(0.25)
    return False


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not CONFIG.exists():
        print(f"error: {CONFIG} not found: `memory-agent studio` runs from a checkout of the project.", file=sys.stderr)
        return 2
    env = server_env(dict(os.environ))
    if args.user is not None:
        env[STUDIO_USER_ENV] = args.user.strip()
    try:
        mode = dev_auth_mode(env)
        user = studio_user(env)
    except ValueError as exc:  # a misspelt MEMORY_AGENT_AUTH, an unusable user id
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        port = choose_port(args.host, args.port)
    except PortInUse as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    base_url = urls(args.host, port)[0]
    command = server_command(args.host, port, reload=args.reload, detect_blocking=args.detect_blocking)

    print(f"Starting langgraph dev on {base_url} …", flush=True)
    print(f"  memory: {describe_memory(env)}")
    print(f"  auth:   {describe_auth(mode, user)}", flush=True)
    if args.host not in LOOPBACK and mode == "optional":
        print(
            "  warning: listening beyond this machine with optional auth: requests are answered only when "
            "addressed to localhost, 127.0.0.1 or [::1] (others get 421). Set MEMORY_AGENT_AUTH=required to serve them.",
            flush=True,
        )

    started: list[subprocess.Popen] = []

    def forward(_signum, _frame):
        # Always as SIGINT: on SIGTERM uvicorn re-raises it after shutting down and the process
        # dies without running atexit hooks, so the embedded Postgres (pgserver) would never learn
        # this user left and would keep running; SIGINT ends in a normal interpreter exit.
        for child in started:
            try:
                os.killpg(child.pid, signal.SIGINT)
            except ProcessLookupError:
                pass

    # Installed before the start, so no signal can leave the server orphaned.
    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED_SIGNALS}
    try:
        # Its own process group: the terminal's Ctrl-C reaches it once, through `forward`.
        process = subprocess.Popen(command, cwd=REPO_ROOT, env=env, start_new_session=True)
        started.append(process)
        if wait_until_ready(process, base_url):
            print(ready_text(args.host, port, asked=args.port), flush=True)
        code = process.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for child in started:
            if child.poll() is None:  # we are leaving on an error: do not orphan the server
                os.killpg(child.pid, signal.SIGINT)
                try:
                    child.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(child.pid, signal.SIGKILL)
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main())
