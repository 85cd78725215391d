"""The chat's log records go to its log file; the conversation gets at most one calm line, at the first error."""

from __future__ import annotations

import logging
import logging.handlers

import pytest

from app.cli.chat_logging import OneCalmLine, log_to_file


@pytest.fixture
def root_logging():
    """The root logger as it was, put back afterwards (log_to_file reconfigures it for the process)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield root
    for handler in root.handlers[:]:
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()
    for handler in handlers:
        if handler not in root.handlers:
            root.addHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(False)


def test_warnings_go_to_the_log_file_and_only_the_first_error_gets_one_line_in_the_chat(root_logging, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MEMORY_AGENT_STATE_DIR", str(tmp_path))
    path = log_to_file()
    assert path == tmp_path / "log" / "chat.log"
    (calm,) = [h for h in root_logging.handlers if isinstance(h, OneCalmLine)]
    said: list[str] = []
    calm.say = said.append

    logging.getLogger("llm.structured").warning("Model m at http://x refused structured output mode auto")
    logging.getLogger("memory.extractor").warning("extraction: dropped 2 fact(s) the user's message does not carry")
    assert said == []
    logging.getLogger("app.runs.turn_runner").error("turn r1 failed")
    logging.getLogger("app.runs.turn_runner").error("turn r2 failed")

    assert said == [f"(Something went wrong; the details are in {path}.)"]
    assert capsys.readouterr().err == ""  # nothing on the terminal
    for handler in root_logging.handlers:
        handler.flush()
    log = path.read_text()
    assert "refused structured output mode auto" in log and "dropped 2 fact(s)" in log and "turn r2 failed" in log


def test_an_unwritable_state_folder_leaves_the_records_on_stderr(root_logging, tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("MEMORY_AGENT_STATE_DIR", str(blocker / "state"))  # a folder inside a file: cannot be made
    before = root_logging.handlers[:]
    assert log_to_file() is None
    assert root_logging.handlers == before


def test_the_log_and_its_rollovers_are_readable_by_the_user_only(root_logging, tmp_path, monkeypatch):
    """chat.log was made 0644, while the line history is 0600: its tracebacks can hold what the user wrote."""
    import os
    import stat

    monkeypatch.setenv("MEMORY_AGENT_STATE_DIR", str(tmp_path))
    (tmp_path / "log").mkdir()
    (tmp_path / "log" / "chat.log").write_text("made before\n")
    os.chmod(tmp_path / "log" / "chat.log", 0o644)
    path = log_to_file()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # one made before is made private too
    (handler,) = [h for h in root_logging.handlers if isinstance(h, logging.handlers.RotatingFileHandler)]
    handler.doRollover()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE((tmp_path / "log" / "chat.log.1").stat().st_mode) == 0o600
