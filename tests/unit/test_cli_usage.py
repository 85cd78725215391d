"""The CLI says what went wrong in the words of the command that was given."""

import pytest

from app.cli.main import main


def test_a_bad_option_shows_that_commands_usage(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["chat", "--usr", "dana"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert err.startswith("usage: memory-agent chat ") and "unrecognized arguments: --usr dana" in err


def test_a_bad_option_of_a_nested_command_shows_the_nested_usage(capsys):
    with pytest.raises(SystemExit):
        main(["memory", "show", "--bad"])
    assert capsys.readouterr().err.startswith("usage: memory-agent memory show ")


def test_version_is_printed(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.startswith("memory-agent ")


@pytest.mark.parametrize(
    "argv, says",
    [
        (["chat", "--chat", ""], "invalid chat id '': it is empty"),
        (["chat", "--chat", " "], "it is empty"),
        (["chat", "--chat", "a\tb"], "control characters"),
        (["chat", "--chat", "b" * 250], "longer than 200"),
        (["import", "h.json", "--resume", ""], "invalid chat id"),
        (["import", "h.json", "--title", "   "], "it is empty"),
        (["import", ""], "the path is empty"),
        (["ingest", ""], "the path is empty"),
        (["ingest", "docs", "--collection", "a\nb"], "control character U+000A"),
        (["keys", "create", "--user", "dana", "--label", "line1\nFAKE   evil  forged"], "control character U+000A"),
        (["keys", "create", "--user", "dana", "--label", "x" * 100_000], "at most 200"),
        (["serve", "--port", "-1"], "a port is 1 to 65535"),
        (["serve", "--port", "99999"], "a port is 1 to 65535"),
        (["studio", "--port", "0"], "a port is 1 to 65535"),
        pytest.param(["mcp", "--user", "dana", "--port", "70000"], "a port is 1 to 65535", marks=pytest.mark.slow),  # imports the MCP server
    ],
)
def test_a_bad_id_path_label_or_port_is_refused_with_the_reason_before_anything_runs(argv, says, capsys):
    """Each was taken as given (stop 63, a fuzzing of the CLI): an empty --chat continued the latest
    chat and a 250-character one was answered and saved where no list shows it; `ingest ""` ingested
    the current folder; a label's newline forged a row of `keys list`; a port of -1 was a traceback."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and says in capsys.readouterr().err


def test_eval_refuses_an_output_folder_that_is_a_file_before_it_runs(tmp_path, capsys):
    """`eval tokens --out <a file>` ran the whole evaluation and then failed writing its results."""
    taken = tmp_path / "h.json"
    taken.write_text("{}")
    for out in (taken, taken / "sub"):
        with pytest.raises(SystemExit) as exit_:
            main(["eval", "tokens", "--limit", "1", "--out", str(out)])
        assert exit_.value.code == 2 and f"{taken} is a file" in capsys.readouterr().err


@pytest.mark.slow  # imports the graph
def test_a_closed_stdin_is_said_not_a_traceback(monkeypatch, capsys):
    import sys

    monkeypatch.setattr(sys, "stdin", None)
    assert main(["import", "-", "--user", "dana"]) == 2
    assert "stdin is closed" in capsys.readouterr().err


def test_text_written_to_a_terminal_keeps_its_words_and_loses_only_its_control_characters():
    from app.cli.terminal_text import shown

    assert shown("Bob\x1b[2J\x1b]0;pwned\x07") == "Bob\\x1b[2J\\x1b]0;pwned\\x07"
    assert shown("one\r\ntwo\rthree\b") == "one\r\ntwo\\x0dthree\\x08"  # a CRLF's return is a line end, a lone one writes over it
    assert shown("Ünïcödé 🙂\ttab\nline") == "Ünïcödé 🙂\ttab\nline"


def test_the_line_under_a_reply_says_what_memory_did_and_nothing_for_a_repeat():
    """A repeat of what was known printed "memory not updated: None"."""
    from app.cli.chat_session import memory_line

    assert memory_line({"described": "remembered: Is learning Spanish"}) == "remembered: Is learning Spanish"
    assert memory_line({"described": ""}) is None and memory_line({}) is None
    assert memory_line({"error": "the model failed"}) == "memory not updated: the model failed"
    assert memory_line({"retracted": {"facts": ["Works as a pilot"], "tasks": [], "fields": ["profile.role"]}}) == (
        "taken back with the old branch: Works as a pilot; profile.role")


def test_a_key_is_revoked_by_its_prefix_or_any_start_of_the_key_as_shown():
    """`keys revoke ma_51ddc24b`, copied from the printed key, found no key."""
    from storage.api_keys import key_prefix

    assert key_prefix("51ddc24b") == key_prefix("ma_51ddc24b") == key_prefix("ma_51ddc24b_Zx9-secretpart") == "51ddc24b"


@pytest.mark.parametrize(
    "argv",
    [
        ["import", "--user", "dana", "--", "-notes.json"],  # a file whose name opens with a dash
        ["import", "x.json", "--user", "dana", "--title=-draft"],  # a title that does
        ["import", "my export.json", "--user", "dana", "--title", "Trips (2024)", "--model", "offline"],
    ],
)
def test_the_command_an_interrupted_import_prints_parses_as_the_one_given(argv):
    """The go-on command (_import_again) is for pasting into a shell: it must read back as the command
    given. A value opening with a dash was printed bare, and argparse took it for an option."""
    import shlex

    from app.cli.main import _import_again, build_parser

    parser = build_parser()
    given = parser.parse_args(argv)
    words = shlex.split(_import_again(given, resume="0b6c2f4e-8d1a-4c3e-9f2a-5d7e8f901234"))
    assert words[:2] == ["memory-agent", "import"]
    again = parser.parse_args(words[1:])
    assert (again.user, again.title, again.model, again.resume) == (given.user, given.title, given.model, "0b6c2f4e-8d1a-4c3e-9f2a-5d7e8f901234")
    assert again.file in (given.file, f"./{given.file}")


@pytest.mark.parametrize(
    "argv, says",
    [
        (["-v", "serve", "--port", "-1"], "a port is 1 to 65535"),
        (["--verbose", "studio", "--port", "0"], "a port is 1 to 65535"),
        (["-v", "keys", "create", "--user", "dana", "--label", "a\nb"], "control character U+000A"),
    ],
)
def test_the_global_verbose_option_reaches_a_command_that_lives_in_its_own_module(argv, says, capsys):
    """`memory-agent --help` lists -v before every command, but `memory-agent -v keys list` (or
    `-v serve`) failed with "usage: memory-agent keys … unrecognized arguments: list"."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and says in err and "unrecognized arguments" not in err


def test_the_global_verbose_option_is_passed_on_to_a_command_with_a_verbose_option_of_its_own(tmp_path, capsys):
    taken = tmp_path / "h.json"
    taken.write_text("{}")
    with pytest.raises(SystemExit) as exit_:
        main(["-v", "eval", "tokens", "--limit", "1", "--out", str(taken)])
    assert exit_.value.code == 2 and f"{taken} is a file" in capsys.readouterr().err


def test_the_global_verbose_option_before_keys_list_lists_the_keys(monkeypatch, capsys):
    import app.cli.keys_command as keys_command

    seen = []
    monkeypatch.setattr(keys_command, "main", lambda argv: seen.append(argv) or 0)
    assert main(["-v", "keys", "list", "--user", "dana"]) == 0
    assert seen == [["list", "--user", "dana"]]


@pytest.mark.parametrize(
    "setting, value",
    [
        ("MEMORY_AGENT_POOL_TIMEOUT", "abc"),  # a float() at import: a traceback
        ("MEMORY_AGENT_POOL_TIMEOUT", "-3"),  # every connection "not had after -3.00 sec"
        ("MEMORY_AGENT_MODEL_TIMEOUT", "abc"),  # "could not convert string to float", no name
        ("MEMORY_AGENT_MAX_REPLY_TOKENS", "abc"),  # "invalid literal for int()", no name
        ("MEMORY_AGENT_EXTRACT_EVERY_N_TURNS", "-1"),
        ("MEMORY_AGENT_CHECKPOINT_CACHE_MB", "abc"),  # named, but as a traceback
        ("MEMORY_AGENT_HISTORY_TURNS", "abc"),
        ("MEMORY_AGENT_EMBEDDING_THREADS", "abc"),  # only after the first reply was saved
        ("MEMORY_AGENT_STRUCTURED_OUTPUT", "bogus"),  # only at the first structured call
        ("MEMORY_AGENT_SUMMARY_PROMPT", "bogus"),  # the first message discarded
        ("MEMORY_AGENT_REPLY_RULES", "bogus"),
        ("MEMORY_AGENT_TOOLS", "disable"),  # taken as on
    ],
)
def test_a_bad_environment_setting_stops_a_command_at_start_naming_it(setting, value, monkeypatch, capsys):
    """Each was a traceback, a late failure after work was done, or silently read as something else."""
    monkeypatch.setenv(setting, value)
    monkeypatch.setenv("DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")  # refused before any connection
    assert main(["doctor"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and setting in err and "Traceback" not in err and "127.0.0.1:1" not in err


@pytest.mark.parametrize("setting", ["MEMORY_AGENT_HEADER_TIMEOUT", "MEMORY_AGENT_BODY_IDLE_TIMEOUT", "MEMORY_AGENT_BODY_TIMEOUT"])
def test_serve_refuses_a_bad_deadline_before_its_workers_start(setting, monkeypatch, capsys):
    """Read at a worker's import, "abc" crashed each worker, which uvicorn restarted for ever."""
    monkeypatch.setenv(setting, "abc")
    monkeypatch.setenv("DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    assert main(["serve", "--port", "8999"]) == 2
    err = capsys.readouterr().err
    assert f"error: {setting}='abc'" in err and "127.0.0.1:1" not in err
