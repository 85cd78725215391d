"""`memory-agent serve` refuses a pool size it cannot use before it touches a database."""

from __future__ import annotations

import pytest

from app.http import serve


@pytest.mark.parametrize("value", ["abc", "-3", "2.5"])
def test_a_pool_size_variable_that_is_no_whole_number_is_refused_with_its_name(monkeypatch, capsys, value):
    monkeypatch.setenv(serve.POOL_SIZE_ENV, value)
    assert serve.main([]) == 2
    assert serve.POOL_SIZE_ENV in capsys.readouterr().err


@pytest.mark.parametrize("argv, env", [(["--pool-size", "0"], None), ([], "0")])
def test_a_pool_size_below_one_is_refused(monkeypatch, capsys, argv, env):
    if env is None:
        monkeypatch.delenv(serve.POOL_SIZE_ENV, raising=False)
    else:
        monkeypatch.setenv(serve.POOL_SIZE_ENV, env)
    assert serve.main(argv) == 2
    assert "must be at least 1" in capsys.readouterr().err
