"""The scriptable CLI path, on the embedded Postgres it starts itself (DATABASE_URL unset)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.slow  # CLI processes on an embedded Postgres of their own


def run_cli(args: list[str], stdin: bytes, data_dir: Path, timeout: int = 180) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "MEMORY_AGENT_MODEL")}
    env["MEMORY_AGENT_DATA_DIR"] = str(data_dir)
    return subprocess.run(
        [sys.executable, "-m", "app.cli.main", *args],
        input=stdin,
        capture_output=True,
        cwd=REPO_ROOT,
        env=env,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def data_dir():
    # Short path: the embedded Postgres keeps its unix socket there.
    path = Path(tempfile.mkdtemp(prefix="ma-cli-"))
    yield path
    # Stop any server left behind, then remove the data.
    subprocess.run(["pkill", "-f", str(path)], check=False)
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def test_a_fact_told_in_one_process_is_recalled_by_another_in_a_new_chat(data_dir):
    first = run_cli(["chat", "--user", "dana", "--new"], b"My name is Dana and I live in Haifa\n", data_dir)
    assert first.returncode == 0, first.stderr.decode()
    assert "offline model" in first.stderr.decode()  # says so, in one line, at start

    second = run_cli(["chat", "--user", "dana", "--new"], b"where do I live?\n", data_dir)
    assert second.returncode == 0, second.stderr.decode()
    reply = second.stdout.decode()
    assert "(offline model)" in reply
    assert "Haifa" in reply

    # Another user started on the same database knows nothing of Dana.
    other = run_cli(["chat", "--user", "eve", "--new"], b"where do I live?\n", data_dir)
    assert "Haifa" not in other.stdout.decode()


def test_bad_lines_from_a_pipe_are_refused_clearly_and_the_rest_is_answered(data_dir):
    stdin = b"\n" + b"\xff\xfe not utf-8\n" + b"My name is Noa\n"
    result = run_cli(["chat", "--user", "noa", "--new"], stdin, data_dir)
    err = result.stderr.decode()
    assert "The message is empty" in err
    assert "line 2 is not valid UTF-8" in err
    assert result.returncode == 1  # some lines were refused
    assert "(offline model)" in result.stdout.decode()
    shown = run_cli(["memory", "show", "--user", "noa", "--json"], b"", data_dir)
    assert '"name": "Noa"' in shown.stdout.decode()


def test_memory_show_and_doctor_report_what_is_stored_and_where(data_dir):
    shown = run_cli(["memory", "show", "--user", "dana"], b"", data_dir)
    assert shown.returncode == 0, shown.stderr.decode()
    assert "Haifa" in shown.stdout.decode()
    doctor = run_cli(["doctor"], b"", data_dir)
    assert doctor.returncode == 0, doctor.stderr.decode()
    out = doctor.stdout.decode()
    assert "pgvector 0.8" in out and "PostgreSQL 18" in out
    assert str(data_dir) in out
    assert "all-MiniLM-L6-v2" in out


def test_a_model_that_cannot_be_loaded_is_said_before_any_input_is_read(data_dir):
    """`chat --model bogus` with nothing to send exited 0; the model failed only at a first message."""
    result = run_cli(["chat", "--user", "models", "--new", "--model", "bogus"], b"", data_dir)
    assert result.returncode == 2 and "Cannot load chat model 'bogus'" in result.stderr.decode()


def test_a_reader_that_leaves_early_stops_the_chat_quietly(data_dir):
    """`… | memory-agent chat | head -1` ended in a BrokenPipeError traceback."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "MEMORY_AGENT_MODEL")}
    env["MEMORY_AGENT_DATA_DIR"] = str(data_dir)
    chat = subprocess.Popen(
        [sys.executable, "-m", "app.cli.main", "chat", "--user", "pipe", "--new"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO_ROOT, env=env,
    )
    chat.stdin.write(b"one\n")
    chat.stdin.flush()
    assert chat.stdout.readline()  # the first reply, then the reader leaves
    chat.stdout.close()
    _, err = chat.communicate(b"two\nthree\n", timeout=180)
    assert b"Traceback" not in err and b"BrokenPipeError" not in err, err.decode()
    assert chat.returncode == 1
