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
