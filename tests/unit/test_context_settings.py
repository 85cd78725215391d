"""Context settings whose defaults come from the environment (what a CLI process or a server run gets)."""

from __future__ import annotations

from core.context import Context


def test_extraction_frequency_defaults_to_every_turn_and_follows_its_env_setting(monkeypatch):
    monkeypatch.delenv("MEMORY_AGENT_EXTRACT_EVERY_N_TURNS", raising=False)
    assert Context().extract_every_n_turns == 1
    # 0 turns extraction off for a process: a slow local model then makes one call per turn fewer.
    monkeypatch.setenv("MEMORY_AGENT_EXTRACT_EVERY_N_TURNS", "0")
    assert Context().extract_every_n_turns == 0
    assert Context(extract_every_n_turns=3).extract_every_n_turns == 3  # an explicit value still wins
