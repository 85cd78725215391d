"""`memory-agent eval`'s own behaviour: what it says and returns, before and after a run."""

from __future__ import annotations


import pytest

import evals.cli as cli


def test_ctrl_c_during_a_run_says_interrupted_and_exits_130_without_a_traceback(monkeypatch, capsys):
    async def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_run", interrupted)
    assert cli.main(["summaries", "--variants", "structured"]) == 130
    err = capsys.readouterr().err
    assert "interrupted (Ctrl-C)" in err and "Traceback" not in err


def test_the_compaction_options_state_no_default_other_than_the_context_a_run_uses():
    """--help said window 16 and tail 6 while a run used Context's 14 and 4."""
    import re

    from core.context import Context

    defaults = Context()
    summaries = cli.build_parser()._subparsers._group_actions[0].choices["summaries"]
    helps = {a.dest: a.help for a in summaries._actions}
    for dest, field in (("window", "summary_window"), ("tail", "tail_size"), ("max_context_tokens", "max_context_tokens"), ("max_summary_tokens", "max_summary_tokens")):
        stated = re.findall(r"default:? (\d+)", helps[dest])
        assert stated in ([], [str(getattr(defaults, field))]), (dest, helps[dest])


def test_an_out_folder_that_cannot_be_made_is_refused_before_the_run_not_after_it(tmp_path, capsys):
    """It was taken, and the run failed at its very end, writing its results: minutes of work lost."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")  # a folder inside a file cannot be made, on any system and as root too
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["summaries", "--out", str(blocker / "results")])
    assert f"{blocker} is a file" in capsys.readouterr().err  # what stands in the way, named


def test_an_out_folder_that_can_be_made_is_taken_and_not_left_behind_by_the_check(tmp_path):
    out = tmp_path / "new" / "results"
    args = cli.build_parser().parse_args(["tokens", "--out", str(out)])
    assert args.out == out and not (tmp_path / "new").exists()
    (tmp_path / "kept").mkdir()
    assert cli.build_parser().parse_args(["chats", "--out", str(tmp_path / "kept")]).out.is_dir()
