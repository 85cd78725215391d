"""The LangSmith target of the summaries eval: one conversation in, its summary and costs out.

For one prompt variant, the target replays the conversation through the
production summarize node (``summary_replay``) with a metered model, then,
when a reader model is configured, answers the probe questions from the final
summary alone. It returns a ``SummaryOutput`` dict; scoring is the
evaluators' job.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from evals.datasets.schema import Conversation
from evals.metered_model import CallMeter, MeteredChatModel
from evals.metrics import count_tokens
from evals.summary_reader import answer_all
from evals.summary_records import FoldOutput, ProbeAnswer, SummaryOutput
from evals.summary_replay import SummaryReplay, replay_summaries
from evals.terminal import ProgressTracker
from core.context import Context
from llm.chat_model import load_chat_model, model_label, register_model, unregister_model

__all__ = ["SummaryRunSettings", "make_summary_target", "summary_output"]


@dataclass(frozen=True)
class SummaryRunSettings:
    model: str  # spec for load_chat_model ("offline", "openai:gpt-4.1-mini", a registered name)
    context: Context  # window, tail, budgets; user_id is the eval's user; model/summary_prompt are set per run
    run_id: str
    reader_model: str | None = None
    closing_fold: bool = True
    concurrency: int = 8


def summary_output(replay: SummaryReplay, model: str, answers: list[ProbeAnswer] | None, reader: str | None) -> SummaryOutput:
    board = replay.final_board
    by_kind = Counter(c.kind for c in replay.calls)
    return SummaryOutput(
        conversation_id=replay.conversation_id,
        variant=replay.variant,
        model=model,
        summary=board.render(),
        board=board.model_dump(mode="json"),
        folds=[
            FoldOutput(
                index=f.index,
                after_message=f.after_message,
                node_seconds=f.node_seconds,
                model_seconds=f.model_seconds,
                calls=len(f.calls),
                input_tokens=sum(c.input_tokens for c in f.calls),
                output_tokens=sum(c.output_tokens for c in f.calls),
                closing=f.closing,
                board=f.board,
            )
            for f in replay.folds
        ],
        messages=len(replay.messages),
        conversation_tokens=count_tokens("\n".join(m.text for m in replay.messages)),
        node_runs=replay.node_runs,
        calls_by_kind=dict(by_kind),
        input_tokens=sum(c.input_tokens for c in replay.calls),
        output_tokens=sum(c.output_tokens for c in replay.calls),
        usage_reported=all(c.usage_reported for c in replay.calls) if replay.calls else True,
        wall_seconds=replay.wall_seconds,
        errors=replay.errors,
        reader_model=reader,
        answers=answers,
    )


def make_summary_target(
    settings: SummaryRunSettings,
    store,
    variant: str,
    progress: ProgressTracker | None = None,
) -> Callable[[dict], Awaitable[dict]]:
    """``async target(inputs) -> SummaryOutput dict`` for one prompt variant.

    ``inputs``: ``{"key", "conversation": Conversation dict, "questions": [{"question_id", "question"}]}``.
    ``progress`` is told every replayed turn and every finished conversation.
    """
    inner = load_chat_model(settings.model)
    label = model_label(inner)
    reader = load_chat_model(settings.reader_model) if settings.reader_model else None

    async def summarize_conversation(inputs: dict) -> dict:
        conversation = Conversation.model_validate(inputs["conversation"])
        meter = CallMeter()
        name = f"eval-{settings.run_id}-{uuid.uuid4().hex[:8]}"
        register_model(name, MeteredChatModel(inner=inner, meter=meter))
        try:
            ctx = replace(settings.context, model=name, summary_prompt=variant)
            replay = await replay_summaries(
                conversation,
                context=ctx,
                store=store,
                meter=meter,
                thread_id=f"eval-{settings.run_id}-{variant}-{conversation.id}",
                closing_fold=settings.closing_fold,
                on_turn=(lambda n: progress.turn(variant, conversation.id, n)) if progress else None,
            )
        finally:
            unregister_model(name)
        answers = None
        if reader is not None:
            questions = inputs.get("questions") or []
            texts = await answer_all(reader, replay.final_board.render(), [q["question"] for q in questions], settings.concurrency)
            answers = [ProbeAnswer(question_id=q["question_id"], answer=a) for q, a in zip(questions, texts)]
        output = summary_output(replay, label, answers, model_label(reader) if reader else None)
        if progress:
            progress.unit_done(variant, conversation.id)
        return output.model_dump(mode="json")

    return summarize_conversation
