"""The CLI chat session: task confirmations and streaming, in-process with a scripted model."""

from __future__ import annotations

import asyncio
import io
import threading
import uuid
from contextlib import contextmanager

import pytest
from langchain_core.messages import AIMessage, ToolMessage

from app.cli.chat_session import ChatSession
from app.http.routes_chats import checkpoint_before
from graph.assembly import MEMORY_PHASE
from llm.reply_checks import no_answer_text
from llm.text_tool_calls import NO_TOOLS_INSTRUCTION
from llm.chat_model import register_model, unregister_model
from core.schemas import ExtractionResult, NewFact
from memory.writer.extraction import apply_extraction
from memory.user_memory import list_chats, list_facts, stored_tasks
from storage.user_transaction import user_transaction
from storage import thread_owners
from tests.support.scripted_model import ScriptedChatModel, empty_extraction, plain_answers, registered_scripted_model


def reply_to(messages):
    if isinstance(messages[-1], ToolMessage):
        return f"Tool said: {messages[-1].content}"
    if "passport" in str(messages[-1].content):
        return AIMessage("", tool_calls=[{"name": "add_task", "args": {"description": "Renew passport"}, "id": f"c{uuid.uuid4().hex[:6]}"}])
    return "Sure."


responder = plain_answers(extract=lambda _: empty_extraction(), title="Errands", summary="errands", reply=reply_to)


@pytest.fixture
def session(backend, user_id):
    name = f"scripted-{uuid.uuid4().hex[:6]}"
    register_model(name, ScriptedChatModel(responder=responder))
    out, err = io.StringIO(), io.StringIO()
    s = ChatSession(backend, user_id, str(uuid.uuid4()), interactive=False, out=out, err=err, context_overrides={"model": name})
    yield s, out, err
    unregister_model(name)


@pytest.mark.slow
async def test_a_task_change_is_asked_on_stderr_and_the_next_yes_applies_it_once(session, backend, user_id):
    s, out, err = session
    await s.send("Please remind me about my passport")
    assert "Confirm: add task 'Renew passport'? [yes/no]" in err.getvalue()
    assert await stored_tasks(backend.store, user_id) == []  # nothing before the answer

    await s.send("yes")
    tasks = await stored_tasks(backend.store, user_id)
    assert [t.description for t in tasks] == ["Renew passport"]
    assert "Tool said: Done" in out.getvalue()
    assert await s.pending_confirmation() is None


@pytest.mark.slow
async def test_answering_no_declines_and_another_message_moves_on(session, backend, user_id):
    s, out, err = session
    await s.send("Please remind me about my passport")
    await s.send("no")
    assert await stored_tasks(backend.store, user_id) == []
    assert "declined" in out.getvalue()
    reply = await s.send("thanks, what else?")
    assert reply == "Sure."


@pytest.mark.slow
async def test_a_bare_forget_says_what_it_deletes_and_deletes_only_after_yes(session, backend, user_id):
    s, out, err = session
    await s.send("Please remind me about my passport")
    await s.send("yes")
    assert len(await stored_tasks(backend.store, user_id)) == 1

    await s.command("/forget")
    assert "0 facts, 1 task and 1 chat with their histories. Delete it all? (yes/no)" in err.getvalue()
    assert len(await stored_tasks(backend.store, user_id)) == 1  # nothing before the answer
    await s.send("no")
    assert "Nothing was deleted." in err.getvalue()
    assert len(await stored_tasks(backend.store, user_id)) == 1

    await s.command("/forget")
    await s.send("yes")
    assert await stored_tasks(backend.store, user_id) == []
    assert await list_chats(backend.store, user_id) == []
    # Said in words, not as a Python dict ("{'chats': 1, 'memories': 2, …}"), and none of what there was none of.
    said = err.getvalue().split("Forgot everything about you: ")[1].splitlines()[0]
    assert said.startswith("1 chat, ") and " and " in said and "{" not in said and "0 " not in said and "api" not in said.casefold(), said


@pytest.mark.slow
async def test_only_the_next_line_answers_forget_everything_and_any_other_line_is_sent(session, backend, user_id):
    """A stale question still counted: /forget, then /forget Rome and /memory, then a "yes" meant
    for something else deleted everything; a message typed after /forget was taken as a no and
    never sent (stop 63, a fuzzing of the CLI)."""
    s, out, err = session
    await apply_extraction(backend.store, user_id, ExtractionResult.model_validate({"task_updates": [{"action": "add", "description": "Water the plants"}]}))
    await s.command("/forget")
    await s.command("/memory")
    assert "Forgetting everything was not confirmed, so nothing was deleted." in err.getvalue()
    await s.send("yes")
    assert len(await stored_tasks(backend.store, user_id)) == 1 and "Forgot everything" not in err.getvalue()

    for refused in ("", "x" * 30_000):  # a line refused as a message still answers it (with a no)
        await s.command("/forget")
        await s.send(refused)
        await s.send("yes")
    assert len(await stored_tasks(backend.store, user_id)) == 1 and "Forgot everything" not in err.getvalue()

    await s.command("/forget")
    reply = await s.send("what is the weather like?")
    assert "nothing was deleted; your line is sent as a message" in err.getvalue() and reply == "Sure."
    assert len(await stored_tasks(backend.store, user_id)) == 1


@pytest.mark.slow
async def test_control_characters_in_memory_or_a_reply_are_shown_not_played_on_the_terminal(session, backend, user_id):
    """"My name is Bob\x1b[2J" stored the escape, and /memory and the reply wrote it to the terminal
    raw: it cleared the screen, retitled the window, rang the bell."""
    s, out, err = session
    await apply_extraction(backend.store, user_id, ExtractionResult(new_facts=[NewFact(text="Is called Bob\x1b[2J\x1b]0;pwned\x07")]))
    await s.command("/memory")
    shown = out.getvalue() + err.getvalue()
    assert "\x1b" not in shown and "\x07" not in shown
    assert "Is called Bob\\x1b[2J\\x1b]0;pwned\\x07" in shown


async def test_an_unknown_command_is_named(session):
    s, out, err = session
    await s.command("/forgot")
    assert "error: Unknown command /forgot." in err.getvalue()
    assert s.failures == 1  # a script that sent it exits 1 (it exited 0)


async def test_a_chat_is_its_first_users_and_another_user_cannot_continue_it(session, backend, user_id):
    s, out, err = session
    assert await s.send("hello") == "Sure."
    assert await thread_owners.owner_of(backend.pool, s.thread_id) == user_id
    before = (await s.graph.aget_state(s.config)).values["messages"]

    other = ChatSession(
        backend, f"u{uuid.uuid4().hex[:12]}", s.thread_id, interactive=False,
        out=io.StringIO(), err=io.StringIO(), context_overrides=s.context_overrides,
    )
    assert await other.send("What did I say before?") is None
    assert "belongs to another user" in other.err.getvalue()
    assert (await s.graph.aget_state(s.config)).values["messages"] == before  # nothing written to it


def empty_then(second: str):
    """Replies: a line of spaces first (as the 0.5B gave for three of four Dana lines), ``second`` when asked again."""
    answers: list[str] = []

    def reply(messages):
        answers.append(str(messages[0].content))
        return "   " if len(answers) == 1 else second

    return reply, answers


@contextmanager
def scripted_session(backend, user_id, reply, extract=lambda _: empty_extraction()):
    """A CLI session from a pipe on a scripted model answering with ``reply``; yields (session, out, err)."""
    with registered_scripted_model(plain_answers(extract=extract, title="t", summary="s", reply=reply)) as (name, _):
        out, err = io.StringIO(), io.StringIO()
        yield ChatSession(backend, user_id, str(uuid.uuid4()), interactive=False, out=out, err=err, context_overrides={"model": name}), out, err


async def test_an_empty_reply_is_asked_again_once_without_tools_and_the_second_answer_is_shown(backend, user_id):
    reply, systems = empty_then("Hello Dana.")
    with scripted_session(backend, user_id, reply) as (s, out, _):
        assert await s.send("Hi! My name is Dana.") == "Hello Dana."
    assert out.getvalue() == "Hello Dana.\n"
    assert len(systems) == 2 and NO_TOOLS_INSTRUCTION in systems[1] and NO_TOOLS_INSTRUCTION not in systems[0]
    stored = (await s.graph.aget_state(s.config)).values["messages"]
    assert [m.text for m in stored if m.type == "ai"] == ["Hello Dana."]


async def test_a_reply_empty_twice_shows_a_clear_note_not_a_blank_line(backend, user_id):
    reply, systems = empty_then("\n \n")
    with scripted_session(backend, user_id, reply) as (s, out, _):
        await s.send("I prefer short answers.")
    assert out.getvalue() == no_answer_text("unusable", "I prefer short answers.") + "\n" and len(systems) == 2


@pytest.mark.slow
async def test_with_background_memory_the_reply_returns_before_extraction_and_the_next_turn_waits_for_it(backend, user_id):
    """A terminal chat: the reply is shown at once, the user may type on; nothing is lost or reordered."""
    gate, extracting = threading.Event(), threading.Event()

    def extract(text):
        extracting.set()
        gate.wait(timeout=60)  # the extraction call is slow, as a local model's is
        return {**empty_extraction(), "new_facts": [{"text": "Works as a nurse"}]} if "nurse" in text else empty_extraction()

    with scripted_session(backend, user_id, "Noted.", extract=extract) as (s, out, err):
        s.background_memory = True
        try:
            assert await asyncio.wait_for(s.send("I work as a nurse."), 30) == "Noted."
            assert out.getvalue() == "Noted.\n"
            await asyncio.to_thread(extracting.wait, 30)
            assert await list_facts(backend.store, user_id) == []  # memory work still running
            second = asyncio.create_task(s.send("And I live in Haifa."))
            await asyncio.sleep(0.3)
            assert not second.done()  # the next turn waits for the previous memory phase
            gate.set()
            assert await asyncio.wait_for(second, 30) == "Noted."
            await s.settle()
        finally:
            gate.set()
    # The second turn's script extracts nothing; the rules under the model keep Haifa.
    assert [f.text for f in await list_facts(backend.store, user_id)] == ["Works as a nurse", "Lives in Haifa"]
    stored = (await s.graph.aget_state(s.config)).values["messages"]
    assert [(m.type, m.text) for m in stored] == [
        ("human", "I work as a nurse."), ("ai", "Noted."), ("human", "And I live in Haifa."), ("ai", "Noted.")
    ]
    assert "remembered: " in err.getvalue() and "error" not in err.getvalue()


async def test_a_turn_that_only_asks_to_confirm_prints_no_blank_reply_line(backend, user_id):
    def reply(messages):
        call = {"name": "add_task", "args": {"description": "Renew passport"}, "id": f"c{uuid.uuid4().hex[:6]}"}
        return AIMessage("   ", tool_calls=[call])  # spaces, then the call: what the 0.5B streamed

    with scripted_session(backend, user_id, reply) as (s, out, err):
        await s.send("Remind me to renew my passport next month.")
    assert out.getvalue() == "" and "Confirm: add task 'Renew passport'" in err.getvalue()


@pytest.mark.slow
async def test_in_a_pipe_a_line_that_is_not_yes_or_no_declines_the_change_says_so_and_is_sent_as_a_message(backend, user_id, capfd):
    from app.cli.chat_run import run_chat

    with registered_scripted_model(responder) as (name, _):
        lines = io.StringIO("Please remind me about my passport\nWhat do you know about me?\n")
        code = await run_chat(backend, user_id=user_id, chat_id=None, new=True, model=name, stdin=lines)
    out, err = capfd.readouterr()
    assert code == 0, err
    assert "Confirm: add task 'Renew passport'? [yes/no]" in err
    assert "the task change was not made; your line is sent as a message" in err
    assert await stored_tasks(backend.store, user_id) == []
    (chat,) = await list_chats(backend.store, user_id)
    s = ChatSession(backend, user_id, chat.thread_id, interactive=False)
    assert await s.pending_confirmation() is None
    humans = [m.text for m in (await s.graph.aget_state(s.config)).values["messages"] if m.type == "human"]
    assert humans == ["Please remind me about my passport", "What do you know about me?"]
    assert out.splitlines()[-1] == "Sure."  # the answer to the second line


async def test_a_pipe_that_exits_non_zero_says_why_on_stderr(backend, user_id, capfd):
    from app.cli.chat_run import run_chat

    with registered_scripted_model(responder) as (name, _):
        lines = io.StringIO("hello\n" + "x" * 30000 + "\n")
        code = await run_chat(backend, user_id=user_id, chat_id=None, new=True, model=name, stdin=lines)
    out, err = capfd.readouterr()
    assert code == 1
    assert err.strip().splitlines()[-1] == "error: 1 of what was sent failed (said above), so the exit status is 1"


async def test_on_a_terminal_a_confirmation_is_asked_again_until_it_is_answered(session, backend, user_id, monkeypatch):
    s, out, err = session
    s.interactive = True
    answers = iter(["maybe later", "yes"])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(answers))
    await s.send("Please remind me about my passport")
    assert "Please answer yes or no" in out.getvalue()
    assert [t.description for t in await stored_tasks(backend.store, user_id)] == ["Renew passport"]


@pytest.fixture
async def alices_folded_chat(session):
    """A chat of another user (the session's), with a summary board holding a secret."""
    s, out, err = session
    await s.send("My vault code is 4711")
    await s.graph.aupdate_state(s.config, {"summary": {"summary": "", "key_facts": ["My vault code is 4711"]}})
    return s.thread_id


def bobs_session(backend, session, thread_id: str) -> ChatSession:
    s, _, _ = session
    return ChatSession(
        backend, f"u{uuid.uuid4().hex[:12]}", thread_id, interactive=False,
        out=io.StringIO(), err=io.StringIO(), context_overrides=s.context_overrides,
    )


async def test_summary_of_another_users_chat_is_refused_like_a_message(backend, session, alices_folded_chat):
    bob = bobs_session(backend, session, alices_folded_chat)
    assert await bob.command("/summary")
    assert "belongs to another user" in bob.err.getvalue()
    assert "4711" not in bob.err.getvalue() + bob.out.getvalue()


async def test_switching_to_another_users_chat_shows_none_of_its_history(backend, session, alices_folded_chat):
    from core.schemas import ChatRecord

    bob = bobs_session(backend, session, str(uuid.uuid4()))
    # /chats and /open only offer owned chats; the history view holds to the rule by itself too.
    await bob.switch_to(ChatRecord(thread_id=alices_folded_chat, title="Vault code"))
    assert "belongs to another user" in bob.err.getvalue()
    assert "4711" not in bob.err.getvalue() + bob.out.getvalue()
    assert bob.thread_id != alices_folded_chat


async def test_chat_started_on_another_users_chat_id_is_refused_at_once(backend, session, alices_folded_chat, capfd):
    from app.cli.chat_run import run_chat

    s, _, _ = session
    code = await run_chat(
        backend, user_id=f"u{uuid.uuid4().hex[:12]}", chat_id=alices_folded_chat, new=False,
        model=s.context_overrides["model"], stdin=io.StringIO("/summary\n"),
    )
    out, err = capfd.readouterr()
    assert code == 1 and "belongs to another user" in err
    assert "4711" not in out + err


async def test_a_pipe_that_ends_before_a_confirmation_is_answered_says_the_change_was_not_made(backend, user_id, capfd):
    from app.cli.chat_run import run_chat

    with registered_scripted_model(responder) as (name, _):
        code = await run_chat(backend, user_id=user_id, chat_id=None, new=True, model=name, stdin=io.StringIO("Please remind me about my passport\n"))
    out, err = capfd.readouterr()
    assert code == 0
    assert "the task change was not made" in err.splitlines()[-1]
    assert await stored_tasks(backend.store, user_id) == []


@pytest.mark.slow
async def test_forget_with_a_text_waits_for_the_users_lock_and_leaves_no_copy_of_the_fact(session, backend, user_id):
    """Issue 19.8: /forget deleted the fact outside the writer and without the user's lock. Issue 26: a
    forget leaves no copy, not even as superseded history (it used to keep the fact's text)."""
    s, out, err = session
    await apply_extraction(backend.store, user_id, ExtractionResult(new_facts=[NewFact(text="Has a peanut allergy")]))

    async with user_transaction(backend.store, user_id):  # another writer of this user is mid-transaction
        forgetting = asyncio.create_task(s.command("/forget peanut allergy"))
        await asyncio.sleep(0.5)
        assert not forgetting.done()
        assert [f.text for f in await list_facts(backend.store, user_id)] == ["Has a peanut allergy"]
    await asyncio.wait_for(forgetting, 30)

    assert "Forgot: Has a peanut allergy" in err.getvalue()
    assert await list_facts(backend.store, user_id, include_superseded=True) == []


@pytest.mark.slow
async def test_regenerate_answers_the_last_message_again_through_the_apis_path(backend, user_id):
    """The stop message said "regenerate it", and the CLI had no such command."""
    answers = iter(["Tulips.", "Roses, in the sun.", "Sure."])
    with scripted_session(backend, user_id, lambda messages: next(answers)) as (s, out, err):
        await s.command("/regenerate")
        assert "Nothing to regenerate yet" in err.getvalue()
        await s.send("What should I plant?")
        await s.command("/regenerate")
        stored = [(m.type, m.text) for m in (await s.graph.aget_state(s.config)).values["messages"]]
        assert stored == [("human", "What should I plant?"), ("ai", "Roses, in the sun.")]  # the same message, a new reply
        assert await s.send("Thanks") == "Sure."  # the chat's run lock was released each time
    assert out.getvalue() == "Tulips.\nRoses, in the sun.\nSure.\n" and "error" not in err.getvalue()


async def test_help_lists_every_command_the_chat_has(session):
    s, out, err = session
    await s.command("/help")
    for name in ("/help", "/memory", "/summary", "/chats", "/open", "/new", "/regenerate", "/forget", "/quit"):
        assert name in err.getvalue()
        if name not in ("/help",):
            await s.command(name.split()[0] + (" 1" if name == "/open" else ""))  # each one exists
    assert "Unknown command" not in err.getvalue()


@pytest.mark.slow
async def test_a_chats_first_turn_writes_its_empty_checkpoint_first_then_saves_its_reply_phase_once(session, backend):
    """A chat made without POST /chats has no checkpoint: its first turn writes the empty chat's
    (the first message's fork point) and then runs as every later turn, saved where it stops,
    not after each step before the first token."""
    session, _, _ = session
    assert await session.send("My name is Dana") == "Sure."
    await session.settle()
    async with backend.pool.connection() as conn:
        rows = await (
            await conn.execute("SELECT metadata ->> 'source' AS source FROM checkpoints WHERE thread_id = %s ORDER BY checkpoint_id", (session.thread_id,))
        ).fetchall()
    assert [r["source"] for r in rows] == ["update", "loop"] + ["loop"] * len(MEMORY_PHASE)
    first = (await session.graph.aget_state(session.config)).values["messages"][0]
    fork = await checkpoint_before(session.graph, session.thread_id, first.id)
    assert (await session.graph.aget_state(fork)).values.get("messages", []) == []


async def test_a_forget_confirmed_in_plain_words_drops_the_typed_lines_that_carry_it_as_slash_forget_does(backend, user_id):
    """The chat line's Up/Down history kept "My passport number is …" after a forget asked in the
    user's own words and confirmed (only /forget dropped such lines)."""
    out = io.StringIO()
    s = ChatSession(backend, user_id, str(uuid.uuid4()), interactive=False, out=out, err=io.StringIO(),
                    context_overrides={"model": "offline"})
    typed = ["My passport number is T1234567", "I like green tea"]
    dropped: list[list[str]] = []
    s.on_forget_words.append(lambda redactor: dropped.append([line for line in typed if redactor.carries(line)]))
    for line in typed:
        await s.send(line)
    await s.send("Please forget my passport number")
    assert (await s.pending_confirmation() or {}).get("type") == "forget"
    assert dropped == []
    await s.send("yes")
    assert dropped == [["My passport number is T1234567"]]
    # The reply says what went, not what the tool asks of a model ("Confirm it to the user…" was printed).
    said = out.getvalue().splitlines()[-1]
    assert said.startswith("(offline model) Done: forgotten everywhere") and "Confirm it" not in said


async def test_a_chat_opened_by_a_forget_request_is_titled_by_its_date_not_by_the_forgotten_mark(backend, user_id):
    """Its keyword title was made from the redacted opening: "[forgotten]"."""
    from memory.user_memory import list_chats

    first = ChatSession(backend, user_id, str(uuid.uuid4()), interactive=False, out=io.StringIO(), err=io.StringIO(), context_overrides={"model": "offline"})
    await first.send("I work as a nurse")
    asking = ChatSession(backend, user_id, str(uuid.uuid4()), interactive=False, out=io.StringIO(), err=io.StringIO(), context_overrides={"model": "offline"})
    await asking.send("Please forget that I work as a nurse")
    await asking.send("yes")
    titles = {c.thread_id: c.title for c in await list_chats(backend.store, user_id)}
    assert titles[asking.thread_id].startswith("Chat of ") and "[forgotten]" not in titles[asking.thread_id], titles


async def test_a_forget_confirmation_declined_or_left_unanswered_says_nothing_was_forgotten_not_a_task_change(backend, user_id, capfd, monkeypatch):
    """Every note about a pending forget said "the task change was not made" (a pipe's line that is
    not a yes or no, a pipe that ended, a no on the terminal, /regenerate while it waits)."""
    from app.cli.chat_run import run_chat

    lines = io.StringIO("I live in Haifa\nPlease forget that I live in Haifa\nmaybe\nPlease forget that I live in Haifa\n/regenerate\n")
    code = await run_chat(backend, user_id=user_id, chat_id=None, new=True, model="offline", stdin=lines)
    out, err = capfd.readouterr()
    assert code == 0, err
    assert "task change" not in err, err
    assert "That was not a yes or no, so nothing was forgotten; your line is sent as a message." in err
    assert "A forget waits for your yes or no; answer it first." in err
    assert err.splitlines()[-1] == "The input ended before the confirmation was answered: nothing was forgotten (the chat still asks it)."

    s = ChatSession(backend, user_id, str(uuid.uuid4()), interactive=True, out=io.StringIO(), err=io.StringIO(), context_overrides={"model": "offline"})
    answers = iter(["maybe later", "no"])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(answers))
    await s.send("I live in Lisbon")
    await s.send("Please forget that I live in Lisbon")
    said = s.out.getvalue()
    assert "task change" not in said, said
    assert "Please answer yes or no (nothing is forgotten without a yes)." in said and "Nothing was forgotten." in said
    assert "Lives in Lisbon" in [f.text for f in await list_facts(backend.store, user_id)]  # declined: kept


@pytest.mark.slow
async def test_a_script_opening_with_a_utf8_bom_runs_its_command_and_sends_no_invisible_character(session, backend, user_id):
    """A script saved by a Windows editor opens with a BOM: "/summary" was sent to the model as a
    message ("\\ufeff/summary"), and a first message named its chat with the invisible character."""
    from app.cli.chat_run import _scripted

    s, out, err = session
    stdin = io.TextIOWrapper(io.BytesIO(b"\xef\xbb\xbf/summary\r\nWater the plants\r\n"), encoding="utf-8")
    assert await _scripted(s, stdin) == 0
    state = await s.graph.aget_state(s.config)
    said = [m.text for m in state.values["messages"] if m.type == "human"]
    assert said == ["Water the plants"], said
    assert out.getvalue().count("Sure.") == 1
