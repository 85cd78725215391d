"""The LangSmith target of the extraction eval: one conversation in, what each speaker's memory holds out.

A variant is a chat model spec: the same production extraction path
(``extract_memories`` node → ``memory.extractor.extract`` →
``memory.writer.extraction.apply_extraction`` into the real store) runs with each
model, through a metering proxy for calls and tokens.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from evals.datasets.schema import Conversation
from evals.eval_database import EvalWorkspace
from evals.extraction_records import ExtractionOutput, SpeakerOutput
from evals.extraction_replay import replay_extraction
from evals.metered_model import CallMeter, MeteredChatModel
from evals.terminal import ProgressTracker
from core.context import Context
from llm.chat_model import load_chat_model, model_label, register_model, unregister_model

__all__ = ["ExtractionRunSettings", "make_extraction_target"]


@dataclass(frozen=True)
class ExtractionRunSettings:
    run_id: str
    max_turns: int | None = None


def make_extraction_target(
    settings: ExtractionRunSettings,
    workspace: EvalWorkspace,
    variant: str,
    progress: ProgressTracker | None = None,
) -> Callable[[dict], Awaitable[dict]]:
    """``async target(inputs) -> ExtractionOutput dict``; ``inputs``: ``{"key", "conversation", "speakers"}``."""
    inner = load_chat_model(variant)
    label = model_label(inner)

    async def extract_conversation(inputs: dict) -> dict:
        conversation = Conversation.model_validate(inputs["conversation"])
        start = time.perf_counter()
        meter = CallMeter()
        name = f"eval-{settings.run_id}-{uuid.uuid4().hex[:8]}"
        register_model(name, MeteredChatModel(inner=inner, meter=meter))
        speakers: list[SpeakerOutput] = []
        done = 0
        try:
            for speaker in inputs["speakers"]:
                user = workspace.user(variant, conversation.id, speaker)
                offset = done

                def on_turn(n: int, offset: int = offset) -> None:
                    if progress:
                        progress.turn(variant, conversation.id, offset + n)

                replay = await replay_extraction(
                    conversation,
                    speaker,
                    context=Context(user_id=user, model=name),
                    store=workspace.store,
                    meter=meter,
                    thread_id=f"eval-{settings.run_id}-{conversation.id}-{speaker}",
                    max_turns=settings.max_turns,
                    on_turn=on_turn,
                )
                done += len(replay.replayed_turn_ids)
                speakers.append(
                    SpeakerOutput(
                        speaker=speaker,
                        memories=replay.memories,
                        replayed_turn_ids=replay.replayed_turn_ids,
                        node_runs=replay.node_runs,
                        writer=dict(replay.writer),
                        failures=replay.failures,
                    )
                )
        finally:
            unregister_model(name)
        if progress:
            progress.unit_done(variant, conversation.id)
        calls = meter.records
        return ExtractionOutput(
            conversation_id=conversation.id,
            model=label,
            speakers=speakers,
            calls=len(calls),
            input_tokens=sum(c.input_tokens for c in calls),
            output_tokens=sum(c.output_tokens for c in calls),
            usage_reported=all(c.usage_reported for c in calls) if calls else True,
            wall_seconds=time.perf_counter() - start,
        ).model_dump(mode="json")

    return extract_conversation
