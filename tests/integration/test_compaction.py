"""Compaction on the real graph and real Postgres: a long chat folds into an incremental summary.

The scripted model's fold answer appends the turns it was given to the previous board's
key facts, so the final board shows whether every message was folded exactly once.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.graph.state import CompiledStateGraph

import prompts
from prompts.reply_prompt import user_words
from graph.assembly import compile_graph
from core.context import Context
from core.tokens import count_message_tokens, count_tokens
from core.schemas import SummaryBoard
from tests.support.graph_turns import metric, new_thread
from tests.support.scripted_model import empty_extraction, registered_scripted_model

WINDOW, TAIL = 30, 12
TURN = re.compile(r"turn (\d+):")
RECOMPRESS_MARK = "has grown too long"


def user_text(n: int) -> str:
    tool = " [tool] what facts do you have on me?" if n % 7 == 0 else " tell me something about this number."
    return f"turn {n}:{tool}"


def numbered(numbers, say=lambda n: f"turn {n}: number {n}.") -> list[str]:
    return [say(n) for n in numbers]


def turns_in(text: str) -> list[int]:
    return [int(n) for n in TURN.findall(text)]


def is_recompress(messages) -> bool:
    return RECOMPRESS_MARK in str(messages[0].content)


def fold_inputs(messages) -> tuple[SummaryBoard, str]:
    body = str(messages[-1].content)
    return SummaryBoard.model_validate_json(prompts.between(body, prompts.PREVIOUS_SUMMARY_TAG)), prompts.between(body, prompts.NEW_MESSAGES_TAG)


def counting_responder(kind, messages):
    """Replies (with a recall_context round trip on [tool] turns) and an appending, incremental fold."""
    if kind == "reply":
        current = user_words(next(m for m in reversed(messages) if isinstance(m, HumanMessage)))
        n = turns_in(current)[0]
        answered = isinstance(messages[-1], ToolMessage)
        if "[tool]" in current and not answered:
            return AIMessage("", tool_calls=[{"name": "recall_context", "args": {"context_type": "facts"}, "id": f"call_{n}"}])
        return f"answer {n}" + (" after lookup" if answered else "")
    if kind == "fold":
        previous, new = fold_inputs(messages)
        folded = turns_in(new)
        return SummaryBoard(
            summary=f"Folded through turn {folded[-1]}.",
            key_facts=previous.key_facts + [f"turn {n}" for n in folded],
            topics=["numbers"],
        ).model_dump()
    if kind == "title":
        return {"title": "Counting numbers"}
    return empty_extraction()


@pytest.fixture
def scripted(request):
    with registered_scripted_model(getattr(request, "param", counting_responder)) as scripted:
        yield scripted


@dataclass
class Chat:
    """One thread of the compiled graph, with the scripted model and a test's compaction settings."""

    graph: CompiledStateGraph
    config: dict
    ctx: Context

    async def send(self, texts: list[str]) -> None:
        """Each text a user turn, run to its end before the next."""
        for text in texts:
            await self.graph.ainvoke({"messages": [HumanMessage(text)]}, self.config, context=self.ctx)

    async def values(self) -> dict:
        return (await self.graph.aget_state(self.config)).values


@pytest.fixture
def new_chat(backend, user_id, scripted):
    def new_chat(**settings) -> Chat:
        return Chat(compile_graph(backend.checkpointer, backend.store), new_thread(), Context(user_id=user_id, model=scripted[0], **settings))

    return new_chat


def assert_tool_pairs_whole(messages) -> None:
    """Every tool result follows its call, and every call is answered, within one message list."""
    open_calls: set[str] = set()
    for m in messages:
        if isinstance(m, AIMessage):
            assert not open_calls, f"tool calls {open_calls} left unanswered before another AI message"
            open_calls = {c["id"] for c in m.tool_calls}
        elif isinstance(m, ToolMessage):
            assert m.tool_call_id in open_calls, f"tool result {m.tool_call_id} without its call"
            open_calls.discard(m.tool_call_id)


@pytest.mark.slow  # eighty turns through the graph (about a minute on 2 busy cores)
async def test_eighty_turns_fold_incrementally_within_window_plus_tail(new_chat, scripted):
    _, model = scripted
    chat = new_chat(summary_window=WINDOW, tail_size=TAIL, max_context_tokens=100_000)
    turns = 80
    await chat.send(numbered(range(1, turns + 1), user_text))

    values = await chat.values()
    tool_turns = [n for n in range(1, turns + 1) if n % 7 == 0]

    # --- the full history is all still there, in order
    messages = values["messages"]
    assert len(messages) == 2 * turns + 2 * len(tool_turns)
    assert [m.content for m in messages if isinstance(m, HumanMessage)] == [user_text(n) for n in range(1, turns + 1)]

    # --- walk the model calls in order: replies see a bounded view, folds see only what is new
    folded_through = 0
    last_board = SummaryBoard()
    folds = 0
    max_visible = 0
    for kind, call in model.calls:
        if kind == "reply":
            current = call[-1] if isinstance(call[-1], HumanMessage) else next(m for m in reversed(call) if isinstance(m, HumanMessage))
            n = turns_in(user_words(current))[0]
            visible = [m for m in call if not isinstance(m, SystemMessage)]
            max_visible = max(max_visible, len(visible))
            assert len(visible) <= WINDOW + TAIL
            # The newest human message is raw and is the current turn's text.
            assert user_words(current) == user_text(n)
            # Nothing already folded is shown again; the rest of the history is shown without gaps.
            shown = [turns_in(user_words(m))[0] for m in visible if isinstance(m, HumanMessage)]
            assert shown == list(range(folded_through + 1, n + 1))
            assert_tool_pairs_whole(visible)
            if folds:
                assert f"Folded through turn {folded_through}." in call[0].content
        elif kind == "fold" and not is_recompress(call):
            previous, new = fold_inputs(call)
            # Incremental: exactly the previous board plus the newly folded messages, nothing older.
            assert previous == last_board
            folded = turns_in(new)
            assert folded == list(range(folded_through + 1, folded_through + 1 + len(folded)))
            # A tool call is folded together with its result.
            assert new.count("(called recall_context") == new.count("[tool recall_context]")
            folded_through = folded[-1]
            last_board = SummaryBoard(
                summary=f"Folded through turn {folded_through}.",
                key_facts=previous.key_facts + [f"turn {i}" for i in folded],
                topics=["numbers"],
            )
            folds += 1

    assert folds >= 6 and values["summary_folds"] == folds
    board = SummaryBoard.model_validate(values["summary"])
    assert board.key_facts == [f"turn {i}" for i in range(1, folded_through + 1)]  # every folded turn, once, in order

    # --- the cursor sits on a clean boundary and the newest turns stay raw
    cursor = next(i for i, m in enumerate(messages) if m.id == values["summarized_through"])
    assert not (isinstance(messages[cursor], AIMessage) and messages[cursor].tool_calls)
    assert not isinstance(messages[cursor + 1], ToolMessage)
    assert TAIL <= len(messages) - cursor - 1 <= WINDOW
    print(f"\n80 turns: {folds} folds, at most {max_visible} messages visible to a reply call")


def bulky_fold_responder(kind, messages):
    """Folds return a long board; the summary-of-summaries call compresses it."""
    if kind == "fold" and is_recompress(messages):
        board = SummaryBoard.model_validate_json(prompts.between(str(messages[-1].content), prompts.PREVIOUS_SUMMARY_TAG))
        return SummaryBoard(summary=board.summary[:80], key_facts=board.key_facts[-3:], topics=board.topics).model_dump()
    if kind == "fold":
        previous, new = fold_inputs(messages)
        folded = turns_in(new)
        long_summary = previous.summary + " " + " ".join(f"Turn {n} discussed number {n} at length." for n in folded)
        return SummaryBoard(summary=long_summary.strip(), key_facts=previous.key_facts + [f"turn {n}" for n in folded]).model_dump()
    return counting_responder(kind, messages)


async def folding_every_eight(new_chat, *, max_summary_tokens: int, turns: range):
    """A chat that folds once 8 messages wait (keeping the last 4), never for size, with ``turns`` sent."""
    chat = new_chat(summary_window=8, tail_size=4, max_summary_tokens=max_summary_tokens, max_context_tokens=100_000)
    await chat.send(numbered(turns))
    return chat


@pytest.mark.slow
@pytest.mark.parametrize("scripted", [bulky_fold_responder], indirect=True)
async def test_summary_of_summaries_keeps_the_board_under_max_summary_tokens(new_chat, scripted):
    _, model = scripted
    chat = await folding_every_eight(new_chat, max_summary_tokens=60, turns=range(1, 21))

    recompressions = [c for c in model.calls_of("fold") if is_recompress(c)]
    assert recompressions, "the long board was never re-compressed"
    for call in recompressions:
        body = str(call[-1].content)
        assert prompts.between(body, prompts.NEW_MESSAGES_TAG) == ""  # the board alone, no messages
        assert "under 60 tokens" in call[0].content
    board = SummaryBoard.model_validate((await chat.values())["summary"])
    assert count_tokens(board.render()) <= 60


def failing_recompress_responder(kind, messages):
    if kind == "fold" and is_recompress(messages):
        return "I cannot compress this."  # invalid, and the repair gets the same
    return bulky_fold_responder(kind, messages)


@pytest.mark.slow
@pytest.mark.parametrize("scripted", [failing_recompress_responder], indirect=True)
async def test_a_failed_recompression_still_advances_the_fold(new_chat, scripted):
    """The fold itself succeeded: its messages must not be folded again (and fail again) every turn."""
    _, model = scripted
    before = metric("memory_agent_summary_failures_total", {"kind": "invalid_output"})
    chat = await folding_every_eight(new_chat, max_summary_tokens=20, turns=range(1, 8))
    values = await chat.values()
    # window 8, tail 4: after turn 5 the first 6 messages (turns 1-3) fold; recompression fails twice.
    assert values["summary_folds"] == 1 and values["summarized_through"] is not None
    assert SummaryBoard.model_validate(values["summary"]).key_facts == ["turn 1", "turn 2", "turn 3"]
    assert metric("memory_agent_summary_failures_total", {"kind": "invalid_output"}) == before + 1
    # Later turns fold only newer messages.
    await chat.send(numbered(range(8, 11)))
    real_folds = [fold_inputs(c)[1] for c in model.calls_of("fold") if not is_recompress(c)]
    assert [turns_in(t) for t in real_folds] == [[1, 2, 3], [4, 5, 6]]


def invalid_folds_first(count: int):
    left = [count]

    def responder(kind, messages):
        if kind == "fold" and left[0] > 0:
            left[0] -= 1
            return "not a board"
        return counting_responder(kind, messages)

    return responder


@pytest.mark.slow
@pytest.mark.parametrize("scripted", [invalid_folds_first(2)], indirect=True)
async def test_a_failed_fold_keeps_summary_and_cursor_and_folds_later(new_chat):
    chat = new_chat(summary_window=6, tail_size=2, max_context_tokens=100_000)
    await chat.send(numbered(range(1, 5), lambda n: f"turn {n}: hi"))  # the fold due after turn 4 fails (twice: first try and repair)
    values = await chat.values()
    assert not values.get("summary") and values.get("summarized_through") is None and values.get("summary_folds", 0) == 0
    await chat.send(["turn 5: hi"])
    values = await chat.values()
    assert values["summary_folds"] == 1
    assert SummaryBoard.model_validate(values["summary"]).key_facts == ["turn 1", "turn 2", "turn 3", "turn 4"]


@pytest.mark.slow
async def test_a_few_huge_messages_trigger_a_token_budget_fold(new_chat, scripted):
    _, model = scripted
    budget = 2500
    chat = new_chat(summary_window=WINDOW, tail_size=TAIL, max_context_tokens=budget)
    huge = lambda n: f"turn {n}: " + ("This is a long paragraph about the harbour and its ships. " * 140)  # ~2000 tokens
    await chat.send([huge(1)])
    values = await chat.values()
    assert values.get("summary_folds", 0) == 0  # one huge message alone: the current turn is never folded

    await chat.send([huge(2)])
    values = await chat.values()
    assert values["summary_folds"] == 1  # 4 messages, far below the window, but over the token budget
    (fold,) = [c for c in model.calls_of("fold") if not is_recompress(c)]
    assert turns_in(fold_inputs(fold)[1]) == [1]  # the old turn; the newest human turn stays raw

    await chat.send(["turn 3: and a short one."])
    reply = model.calls_of("reply")[-1]
    visible = [m for m in reply if not isinstance(m, SystemMessage)]
    assert "turn 1:" not in json.dumps([m.content for m in visible])  # folded, so not shown raw again
    assert "Folded through turn" in reply[0].content
    assert count_message_tokens(visible) <= budget


@pytest.mark.slow
async def test_the_summary_and_full_history_survive_a_new_graph_instance(backend, new_chat):
    """Everything compaction keeps lives in the Postgres checkpoint, not in the process."""
    chat = new_chat(summary_window=6, tail_size=2, max_context_tokens=100_000)
    await chat.send(numbered(range(1, 6), lambda n: f"turn {n}: hi"))
    again = compile_graph(backend.checkpointer, backend.store)
    values = (await again.aget_state(chat.config)).values
    assert values["summary_folds"] == 1 and len(values["messages"]) == 10
