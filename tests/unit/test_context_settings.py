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
