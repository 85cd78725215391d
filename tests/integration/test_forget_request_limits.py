"""A forget by words names one thing: every way to ask for one (POST /memory/forget, the CLI's
/forget, MCP's forget, the agent's forget_memory tool) is refused past FORGET_CHARS with the limit
said and nothing forgotten, and its cost grows with the text, not with its square (real Postgres)."""

from __future__ import annotations

import io
import uuid

import pytest

import memory.forgetting as forgetting
from app.cli.chat_session import ChatSession
from app.http.app import create_app
from app.http.routes_memory import ForgetIn
from core.errors import InvalidMessage
from core.schemas import ExtractionResult, NewFact, ProfileUpdates
from memory.forgetting import FORGET_CHARS, find_targets, forget, forget_request
from memory.user_memory import get_user_document, list_facts
from memory.writer.extraction import apply_extraction
from storage import forget_ledger

TOO_LONG = "that I work as a nurse " + "and more " * (FORGET_CHARS // 9)


async def learned(backend, user_id: str) -> None:
    await apply_extraction(backend.store, user_id, ExtractionResult(profile_updates=ProfileUpdates(role="nurse"), new_facts=[NewFact(text="Works as a nurse")]))


async def test_a_forget_over_the_limit_is_refused_saying_the_limit_by_every_function_and_nothing_is_forgotten(backend, user_id):
    await learned(backend, user_id)
    assert len(TOO_LONG) > FORGET_CHARS
    for attempt in (
        lambda: forget_request(backend.store, user_id, TOO_LONG),  # HTTP, CLI, MCP
        lambda: find_targets(backend.store, user_id, TOO_LONG),  # the agent's tool, first step
        lambda: forget(backend.store, user_id, [], words=TOO_LONG),  # the agent's tool, once confirmed
    ):
        with pytest.raises(InvalidMessage, match=f"{len(TOO_LONG):,} characters, the limit is {FORGET_CHARS:,}"):
            await attempt()
    assert (await get_user_document(backend.store, user_id)).profile.role == "nurse"
    assert [f.text for f in await list_facts(backend.store, user_id)] == ["Works as a nurse"]
    assert await forget_ledger.records(backend.pool, user_id) == []
    # At the limit, it is taken.
    assert await forget_request(backend.store, user_id, "nurse".ljust(FORGET_CHARS)) is not None


async def stem_lookups(monkeypatch, finder: str, forget_words) -> tuple[int, int]:
    """How many times ``forgetting.<finder>`` runs while ``forget_words`` forgets a text of 5 words,
    and one of 40: the same count when the stems are found once per text."""
    calls = 0
    found = getattr(forgetting, finder)

    def counted(text: str) -> set[str]:
        nonlocal calls
        calls += 1
        return found(text)

    monkeypatch.setattr(forgetting, finder, counted)
    counts = []
    for words in (5, 40):
        calls = 0
        await forget_words(" ".join(f"zq{i}word" for i in range(words)))
        counts.append(calls)
    return counts[0], counts[1]


@pytest.mark.parametrize("entry", ["forget_request", "forget"])
async def test_a_forget_finds_the_distinctive_stems_of_its_text_once_not_once_per_word(backend, user_id, monkeypatch, entry):
    """POST /memory/forget of 4,000 words took 14 s of one worker's event loop: the stems were found again for each word."""

    async def forget_words(text: str) -> None:
        if entry == "forget_request":
            await forget_request(backend.store, user_id, text)
        else:
            await forget(backend.store, user_id, [], words=text)

    few, many = await stem_lookups(monkeypatch, "distinctive_stems", forget_words)
    assert few == many > 0


async def test_deleting_a_message_finds_its_words_stems_once_not_once_per_word(backend, user_id, monkeypatch):
    """A 20,000-character message took 2.1 s of the event loop to delete: its stems were found again for each word."""

    async def delete_message(text: str) -> None:
        await forgetting.forget_message(backend.store, user_id, str(uuid.uuid4()), str(uuid.uuid4()), text)

    few, many = await stem_lookups(monkeypatch, "deleted_stems", delete_message)
    assert few == many > 0


async def test_the_clis_forget_over_the_limit_says_the_limit_and_forgets_nothing(backend, user_id):
    await learned(backend, user_id)
    out, err = io.StringIO(), io.StringIO()
    session = ChatSession(backend, user_id, str(uuid.uuid4()), interactive=False, out=out, err=err)
    assert await session.command(f"/forget {TOO_LONG}") is True
    assert f"the limit is {FORGET_CHARS:,}" in err.getvalue() and session.failures == 1
    assert [f.text for f in await list_facts(backend.store, user_id)] == ["Works as a nurse"]


def test_the_http_forget_body_declares_the_limit_in_its_schema_and_in_the_openapi_document():
    with pytest.raises(ValueError, match=f"the limit is {FORGET_CHARS}"):
        ForgetIn(text=TOO_LONG)
    schema = create_app().openapi()["components"]["schemas"]["ForgetIn"]["properties"]["text"]
    assert schema["maxLength"] == FORGET_CHARS and f"at most {FORGET_CHARS} characters" in schema["description"]
