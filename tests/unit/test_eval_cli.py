"""`memory-agent eval`'s own behaviour: what it says and returns, before and after a run."""

from __future__ import annotations

import evals.cli as cli


def test_ctrl_c_during_a_run_says_interrupted_and_exits_130_without_a_traceback(monkeypatch, capsys):
    async def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_run", interrupted)
    assert cli.main(["summaries", "--variants", "structured"]) == 130
    err = capsys.readouterr().err
    assert "interrupted (Ctrl-C)" in err and "Traceback" not in err
