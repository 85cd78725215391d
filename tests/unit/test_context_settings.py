"""Context settings whose defaults come from the environment (what a CLI process or a server run gets)."""

from __future__ import annotations

import pytest

from core.context import Context


def test_extraction_frequency_defaults_to_every_turn_and_follows_its_env_setting(monkeypatch):
    monkeypatch.delenv("MEMORY_AGENT_EXTRACT_EVERY_N_TURNS", raising=False)
    assert Context().extract_every_n_turns == 1
    # 0 turns extraction off for a process: a slow local model then makes one call per turn fewer.
    monkeypatch.setenv("MEMORY_AGENT_EXTRACT_EVERY_N_TURNS", "0")
    assert Context().extract_every_n_turns == 0
    assert Context(extract_every_n_turns=3).extract_every_n_turns == 3  # an explicit value still wins


def test_clients_may_pick_the_servers_own_model_and_offline_unless_the_allow_list_says_otherwise(monkeypatch):
    from core.context import allowed_models

    monkeypatch.delenv("MEMORY_AGENT_ALLOWED_MODELS", raising=False)
    monkeypatch.setenv("MEMORY_AGENT_MODEL", "openai:gpt-4.1-mini")
    assert allowed_models() == ["openai:gpt-4.1-mini", "offline"]
    monkeypatch.setenv("MEMORY_AGENT_ALLOWED_MODELS", " offline , offline-slow:200,")
    assert allowed_models() == ["offline", "offline-slow:200"]


def test_the_slow_offline_model_refuses_a_delay_that_would_hold_a_run_for_ever():
    import pytest

    from offline_model.slow_model import MAX_DELAY_MS, from_spec

    assert from_spec(f"offline-slow:{MAX_DELAY_MS}").delay_ms == MAX_DELAY_MS
    with pytest.raises(ValueError, match="at most"):
        from_spec("offline-slow:99999999999")


def test_the_reply_prompt_layout_is_full_unless_set_brief_and_a_misspelt_one_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("MEMORY_AGENT_REPLY_RULES", raising=False)
    assert Context().reply_rules == "full"
    monkeypatch.setenv("MEMORY_AGENT_REPLY_RULES", "Brief")
    assert Context().reply_rules == "brief"
    with pytest.raises(ValueError, match="reply_rules must be one of full, brief"):
        Context(reply_rules="breif")


def test_a_setting_that_is_no_whole_number_or_below_zero_is_a_clear_error_naming_it():
    """"x" said "invalid literal for int() with base 10" naming no setting; -1 turned extraction off
    ("every -1 turns") and -5 capped no reply."""
    for bad in ("x", 2.5, None, True):
        with pytest.raises(ValueError, match="summary_window must be a whole number"):
            Context(summary_window=bad)
    assert Context(summary_window="16").summary_window == Context(summary_window=16.0).summary_window == 16
    for name in ("extract_every_n_turns", "max_reply_tokens"):
        with pytest.raises(ValueError, match=f"{name} must be 0 or more"):
            Context(**{name: -1})
    assert Context(extract_every_n_turns=0, max_reply_tokens=0).extract_every_n_turns == 0


async def test_an_unknown_summary_prompt_fails_the_turn_at_once_saying_so():
    """It was taken, and every fold after the reply then failed quietly."""
    from types import SimpleNamespace

    from core.state import State
    from nodes.load_context import load_context

    runtime = SimpleNamespace(context=Context(summary_prompt="nope"), store=None)
    with pytest.raises(ValueError, match="unknown summary prompt variant 'nope'; choose one of"):
        await load_context(State(messages=[]), runtime)


def test_a_text_setting_given_a_number_a_list_or_null_is_a_clear_error_naming_it():
    """A JSON client or Studio's form may send any type: 5 as system_prompt or reply_rules failed the run
    with "'int' object has no attribute 'strip'", and 5 as rag_collection reached the SQL of the knowledge
    search, which answered "An internal error occurred"."""
    for name in ("system_prompt", "reply_rules", "rag_collection", "persona", "summary_prompt", "model", "user_id"):
        for bad in (5, ["a"], None, {"x": 1}):
            with pytest.raises(ValueError, match=f"{name} must be text"):
                Context(**{name: bad})
    assert Context(system_prompt="Be brief.", rag_collection="").system_prompt == "Be brief."


def test_a_setting_with_a_least_value_says_that_value_whatever_is_given_below_it():
    """tail_size -1 was told "must be 0 or more", and 0 then "must be at least 1"."""
    for given in (-1, 0):
        with pytest.raises(ValueError, match=r"tail_size must be at least 1 \(got "):
            Context(tail_size=given)
    assert Context(tail_size=1).tail_size == 1
    with pytest.raises(ValueError, match="rag_top_k must be 0 or more"):
        Context(rag_top_k=-1)
