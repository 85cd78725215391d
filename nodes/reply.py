"""reply: the model answers from explicit, labelled, budgeted context sections."""

from __future__ import annotations

from dataclasses import asdict

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langgraph.runtime import Runtime

import prompts
from nodes.compaction import model_view
from nodes.load_context import check_turn_message
from core.context import Context, get_context, thread_id_of
from core.messages import last_human_index, mark_memory_echo, no_answer_note, stamp_sent_at, without_unanswered
from core.metrics import count_tokens_used, timed
from prompts.reply_prompt import (
    EPISODES_HEADER,
    MEMORIES_HEADER,
    SUMMARY_HEADER,
    USER_CONTEXT_HEADER,
    BuiltPrompt,
    PromptBudgets,
    build_prompt,
    first_sentence,
    parse_sections,
)
from core.state import State
from llm.chat_model import OFFLINE, load_chat_model, model_label, resolve_model_name, with_output_cap
from llm.reply_checks import echo_kind, echo_targets, no_answer_text, without_markup
from nodes.stream_events import emit
from llm.text_tool_calls import answer_again, answer_in_plain_words, with_text_calls_resolved
from core.redaction import Redactor
from core.schemas import SummaryBoard
from memory.forgetting import redact_board, redactor_for
from nodes.tools import agent_tools


UNANSWERED_CALL = "Not run: the conversation moved on before this call was answered (e.g. the user did not confirm)."


def with_every_call_answered(messages: list[BaseMessage]) -> list[BaseMessage]:
    """Every tool call followed by a result, as chat APIs demand (OpenAI answers 400 otherwise).

    A call can stay unanswered in the history: the user sent a new message instead of
    answering a task confirmation, or a run died between the model's call and its tools.
    The model is shown a stand-in result for it; the stored history is left as it is.
    """
    out: list[BaseMessage] = []
    pending: dict[str, str] = {}

    def answer_pending() -> None:
        out.extend(ToolMessage(UNANSWERED_CALL, tool_call_id=call_id, name=name) for call_id, name in pending.items())
        pending.clear()

    for message in messages:
        if isinstance(message, ToolMessage):
            pending.pop(message.tool_call_id, None)
            out.append(message)
            continue
        answer_pending()
        out.append(message)
        if isinstance(message, AIMessage):
            pending.update({c["id"]: c["name"] for c in message.tool_calls})
    answer_pending()
    return out


def memory_sections_text(built: BuiltPrompt) -> str:
    """What memory gave the model this turn (profile, facts, tasks, chats, excerpts, summary)."""
    sections = parse_sections(built.messages)
    return "\n".join(sections.get(h, "") for h in (USER_CONTEXT_HEADER, MEMORIES_HEADER, EPISODES_HEADER, SUMMARY_HEADER))


def persona_text(ctx: Context) -> str:
    """The caller's own system prompt whole, else the named persona (its first sentence under the
    brief layout: a small model recited the longer text)."""
    if ctx.system_prompt.strip():
        return ctx.system_prompt.strip()
    text = prompts.persona(ctx.persona).text
    return first_sentence(text) if ctx.reply_rules == "brief" else text


def reply_prompt(state: State, ctx: Context, redactor: Redactor | None = None, thread_id: str | None = None) -> tuple[BuiltPrompt, list[BaseMessage]]:
    """The prompt the model gets for the newest user message, and this turn's tool steps after it.

    The one place the reply prompt is built: the reply node and ``eval recall`` both use it. With a
    ``redactor`` nothing the user had forgotten reaches the model, but the user's message of this
    turn, as they wrote it."""
    redactor = redactor or Redactor()
    view = model_view(state.messages, state.summarized_through)
    i = last_human_index(view)
    if i is None:  # the cursor never passes the newest human message; this is defensive
        raise RuntimeError("no user message in the model's view")
    recent, current, this_turn = view[:i], view[i], view[i + 1 :]
    recent = without_unanswered(recent)
    if redactor:
        recent, this_turn = redactor.messages_of(recent, thread_id), redactor.messages_of(this_turn, thread_id)
    board = SummaryBoard.model_validate(state.summary) if state.summary else SummaryBoard()
    built = build_prompt(
        persona_text=persona_text(ctx),
        loaded_context=redactor.value(state.loaded_context) if redactor else state.loaded_context,
        summary_text=redact_board(board, redactor).render() if redactor else board.render(),
        knowledge=state.retrieved_chunks,
        recent=recent,
        current=current,
        budgets=PromptBudgets(
            user_context=ctx.user_context_token_budget,
            summary=min(ctx.summary_token_budget, ctx.max_summary_tokens),
            episodes=ctx.episodic_token_budget,
            recent=ctx.max_context_tokens,
            total=ctx.prompt_token_budget,
        ),
        brief=ctx.reply_rules == "brief",
    )
    return built, list(this_turn)


async def reply(state: State, runtime: Runtime[Context]) -> dict:
    ctx = get_context(runtime)
    if (i := last_human_index(state.messages)) is not None:  # a run started past load_context (a state edit)
        check_turn_message(state.messages[i], ctx)
    thread_id = thread_id_of(runtime)
    built, this_turn = reply_prompt(state, ctx, await redactor_for(runtime.store, ctx.user_id), thread_id)
    # Tool calls and results of this turn follow the current message (the bounded tool loop).
    messages = with_every_call_answered([*built.messages, *this_turn])
    base_model = load_chat_model(ctx.model)
    if ctx.max_reply_tokens:
        base_model = with_output_cap(base_model, ctx.max_reply_tokens)
    model = base_model
    tools = agent_tools() if ctx.tools else []
    can_call_tools = bool(tools) and state.tool_steps < ctx.max_tool_steps
    if can_call_tools:
        try:
            model = model.bind_tools(tools)
        except NotImplementedError:
            pass  # a model without tool calling still answers
    calls = 1
    checked = not resolve_model_name(ctx.model).startswith(OFFLINE)  # the offline model restates memory by design
    said = echo_targets(messages)
    if checked:  # the token stream holds back what may be an echo (app.runs.turn_runner)
        emit({"event": "reply_check", "said": asdict(said)})
    with timed("reply"):
        response: AIMessage = await model.ainvoke(messages)
        # Small local models write calls as text: a valid one becomes the call, any other is never shown.
        response, needs_plain_answer = with_text_calls_resolved(response, tools if can_call_tools else [])
        # Template and tool markup (a raw "</tool_response>", "<|im_end|>") never reaches the user.
        response = without_markup(response)
        if not response.tool_calls and not response.text.strip():
            # An empty reply (small local models give one now and then, a line of spaces) is asked
            # again once without tools; a second empty one becomes a note, never a blank line.
            needs_plain_answer = True
        if needs_plain_answer:
            response = await answer_in_plain_words(base_model, messages, response)
            calls += 1
        # A reply that only echoes the user's message or repeats the previous reply (the 0.5B gave
        # Dana's first message back five times) is asked again once with a nudge, then becomes a note.
        echo = echo_kind(response.text, said) if checked and not response.tool_calls else None
        if echo is not None:
            if calls > 1:  # already asked again once this turn
                response = no_answer_note(no_answer_text(echo, said.user_text), id=response.id, usage_metadata=response.usage_metadata)
            else:
                response = await answer_again(base_model, messages, response, echo)
                calls += 1
    if response.tool_calls and not can_call_tools:
        # Out of tool budget: keep the text, drop the calls, so no call is left unanswered.
        response = AIMessage(
            content=response.content or "I could not finish looking that up within the tool budget.",
            id=response.id,
            usage_metadata=response.usage_metadata,
        )
    if not response.tool_calls:
        mark_memory_echo(response, memory_sections_text(built))
    stamp_sent_at(response)  # the reply's time: the history, the page and the episodic index show it
    usage = response.usage_metadata or {}
    count_tokens_used("reply", usage.get("input_tokens", 0), usage.get("output_tokens", 0))
    turn_usage = dict(state.turn_usage) if this_turn else {}
    turn_usage.update(
        {
            "model": model_label(base_model),
            "prompt_sections": built.section_tokens,
            "prompt_tokens_estimated": built.total_tokens,
            "input_tokens": turn_usage.get("input_tokens", 0) + usage.get("input_tokens", 0),
            "output_tokens": turn_usage.get("output_tokens", 0) + usage.get("output_tokens", 0),
            "model_calls": turn_usage.get("model_calls", 0) + calls,
        }
    )
    update: dict = {"messages": [response], "turn_usage": turn_usage}
    if response.tool_calls:
        update["tool_steps"] = state.tool_steps + 1
    return update
