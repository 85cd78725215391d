"""nodes/compaction.py: which messages fold, and the rules no fold may break."""

from __future__ import annotations

import random

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from core.messages import unsummarized
from nodes.compaction import model_view, plan_fold, safe_cut
from core.context import Context
from core.tokens import count_message_tokens

BIG = 10**9  # a token budget that never triggers


class Ids:
    def __init__(self) -> None:
        self.n = 0

    def next(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"


def turn(ids: Ids, text: str = "hello", *, tools: int = 0, parallel: int = 1, reply: str = "ok") -> list[BaseMessage]:
    """One user turn: the human message, ``tools`` model→tool steps (``parallel`` calls each) and the answer."""
    out: list[BaseMessage] = [HumanMessage(text, id=ids.next("h"))]
    for _ in range(tools):
        calls = [{"name": "recall_context", "args": {"context_type": "facts"}, "id": ids.next("c")} for _ in range(parallel)]
        out.append(AIMessage("", tool_calls=calls, id=ids.next("a")))
        out += [ToolMessage("result", tool_call_id=c["id"], name="recall_context", id=ids.next("t")) for c in calls]
    out.append(AIMessage(reply, id=ids.next("a")))
    return out


def conversation(turns: int, **kw) -> list[BaseMessage]:
    ids = Ids()
    return [m for _ in range(turns) for m in turn(ids, **kw)]


def splits_a_tool_pair(pending: list[BaseMessage], cut: int) -> bool:
    if not 0 < cut < len(pending):
        return False
    return isinstance(pending[cut], ToolMessage) or (isinstance(pending[cut - 1], AIMessage) and bool(pending[cut - 1].tool_calls))


# ---------------------------------------------------------------- unsummarized / model_view
def test_unsummarized_without_cursor_is_everything():
    msgs = conversation(2)
    assert unsummarized(msgs, None) == msgs


def test_unsummarized_starts_after_the_cursor():
    msgs = conversation(3)
    assert unsummarized(msgs, msgs[1].id) == msgs[2:]
    assert unsummarized(msgs, msgs[-1].id) == []


def test_a_cursor_that_is_gone_shows_everything_rather_than_nothing():
    msgs = conversation(2)
    assert unsummarized(msgs, "removed-by-an-edit") == msgs
    assert model_view(msgs, "removed-by-an-edit") == msgs


# ---------------------------------------------------------------- safe_cut
def test_safe_cut_never_leaves_a_tool_result_without_its_call():
    msgs = turn(Ids(), tools=1)  # H, AI(call), T, AI
    assert safe_cut(msgs, 2) == 1  # between the call and its result → before the call


def test_safe_cut_never_folds_a_call_without_its_results():
    msgs = turn(Ids(), tools=1)
    assert safe_cut(msgs, 2) == 1
    assert safe_cut(msgs, 3) == 3  # after the result: the pair is whole on the folded side


def test_safe_cut_keeps_parallel_tool_results_together():
    msgs = turn(Ids(), tools=1, parallel=3)  # H, AI(3 calls), T, T, T, AI
    for cut in (2, 3, 4):
        assert safe_cut(msgs, cut) == 1
    assert safe_cut(msgs, 5) == 5


def test_safe_cut_between_two_whole_tool_steps_stays():
    msgs = turn(Ids(), tools=2)  # H, AI(c), T, AI(c), T, AI
    assert safe_cut(msgs, 3) == 3
    assert safe_cut(msgs, 4) == 3  # inside the second step: back to just before its call


@pytest.mark.parametrize(("cut", "expected"), [(-5, 0), (0, 0), (4, 4), (99, 4)])
def test_safe_cut_clamps_to_the_list(cut, expected):
    assert safe_cut(conversation(2), cut) == expected


# ---------------------------------------------------------------- plan_fold: window
def test_no_fold_within_window_and_budget():
    msgs = conversation(15)  # exactly 30 messages
    assert plan_fold(msgs, None, window=30, tail=12, max_tokens=BIG) == []


def test_over_the_window_the_oldest_fold_and_the_tail_stays():
    msgs = conversation(16)  # 32 messages
    folded = plan_fold(msgs, None, window=30, tail=12, max_tokens=BIG)
    assert folded == msgs[:20]


def test_fold_is_incremental_from_the_cursor():
    msgs = conversation(30)
    cursor = msgs[19].id
    folded = plan_fold(msgs, cursor, window=30, tail=12, max_tokens=BIG)
    assert folded == msgs[20:48]
    assert all(m not in folded for m in msgs[:20])


def test_the_window_cut_moves_back_rather_than_split_a_tool_pair():
    ids = Ids()
    msgs = conversation(14) + turn(ids, tools=1) + conversation(1)  # 28 + [H, AI(call), T, AI] + 2 = 34
    assert msgs[29].tool_calls and isinstance(msgs[30], ToolMessage)
    folded = plan_fold(msgs, None, window=30, tail=4, max_tokens=BIG)
    # 34 - 4 = 30 would fold the call (29) and leave its result (30) raw: moved back before the call.
    assert len(folded) == 29


def test_the_newest_human_message_is_never_folded_even_with_a_tiny_tail():
    msgs = conversation(20) + turn(Ids(), text="current", tools=3)
    folded = plan_fold(msgs, None, window=4, tail=1, max_tokens=BIG)
    newest_human = max(i for i, m in enumerate(msgs) if isinstance(m, HumanMessage))
    assert len(folded) == newest_human
    assert all(m.content != "current" for m in folded)


def test_nothing_to_fold_when_the_only_turn_is_the_current_one():
    msgs = turn(Ids(), tools=4)
    assert plan_fold(msgs, None, window=2, tail=1, max_tokens=BIG) == []


# ---------------------------------------------------------------- plan_fold: token budget
def huge_turn(ids: Ids, n: int, chars: int) -> list[BaseMessage]:
    return turn(ids, text=f"turn {n} " + "x" * chars, reply=f"answer {n}")


def test_a_few_huge_messages_fold_by_tokens_below_the_window():
    ids = Ids()
    msgs = huge_turn(ids, 1, 8000) + huge_turn(ids, 2, 8000)  # 4 messages, ~4000 tokens
    folded = plan_fold(msgs, None, window=30, tail=12, max_tokens=2500)
    assert folded == msgs[:1]  # the rest fits; the newest human turn stays
    assert count_message_tokens(msgs[1:]) <= 2500


def test_token_fold_when_the_recent_messages_alone_fit_but_the_tail_start_is_negative():
    """Fewer pending messages than ``tail``: the cut must start at 0, not at a negative index.

    (With a negative start, pending[-4:] — the last four small messages — fit the budget,
    the loop stopped, the cut was clamped to 0 and nothing folded although the budget was passed.)
    """
    ids = Ids()
    msgs = huge_turn(ids, 1, 4600) + huge_turn(ids, 2, 4600) + huge_turn(ids, 3, 400) + huge_turn(ids, 4, 400)
    budget = count_message_tokens(msgs) - 50
    assert len(msgs) == 8 and count_message_tokens(msgs[-4:]) < budget  # the shape of the regression
    folded = plan_fold(msgs, None, window=30, tail=12, max_tokens=budget)
    assert folded == msgs[:1]
    assert count_message_tokens(msgs[len(folded) :]) <= budget


def test_a_huge_current_message_folds_everything_before_it_but_itself():
    ids = Ids()
    msgs = conversation(3) + huge_turn(ids, 9, 40_000)
    folded = plan_fold(msgs, None, window=30, tail=12, max_tokens=1000)
    assert folded == msgs[:6]


def test_a_token_fold_does_not_split_a_tool_pair():
    ids = Ids()
    msgs = huge_turn(ids, 1, 6000) + turn(ids, text="lookup", tools=1) + huge_turn(ids, 3, 100)
    # Folding H1 and A1 is not enough for the budget; the next cut points are inside the tool turn.
    budget = count_message_tokens(msgs[3:]) - 1
    folded = plan_fold(msgs, None, window=30, tail=12, max_tokens=budget)
    assert not splits_a_tool_pair(msgs, len(folded))
    assert not any(isinstance(m, HumanMessage) and m.content.startswith("turn 3") for m in folded)


# ---------------------------------------------------------------- invariants over random chats
@pytest.mark.parametrize("seed", range(40))
def test_random_chats_keep_every_rule(seed):
    rng = random.Random(seed)
    ids = Ids()
    msgs: list[BaseMessage] = []
    for n in range(rng.randint(1, 40)):
        msgs += turn(
            ids,
            text=f"turn {n} " + "y" * rng.choice([5, 50, 500, 5000]),
            tools=rng.choice([0, 0, 0, 1, 2]),
            parallel=rng.choice([1, 1, 2]),
        )
    window = rng.randint(2, 40)
    tail = rng.randint(1, window)
    budget = rng.choice([300, 1500, 6000, BIG])
    cursor_at = rng.randrange(-1, len(msgs) // 2)
    # A cursor only ever sits on a clean boundary: derive one the same way.
    cursor_at = safe_cut(msgs, cursor_at + 1) - 1
    cursor = msgs[cursor_at].id if cursor_at >= 0 else None

    pending = unsummarized(msgs, cursor)
    folded = plan_fold(msgs, cursor, window=window, tail=tail, max_tokens=budget)
    assert folded == pending[: len(folded)]  # the oldest pending, in order, nothing earlier
    assert not splits_a_tool_pair(pending, len(folded))
    newest_human = max(i for i, m in enumerate(pending) if isinstance(m, HumanMessage)) if any(isinstance(m, HumanMessage) for m in pending) else len(pending)
    assert len(folded) <= newest_human
    if folded:
        rest = pending[len(folded) :]
        assert rest and not isinstance(rest[0], ToolMessage)
        if len(pending) > window and count_message_tokens(pending) <= budget:
            assert len(rest) >= min(tail, len(pending) - newest_human)  # the tail stays raw (or the whole current turn)


# ---------------------------------------------------------------- settings
def test_context_refuses_settings_that_would_fold_the_newest_message():
    with pytest.raises(ValueError, match="tail_size"):
        Context(tail_size=0)
    with pytest.raises(ValueError, match="summary_window"):
        Context(summary_window=5, tail_size=12)
