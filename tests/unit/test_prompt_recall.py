"""The judge-free measures of eval recall: answer words, evidence turns, BM25, the baselines' budgets, the questions' budget."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from langchain_core.messages import HumanMessage

from core.context import SAFETY_CEILINGS, Context
from core.tokens import count_message_tokens
from evals.cli import main
from evals.metrics.prompt_recall import BM25, PromptText, answer_recall, evidence_recall, turn_present
from evals.recall_eval import baseline_prompts, percentile, question_context
from memory.chat_import import ChatImport


def test_answer_recall_is_the_share_of_the_gold_answers_content_words_in_the_prompt():
    prompt = PromptText("Caroline went to the support group on 7 May.")
    assert answer_recall("7 May 2023", prompt) == 2 / 3
    assert answer_recall("the support groups", prompt) == 1.0  # stems, stopwords dropped
    assert answer_recall("Paris", prompt) == 0.0


def test_a_turn_counts_when_verbatim_or_when_most_of_its_content_words_reached_the_prompt():
    prompt = PromptText("[8 May 2023] Caroline:   I went to a LGBTQ support\ngroup yesterday and it was powerful.")
    assert turn_present("I went to a LGBTQ support group yesterday", prompt)  # whitespace folded
    assert turn_present("The LGBTQ support group was powerful, I went yesterday!", prompt)  # all content words
    assert not turn_present("I adopted a cat called Oliver at the support group", prompt)  # 2 of 5 words
    assert evidence_recall(["I went to a LGBTQ support group", "My cat Oliver"], prompt) == 0.5
    assert evidence_recall([], prompt) is None


def test_bm25_ranks_the_turn_with_the_rare_query_word_first_and_leaves_out_unrelated_turns():
    bm25 = BM25(["I love my cat Oliver", "I love painting", "The weather is nice", "I love my dog"])
    assert bm25.ranked("What is the name of the cat?") == [0]
    assert bm25.ranked("what do I love")[:1] and set(bm25.ranked("love")) == {0, 1, 3}


def _chat(n: int) -> ChatImport:
    t = datetime(2023, 5, 8, tzinfo=timezone.utc)
    return ChatImport.model_validate(
        {"messages": [{"role": "user" if i % 2 == 0 else "assistant", "text": f"turn {i} about topic{i} " + "word " * 20, "time": t} for i in range(n)]}
    )


def test_baselines_stay_within_the_budget_recent_keeps_the_newest_in_order_and_bm25_the_best_match():
    chat = _chat(40)
    question = HumanMessage("what about topic7?")
    prompts = baseline_prompts(chat, question, budget=200)
    for name in ("recent", "bm25_turns"):
        assert count_message_tokens(prompts[name]) <= 200, name
    recent = prompts["recent"][0].text.splitlines()
    assert recent[-1].endswith(chat.messages[-1].text) and recent == sorted(recent, key=lambda line: int(line.split()[4]))
    assert "topic7 " in prompts["bm25_turns"][0].text.splitlines()[0]
    assert prompts["whole_history"][0].text.count("\n") == 39
    assert prompts["recent"][0].text.startswith("[8 May 2023] turn")


def test_percentile_is_nearest_rank():
    assert percentile([5, 1, 3, 2, 4], 50) == 3
    assert percentile(list(range(1, 101)), 95) == 95
    assert percentile([], 95) == 0.0


def test_verbatim_evidence_counts_only_whole_turns():
    prompt = PromptText("Caroline: The LGBTQ support group was powerful, I went yesterday!")
    assert evidence_recall(["I went yesterday!"], prompt, verbatim_only=True) == 1.0
    assert evidence_recall(["I went to the support group yesterday"], prompt) == 1.0  # most words
    assert evidence_recall(["I went to the support group yesterday"], prompt, verbatim_only=True) == 0.0


def test_bm25_excerpts_is_the_memory_agents_prompt_with_plain_bm25_turns_in_place_of_what_memory_found():
    from langchain_core.messages import AIMessage

    from core.context import Context
    from core.messages import stamp_sent_at
    from core.state import State
    from evals.recall_eval import TurnIndex, bm25_excerpts_prompt
    from nodes.reply import reply_prompt
    from prompts.reply_prompt import EPISODES_HEADER, MEMORIES_HEADER, parse_sections

    when = datetime(2023, 5, 8, 13, 0, tzinfo=timezone.utc)
    said = [stamp_sent_at((HumanMessage if i % 2 == 0 else AIMessage)(text, id=f"m{i}"), when) for i, text in enumerate([
        "Caroline: I adopted a puppy called Oscar.", "Melanie: Lovely!", "Caroline: My sister lives in Haifa.", "Melanie: Nice.",
        "Caroline: The weather is grey today.", "Melanie: Same here.",
    ])]
    question = stamp_sent_at(HumanMessage("What is the name of Caroline's puppy?", id="q"), when)
    state = State(messages=[*said, question], summarized_through="m3",
                  loaded_context={"facts": [{"text": "Caroline likes tea"}], "excerpts": []})
    ctx = Context()
    index = TurnIndex.of("t1", "Chat", list(state.messages), in_view={"m4", "m5", "q"})
    ours, _ = reply_prompt(state, ctx)
    plain = bm25_excerpts_prompt(state, ctx, index, question.text)
    assert plain.messages[:-1] == ours.messages[:-1]  # the same system message, summary and recent conversation
    sections = parse_sections(plain.messages)
    assert sections[EPISODES_HEADER].splitlines()[1] == "user: Caroline: I adopted a puppy called Oscar."
    assert "weather" not in sections[EPISODES_HEADER]  # in view already: not repeated
    assert "Caroline likes tea" not in sections[MEMORIES_HEADER]  # plain search: nothing else memory found
    assert count_message_tokens(plain.messages) <= ctx.prompt_token_budget


def test_a_question_budget_lets_the_excerpts_take_what_the_other_sections_leave_up_to_the_ceiling():
    ctx = Context(user_id="u")
    assert question_context(ctx, None) is ctx  # no budget given: the defaults, untouched
    smaller = question_context(ctx, 900)
    assert (smaller.prompt_token_budget, smaller.episodic_token_budget) == (900, ctx.episodic_token_budget)
    larger = question_context(ctx, 4000)
    assert (larger.prompt_token_budget, larger.episodic_token_budget) == (4000, 4000)  # the excerpts' cap rises with it
    huge = question_context(ctx, 20_000)
    assert (huge.prompt_token_budget, huge.episodic_token_budget) == (20_000, SAFETY_CEILINGS["episodic_token_budget"])
    assert huge.user_id == "u" and huge.model == ctx.model  # everything else as it was


def test_eval_recall_refuses_a_prompt_budget_over_the_servers_ceiling_before_touching_any_data(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit:
        main(["recall", "--dataset", str(tmp_path / "none.json"), "--prompt-budget", "300000"])

    assert exit.value.code == 2
    assert "--prompt-budget: at most 200,000 tokens" in capsys.readouterr().err
