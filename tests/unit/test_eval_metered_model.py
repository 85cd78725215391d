"""The metering proxy: the production structured-call path is unchanged, and every call is counted."""

from __future__ import annotations

from langchain_core.messages import HumanMessage, SystemMessage

import prompts
from evals.metered_model import CallMeter, MeteredChatModel, call_kind
from offline_model.model import OfflineChatModel
from llm.structured import invoke_structured
from core.schemas import SummaryBoard
from memory.summarizer import build_fold_messages, build_recompress_messages, fold_summary
from tests.support.scripted_model import ScriptedChatModel


def test_call_kinds_come_from_the_prompt_tags():
    board = SummaryBoard(summary="Earlier.")
    assert call_kind(build_fold_messages(board, [HumanMessage("hi")], "structured")) == "fold"
    assert call_kind(build_recompress_messages(board, 100, "structured")) == "recompress"
    assert call_kind([HumanMessage(prompts.tagged(prompts.CHAT_SUMMARY_TAG, "x"))]) == "title"
    assert call_kind([HumanMessage(prompts.tagged(prompts.USER_MESSAGE_TAG, "x"))]) == "extract"
    assert call_kind([SystemMessage("be nice"), HumanMessage("hello")]) == "other"


async def test_a_fold_through_the_proxy_equals_the_fold_without_it():
    messages = [HumanMessage("I'm Priya and I live in Lisbon with my cat Biscuit."), HumanMessage("We fly on 14 March.")]
    direct = await fold_summary(OfflineChatModel(), SummaryBoard(), messages, "structured")
    meter = CallMeter()
    metered = await fold_summary(MeteredChatModel(inner=OfflineChatModel(), meter=meter), SummaryBoard(), messages, "structured")
    assert metered.value == direct.value
    assert [r.kind for r in meter.records] == ["fold"]
    record = meter.records[0]
    assert record.usage_reported and record.input_tokens == direct.input_tokens and record.output_tokens == direct.output_tokens


async def test_a_repair_call_is_counted_and_tokens_are_estimated_when_the_model_reports_none():
    replies = iter(["not json", '{"summary": "fixed"}'])
    model = ScriptedChatModel(responder=lambda kind, messages: next(replies))
    meter = CallMeter()
    result = await invoke_structured(
        MeteredChatModel(inner=model, meter=meter), SummaryBoard, build_fold_messages(SummaryBoard(), [HumanMessage("hi")], "narrative")
    )
    assert result.value.summary == "fixed"
    assert [r.kind for r in meter.records] == ["fold", "fold"]  # the structured call and its repair
    assert all(not r.usage_reported and r.input_tokens > 0 for r in meter.records)
