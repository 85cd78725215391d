"""Start a real ``langgraph dev`` server on our langgraph.json for a test, and stop it.

The server runs as its own process group (so stopping it also stops uvicorn's
children), offline (no analytics, no version check, no tracing, no OpenAI vars:
the offline model answers), on a free port, against the database URL given.

It runs in a scratch working directory with a copy of the repository's
langgraph.json whose file paths are made absolute: ``langgraph dev`` keeps its
thread and run records in ``./.langgraph_api`` of its working directory, and a
test must neither read nor overwrite a developer's. The copy drops ``env`` so a
developer's ``.env`` cannot point the test at another database.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import httpx

REPO_ROOT = Path(__file__).resolve().parents[2]
REPO_CONFIG = REPO_ROOT / "langgraph.json"

OFFLINE_ENV = {
    "LANGGRAPH_CLI_NO_ANALYTICS": "1",
    "LANGGRAPH_NO_VERSION_CHECK": "true",
    "LANGSMITH_TRACING": "false",
    "LANGSMITH_TEST_TRACKING": "false",
    "HF_HUB_OFFLINE": "1",
    "PYTHONUNBUFFERED": "1",
}
# A developer's model or LangSmith settings must not leak into the server under test.
SCRUBBED_ENV = (
    "OPENAI_API_KEY", "OPENAI_BASE_URL", "MEMORY_AGENT_MODEL", "LANGSMITH_API_KEY", "LANGCHAIN_API_KEY", "MEMORY_AGENT_AUTH",
    "MEMORY_AGENT_STUDIO_USER",
)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def langgraph_command() -> list[str]:
    """``langgraph`` of this interpreter's environment (the .venv's bin dir)."""
    script = Path(sys.executable).parent / "langgraph"
    return [str(script)] if script.exists() else [sys.executable, "-m", "langgraph_cli"]


def _absolute(spec: str, root: Path) -> str:
    """``./graph/assembly.py:graph`` → ``/abs/graph/assembly.py:graph``."""
    path, sep, attr = spec.rpartition(":")
    if not sep or not path.startswith("."):
        return spec
    return f"{(root / path).resolve()}:{attr}"


def isolated_config(directory: Path, source: Path = REPO_CONFIG) -> Path:
    """A copy of ``source`` usable from ``directory``: absolute paths, no ``env``."""
    config = json.loads(source.read_text())
    root = source.parent
    config["graphs"] = {name: _absolute(spec, root) for name, spec in config["graphs"].items()}
    for section in ("checkpointer", "store", "auth"):
        if isinstance(config.get(section), dict) and "path" in config[section]:
            config[section] = {**config[section], "path": _absolute(config[section]["path"], root)}
    config["dependencies"] = [str((root / d).resolve()) if d.startswith(".") else d for d in config.get("dependencies", [])]
    config.pop("env", None)
    target = directory / "langgraph.json"
    target.write_text(json.dumps(config, indent=2))
    return target


@dataclass
class DevServer:
    url: str
    process: subprocess.Popen
    log_path: Path
    startup_seconds: float

    def log_tail(self, lines: int = 60) -> str:
        text = re.sub(r"\x1b\[[0-9;]*m", "", self.log_path.read_text(errors="replace"))
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 20) -> None:
        """SIGINT to the whole process group (a graceful uvicorn shutdown), SIGKILL after ``timeout``."""
        if self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGINT)
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=timeout)
        except ProcessLookupError:
            pass


def start_dev_server(
    database_url: str,
    workdir: Path,
    *,
    host: str = "127.0.0.1",
    extra_env: dict[str, str] | None = None,
    extra_args: tuple[str, ...] = (),
    timeout: float = 180,
) -> DevServer:
    """Start ``langgraph dev`` on a free port and wait (at most ``timeout`` s) for ``/ok``."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = isolated_config(workdir)
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED_ENV}
    env.update(OFFLINE_ENV)
    env["DATABASE_URL"] = database_url
    env.update(extra_env or {})
    port = free_port(host)
    command = [
        *langgraph_command(), "dev",
        "--config", str(config),
        "--host", host,
        "--port", str(port),
        "--no-browser",
        "--no-reload",
        "--allow-blocking",  # as `memory-agent studio` runs it (see app/studio/launcher.py)
        *extra_args,
    ]
    log_path = workdir / "langgraph-dev.log"
    started = time.perf_counter()
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    server = DevServer(url=f"http://{host}:{port}", process=process, log_path=log_path, startup_seconds=0.0)
    deadline = started + timeout
    try:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"langgraph dev exited with code {process.returncode}:\n{server.log_tail()}")
            # langgraph dev silently moves to another port when ours was taken meanwhile.
            if f"Port {port} is already in use" in log_path.read_text(errors="replace"):
                raise RuntimeError(f"port {port} was taken before langgraph dev bound it")
            try:
                if httpx.get(f"{server.url}/ok", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.perf_counter() > deadline:
                raise TimeoutError(f"langgraph dev did not answer /ok within {timeout:.0f}s:\n{server.log_tail()}")
            time.sleep(0.2)
    except BaseException:
        server.stop()
        raise
    server.startup_seconds = time.perf_counter() - started
    return server


@contextmanager
def running_dev_server(database_url: str, workdir: Path, **options) -> Iterator[DevServer]:
    """``start_dev_server`` (same options), stopped on leaving the block."""
    server = start_dev_server(database_url, workdir, **options)
    try:
        yield server
    finally:
        server.stop()
