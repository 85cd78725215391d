"""Assembling a model from chunk packages: joined in chunk order, checked, and nothing kept when the check fails."""

from __future__ import annotations

import errno
import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from app.local import model_server as local_model
from app.local.model_server import LocalModelError, ModelSpec, assemble_model
from core.cache_dir import CACHE_ENV

CHUNKS = [b"first-", b"second-", b"third"]


def spec_for(data: bytes, packages: int = 3) -> ModelSpec:
    return ModelSpec(
        key="tiny",
        alias="tiny-model",
        file_name="tiny.gguf",
        packages=tuple(f"tiny-model-part{i}==0.1.0" for i in range(1, packages + 1)),
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
    )


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    folder = tmp_path / "downloads" / "tiny"
    folder.mkdir(parents=True)
    # As the real packages: the chunk of package i is data/partNN.bin; written in reverse to prove the order is NN's.
    for i, chunk in reversed(list(enumerate(CHUNKS, start=1))):
        with zipfile.ZipFile(folder / f"tiny_model_part{i}-0.1.0-py3-none-any.whl", "w") as zf:
            zf.writestr(f"tiny_model_part{i}/__init__.py", "")
            zf.writestr(f"tiny_model_part{i}/data/part{i:02d}.bin", chunk)
    return tmp_path


def test_chunks_are_joined_in_order_checked_and_reused(cache, monkeypatch):
    spec = spec_for(b"".join(CHUNKS))
    path = assemble_model(spec)
    assert path.read_bytes() == b"first-second-third" and path.parent == cache / "models"

    monkeypatch.setattr(local_model, "_chunks", lambda *a: pytest.fail("a verified model is not assembled again"))
    assert assemble_model(spec) == path


def test_a_hash_mismatch_is_a_clear_error_and_leaves_no_model(cache):
    spec = spec_for(b"first-second-thirD")
    with pytest.raises(LocalModelError, match="does not match"):
        assemble_model(spec)
    assert list((cache / "models").iterdir()) == []


def _package(cache: Path, i: int) -> Path:
    return cache / "downloads" / "tiny" / f"tiny_model_part{i}-0.1.0-py3-none-any.whl"


def _redownloads(monkeypatch, good: dict[int, bytes]) -> list[list[str]]:
    """pip's download, recorded: it writes the good package back, as PyPI would."""
    asked: list[list[str]] = []

    def pip(command, **kwargs):
        names = [a for a in command if a.startswith("tiny-model-part")]
        asked.append(names)
        folder = Path(command[command.index("-d") + 1])
        for name in names:
            i = int(name.split("==")[0].rsplit("part", 1)[1])
            (folder / f"tiny_model_part{i}-0.1.0-py3-none-any.whl").write_bytes(good[i])
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(local_model.subprocess, "run", pip)
    return asked


@pytest.mark.parametrize("damage", ["cut", "flipped"])
def test_a_damaged_package_is_a_clear_error_and_the_next_run_downloads_it_anew(cache, monkeypatch, damage):
    """A cut download was a BadZipFile traceback, and every later run failed on the same file."""
    good = {i: _package(cache, i).read_bytes() for i in range(1, len(CHUNKS) + 1)}
    bad = _package(cache, 2)
    data = bytearray(good[2])
    if damage == "cut":
        bad.write_bytes(bytes(data[: len(data) // 2]))
    else:  # a flipped byte in the chunk's data: the zip's CRC catches it
        at = bytes(data).index(b"second-")
        data[at] ^= 0xFF
        bad.write_bytes(bytes(data))
    spec = spec_for(b"".join(CHUNKS))
    with pytest.raises(LocalModelError, match=r"tiny_model_part2-0\.1\.0-py3-none-any\.whl is damaged.*download it anew"):
        assemble_model(spec)
    assert not bad.exists() and list((cache / "models").iterdir()) == []

    asked = _redownloads(monkeypatch, good)
    assert assemble_model(spec).read_bytes() == b"first-second-third"
    assert asked == [["tiny-model-part2==0.1.0"]]


def test_packages_that_join_to_the_wrong_model_are_not_used_again(cache, monkeypatch):
    """After a mismatch the next run joined the same packages and failed the same way."""
    good = {i: _package(cache, i).read_bytes() for i in range(1, len(CHUNKS) + 1)}
    spec = spec_for(b"first-second-thirD")
    with pytest.raises(LocalModelError, match="download them anew"):
        assemble_model(spec)
    asked = _redownloads(monkeypatch, good)
    with pytest.raises(LocalModelError, match="does not match"):
        assemble_model(spec)
    assert asked == [[f"tiny-model-part{i}==0.1.0" for i in range(1, len(CHUNKS) + 1)]]


class _FullDisk:
    """A file on a disk that fills after the first chunk."""

    def __init__(self, file):
        self.file, self.written = file, 0

    def write(self, data: bytes) -> int:
        if self.written:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.written += len(data)
        return self.file.write(data)

    def __getattr__(self, name):
        return getattr(self.file, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.file.close()


def test_a_full_disk_is_a_clear_error_and_leaves_no_partial_file(cache, monkeypatch):
    """It was an OSError traceback, and the half-joined file (hundreds of MB) stayed on the full disk."""
    real_open = Path.open
    monkeypatch.setattr(Path, "open", lambda self, *a, **k: _FullDisk(real_open(self, *a, **k)) if self.name.endswith(".partial") else real_open(self, *a, **k))
    with pytest.raises(LocalModelError, match=r"No space left on device\); it needs 0 MB free there"):
        assemble_model(spec_for(b"".join(CHUNKS)))
    assert list((cache / "models").iterdir()) == []


def test_ctrl_c_while_joining_leaves_no_partial_file(cache, monkeypatch):
    spec = spec_for(b"".join(CHUNKS))

    class Interrupted:
        def update(self, block):
            raise KeyboardInterrupt

    monkeypatch.setattr(local_model.hashlib, "sha256", Interrupted)
    with pytest.raises(KeyboardInterrupt):
        assemble_model(spec)
    assert list((cache / "models").iterdir()) == []


def test_a_missing_chunk_is_named(cache):
    (cache / "downloads" / "tiny" / "tiny_model_part2-0.1.0-py3-none-any.whl").unlink()
    spec = spec_for(b"".join(CHUNKS))
    with pytest.raises(LocalModelError):
        local_model._chunks(cache / "downloads" / "tiny", spec)


def test_ctrl_c_while_the_model_is_prepared_stops_without_a_traceback(monkeypatch, capsys):
    def interrupted(model):
        raise KeyboardInterrupt

    monkeypatch.setattr(local_model, "prepare", interrupted)
    assert local_model.main(["serve", "--model", "0.5b"]) == 130
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.slow  # starts and stops a process
def test_ctrl_c_while_the_server_loads_stops_the_server(monkeypatch, tmp_path):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    started = []
    real_popen = subprocess.Popen

    def stand_in(command, **kwargs):  # a process that, like a loading server, does not answer yet
        started.append(real_popen(["sleep", "60"], **kwargs))
        return started[0]

    def interrupted(server, timeout):
        raise KeyboardInterrupt

    monkeypatch.setattr(local_model.subprocess, "Popen", stand_in)
    monkeypatch.setattr(local_model, "_wait_until_ready", interrupted)
    with pytest.raises(KeyboardInterrupt):
        local_model.start_server(local_model.MODELS["0.5b"], tmp_path / "model.gguf")
    assert started[0].poll() is not None


def test_a_port_in_use_is_refused_before_the_model_loads_and_the_running_servers_log_is_kept(monkeypatch, tmp_path):
    """The second server loaded the model, failed to bind, and was reported as 'exited with 3' under
    the first one's log lines, which its start had truncated (the log is named by the port)."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(local_model.subprocess, "Popen", lambda *a, **k: pytest.fail("no server is started"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        log = tmp_path / "logs" / f"server-0.5b-{port}.log"
        log.parent.mkdir()
        log.write_text("the running server's log\n")
        with pytest.raises(LocalModelError, match=f"Port {port} on 127.0.0.1 is in use"):
            local_model.start_server(local_model.MODELS["0.5b"], tmp_path / "model.gguf", port=port)
    assert log.read_text() == "the running server's log\n"


@pytest.mark.slow  # starts and kills processes
def test_a_server_that_dies_under_the_chat_is_named_at_once_and_one_we_stop_is_not(tmp_path, capsys):
    """Killed mid-chat (for memory, a crash), each reply only failed with "Connection error."."""
    dying = local_model.LocalServer(local_model.MODELS["0.5b"], subprocess.Popen(["sleep", "60"]), 1234, tmp_path / "server.log")
    watcher = local_model.watch_server(dying)
    dying.process.kill()
    watcher.join(10)
    err = capsys.readouterr().err
    assert f"the model server stopped (killed by SIGKILL; its log: {tmp_path / 'server.log'})" in err and "/quit" in err

    stopped = local_model.LocalServer(local_model.MODELS["0.5b"], subprocess.Popen(["sleep", "60"]), 1234, tmp_path / "server.log")
    watcher = local_model.watch_server(stopped)
    stopped.stop()
    watcher.join(10)
    assert capsys.readouterr().err == ""


def test_the_weight_packages_are_pinned_and_the_default_is_the_model_whose_replies_are_answers():
    assert local_model.DEFAULT_MODEL == "1.5b"  # the 0.5B restated Dana's facts or declined (docs/local-model.md)
    assert [len(m.packages) for m in local_model.MODELS.values()] == [6, 22]
    assert all("==" in p for m in local_model.MODELS.values() for p in m.packages)


@pytest.mark.parametrize(("cores", "expected"), [(1, (1, 1)), (2, (1, 2)), (8, (4, 8)), (32, (4, 8))])
def test_generation_gets_half_the_cores_and_the_prompt_all_of_them(monkeypatch, cores, expected):
    # 2 generating threads on a busy 2-core machine wait for each other at every step (0.4 tok/s against 17-20).
    monkeypatch.delenv("MEMORY_AGENT_LOCAL_THREADS", raising=False)
    monkeypatch.delenv("MEMORY_AGENT_LOCAL_BATCH_THREADS", raising=False)
    monkeypatch.setattr(local_model.os, "cpu_count", lambda: cores)
    assert local_model.thread_counts() == expected


def test_thread_settings_override_the_defaults(monkeypatch):
    monkeypatch.setenv("MEMORY_AGENT_LOCAL_THREADS", "2")
    monkeypatch.setenv("MEMORY_AGENT_LOCAL_BATCH_THREADS", "1")
    assert local_model.thread_counts() == (2, 1)
    assert local_model.thread_counts(3, 4) == (3, 4)


@pytest.mark.parametrize("name", ["MEMORY_AGENT_LOCAL_THREADS", "MEMORY_AGENT_LOCAL_BATCH_THREADS"])
def test_a_thread_setting_that_is_no_number_is_refused_naming_it(monkeypatch, name):
    """int("abc") was a traceback naming no setting."""
    from core.errors import SettingError

    monkeypatch.setenv(name, "abc")
    with pytest.raises(SettingError, match=f"{name}='abc': give a number of threads"):
        local_model.thread_counts()


def test_clients_of_the_local_server_wait_long_instead_of_queueing_retries(monkeypatch, tmp_path):
    # The server keeps generating for a client that timed out; a retry would queue a second copy behind it.
    monkeypatch.delenv("MEMORY_AGENT_MODEL_TIMEOUT", raising=False)
    server = local_model.LocalServer(local_model.MODELS["0.5b"], process=None, port=1234, log_path=tmp_path / "log")
    assert server.env()["MEMORY_AGENT_MODEL_TIMEOUT"] == str(local_model.LOCAL_TIMEOUT_SECONDS)
    monkeypatch.setenv("MEMORY_AGENT_MODEL_TIMEOUT", "30")
    assert server.env()["MEMORY_AGENT_MODEL_TIMEOUT"] == "30"


def test_the_local_server_asks_for_the_brief_reply_prompt_and_no_tools_unless_the_user_chose(monkeypatch, tmp_path):
    # The 0.5B answered the full rules with the rules or Dana's own words, and with tools wrote calls as text.
    monkeypatch.delenv("MEMORY_AGENT_REPLY_RULES", raising=False)
    monkeypatch.delenv("MEMORY_AGENT_TOOLS", raising=False)
    server = local_model.LocalServer(local_model.MODELS["0.5b"], process=None, port=1234, log_path=tmp_path / "log")
    assert (server.env()["MEMORY_AGENT_REPLY_RULES"], server.env()["MEMORY_AGENT_TOOLS"]) == ("brief", "off")
    monkeypatch.setenv("MEMORY_AGENT_REPLY_RULES", "full")
    monkeypatch.setenv("MEMORY_AGENT_TOOLS", "on")
    assert (server.env()["MEMORY_AGENT_REPLY_RULES"], server.env()["MEMORY_AGENT_TOOLS"]) == ("full", "on")


@pytest.mark.slow  # starts and kills processes
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_server_dies_with_the_process_that_started_it_even_on_sigkill():
    # A test run or chat killed from outside (a CI timeout) left its 1-2 GB model server running.
    parent = subprocess.Popen(
        [sys.executable, "-c", (
            "import os, subprocess, sys, time\n"
            "from app.local.model_server import die_with_parent\n"
            "me = os.getpid()\n"
            "child = subprocess.Popen(['sleep', '120'], preexec_fn=lambda: die_with_parent(me))\n"
            "print(child.pid, flush=True)\n"
            "time.sleep(120)\n"
        )],
        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    child = int(parent.stdout.readline())
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(child):
        time.sleep(0.05)
    survived = _alive(child)
    if survived:
        os.kill(child, signal.SIGKILL)
    assert not survived


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"  # a zombie waiting for init has ended
    except FileNotFoundError:
        return False


def test_a_first_token_slow_to_come_is_waited_for_as_long_as_the_whole_call(monkeypatch):
    # langchain-openai's own 120 s limit between stream chunks failed a local reply on a busy machine.
    from llm.chat_model import _create

    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("MEMORY_AGENT_MODEL_TIMEOUT", str(local_model.LOCAL_TIMEOUT_SECONDS))
    model = _create(f"openai:{local_model.MODELS['0.5b'].alias}")
    assert model.stream_chunk_timeout == model.request_timeout == local_model.LOCAL_TIMEOUT_SECONDS
