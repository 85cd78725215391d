"""extract_memories: turn the latest exchange into facts, preferences, profile fields and tasks."""

from __future__ import annotations

import logging

from langgraph.errors import GraphBubbleUp
from langgraph.runtime import Runtime

from core.context import Context, get_context, thread_id_of
from core.messages import adds_no_evidence, current_turn, is_stopped, last_human_index, sent_at
from core.metrics import EXTRACTION_FAILURES, MEMORIES_WRITTEN, count_failure, count_tokens_used, timed
from core.state import State
from nodes.stream_events import NOSTREAM, emit
from nodes.tools import FORGET_TOOLS, TASK_TOOLS
from llm.chat_model import load_chat_model
from core.errors import ModelOutputError
from llm.chat_model import model_label
from memory.extractor import RULES_ONLY, extract
from memory.forgetting import STATE_CHANNELS, redactor_for, state_redaction
from memory.writer.extraction import apply_extraction, mark_used
from memory.user_memory import get_user_document, stored_tasks, search_facts

log = logging.getLogger(__name__)

RELATED_FACTS = 8



async def related_memories(store, user_id: str, user_text: str, reply_text: str) -> dict:
    """The stored memories the extractor must see to update rather than duplicate (searched, not all)."""
    seen: dict[str, dict] = {}
    for query in (user_text, reply_text):
        for fact, score in await search_facts(store, user_id, query, limit=RELATED_FACTS):
            seen.setdefault(fact.id, {"id": fact.id, "text": fact.text, "importance": fact.importance})
    doc = await get_user_document(store, user_id)
    tasks = await stored_tasks(store, user_id, newest=20)
    return {
        "facts": list(seen.values())[: RELATED_FACTS * 2],
        "profile": doc.profile.model_dump(exclude_defaults=True),
        "preferences": doc.preferences.model_dump(exclude_defaults=True),
        "tasks": [{"id": t.id, "description": t.description, "status": t.status} for t in tasks[:20]],
    }


def _asked_about_tasks(messages) -> bool:
    """This turn's reply called a task tool: the user confirmed or declined it, so the rules add no task."""
    i = last_human_index(messages)
    return i is not None and any(c.get("name") in TASK_TOOLS for m in messages[i + 1 :] for c in getattr(m, "tool_calls", None) or [])


def _asked_to_forget(messages) -> bool:
    """This turn asked to forget (a forget tool was called): it teaches memory nothing, confirmed or not."""
    i = last_human_index(messages)
    return i is not None and any(c.get("name") in FORGET_TOOLS for m in messages[i + 1 :] for c in getattr(m, "tool_calls", None) or [])


async def extract_memories(state: State, runtime: Runtime[Context]) -> dict:
    try:
        # The facts recalled into this turn's prompt, marked used here, after the reply: a write
        # before the first token cost load_context ~5 ms at 100,000 indexed messages.
        facts = (state.loaded_context or {}).get("facts") or []
        user_id = get_context(runtime).user_id
        await mark_used(runtime.store, user_id, [f["id"] for f in facts if f.get("id")])
        update = await _extract_memories(state, runtime)
        # The turn's last node: a forget that committed while the turn ran (after summarize read the
        # ledger) reaches the state the turn leaves, not only the head it found.
        values = {**{c: getattr(state, c) for c in STATE_CHANNELS}, **update}
        return update | await state_redaction(runtime.store, user_id, values)
    except GraphBubbleUp:
        raise
    except Exception as exc:  # reading related memories or writing the result failed
        count_failure(EXTRACTION_FAILURES, exc)
        raise


async def _extract_memories(state: State, runtime: Runtime[Context]) -> dict:
    ctx = get_context(runtime)
    if ctx.extract_every_n_turns <= 0 or state.user_turns % ctx.extract_every_n_turns != 0:
        return {"memory_written": {"skipped": f"extraction runs every {ctx.extract_every_n_turns} turns"}}
    human, reply = current_turn(state.messages)
    if human is None:
        return {}
    if is_stopped(reply):
        # The rule for stopped turns: kept in the chat, taught nothing (regenerate to have it learned).
        return {"memory_written": {"skipped": "the reply was stopped"}}
    if _asked_to_forget(state.messages):  # "forget that I work as a nurse" must not teach "Works as a nurse"
        return {"memory_written": {"skipped": "the turn asked to forget"}}
    store = runtime.store
    model = load_chat_model(ctx.model)
    # No reply yet (a replayed conversation ending on the user's turn): what the user said still counts.
    # A reply that only repeated memory is no evidence about the user: the extractor reads no word of it.
    reply_text = reply.text if reply is not None and not adds_no_evidence(reply) else ""
    redactor = await redactor_for(store, ctx.user_id)  # forgotten things reach no extraction call
    reply_text = redactor.text(reply_text, reply=True)
    rule_texts: list[str] = []
    with timed("extract_memories"):
        stored = redactor.value(await related_memories(store, ctx.user_id, human.text, reply_text))
        try:
            result = await extract(
                model, human.text, reply_text, stored, config=NOSTREAM, said_at=sent_at(human),
                rule_tasks=not _asked_about_tasks(state.messages), rule_texts=rule_texts,
            )
        except GraphBubbleUp:
            raise
        except Exception as exc:
            # Write nothing rather than half an update; the turn still has its answer (already
            # streamed and checkpointed), so a failed memory call must not fail the run.
            count_failure(EXTRACTION_FAILURES, exc, model_call=True)
            if isinstance(exc, ModelOutputError):
                log.warning("memory extraction failed; nothing written: %s", exc)
                reason = str(exc)
            else:  # the provider failed (HTTP error, timeout)
                log.warning("memory extraction call failed; nothing written", exc_info=True)
                reason = f"The model call for memory extraction failed ({type(exc).__name__}: {str(exc)[:200]})."
            written = {"error": reason}
            emit({"event": "memory", **written})
            return {"memory_written": written}
        count_tokens_used("extract", result.input_tokens, result.output_tokens)
        report = await apply_extraction(
            store, ctx.user_id, result.value, thread_id=thread_id_of(runtime), message_id=human.id,
            said_at=sent_at(human), by=f"model {model_label(model)}", rule_texts=frozenset(rule_texts),
        )
    written = report.as_dict()
    if result.method == RULES_ONLY:  # the model failed; what the rules found was written
        written["model_error"] = result.errors[-1]
    for change, count in report.written_counts().items():
        MEMORIES_WRITTEN.labels(kind=change).inc(count)
    if not report.is_empty():
        written["described"] = report.describe()
        emit({"event": "memory", **written})
    return {"memory_written": written}
