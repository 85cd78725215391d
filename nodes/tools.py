"""tools: what the model may call while replying, run by LangGraph's ToolNode.

Memory tools read; task tools change the user's task list and therefore ask the
user first with ``interrupt()``: the change is applied only after
``Command(resume={"approved": true})`` and exactly once.
"""

from __future__ import annotations

from typing import Any, Literal

from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.prebuilt import ToolNode, ToolRuntime
from langgraph.types import interrupt
import prompts

from core.context import Context, get_context
from core.dates import date_languages
from core.messages import current_turn, sent_at
from storage.memory_store import memory_store
from core.state import State
from memory.writer.extraction import apply_extraction
from memory.writer.merge_rules import TASK_DUPLICATE_THRESHOLD
from core.schemas import ExtractionResult, SummaryBoard, TaskUpdate, normalize_text, utcnow
from memory.extractor import with_dates
from memory import queries
from memory.forgetting import find_targets, forget
from core.redaction import distinctive_stems


# Typed with our context and state, so the tool-call schema matches what LangGraph injects.
AgentToolRuntime = ToolRuntime[Context, State]


def _state_value(runtime: AgentToolRuntime, key: str, default: Any = None) -> Any:
    state = runtime.state
    if isinstance(state, dict):
        return state.get(key, default)
    return getattr(state, key, default)


def _user(runtime: AgentToolRuntime) -> str:
    return get_context(runtime).user_id


def _saver(runtime: AgentToolRuntime) -> BaseCheckpointSaver:
    """A reader of the user's other chats: checkpoints live in the store's database."""
    return memory_store(runtime.store).checkpoint_reader()


def _current(runtime: AgentToolRuntime) -> queries.CurrentThread | None:
    """This chat as the run's state holds it now (its checkpoint may lag a step behind)."""
    thread_id = ((runtime.config or {}).get("configurable") or {}).get("thread_id")
    if not thread_id:
        return None
    summary = _state_value(runtime, "summary", {}) or {}
    snapshot = queries.ThreadSnapshot(
        messages=list(_state_value(runtime, "messages", []) or []),
        board=SummaryBoard.model_validate(summary) if summary else SummaryBoard(),
        summarized_through=_state_value(runtime, "summarized_through"),
        summary_folds=int(_state_value(runtime, "summary_folds", 0) or 0),
    )
    return queries.CurrentThread(thread_id=str(thread_id), snapshot=snapshot)


# The read tools are the MCP tools of the same names (memory.queries), rendered as short text for the model.
@tool
async def search_conversation_history(
    query: str,
    runtime: AgentToolRuntime,
    time_range: str = "all",
    limit: int = 5,
) -> str:
    """Search everything said in this chat (including parts already summarized) and in the user's
    other chats, with when it was said, and the chats' summaries. Use it when the user refers to
    something said earlier, or asks when something was said.
    time_range (when the messages were said): 'all', 'today', 'yesterday', '24h', '7d', '2w', '3m',
    'YYYY-MM-DD' or 'YYYY-MM-DD..YYYY-MM-DD'."""
    found = await queries.search_conversation_history(
        runtime.store, _saver(runtime), _user(runtime), query, time_range, limit, current=_current(runtime)
    )
    lines = [f"[{h.sent_at:%Y-%m-%d %H:%M} UTC, {h.role}, \"{h.chat_title}\" #{h.message_index}] {h.snippet}" for h in found.messages]
    lines += [f"[chat {h.chat_id} \"{h.title}\" {h.last_activity:%Y-%m-%d}] {h.summary_snippet}" for h in found.summaries]
    return "\n".join(lines) if lines else "Nothing in the conversation history matches."


@tool
async def get_conversation_summary(runtime: AgentToolRuntime, chat_id: str | None = None) -> str:
    """The running summary of this chat, or of another chat of the user's by its id."""
    found = await queries.get_conversation_summary(runtime.store, _saver(runtime), _user(runtime), chat_id, current=_current(runtime))
    if not found.summary_text:
        return f"{found.title}\n(no summary yet: everything is still in the recent messages)"
    return f"{found.title}\n{found.summary_text}"


@tool
async def recall_context(
    context_type: Literal["action_items", "pending_questions", "facts", "entities", "tasks"],
    runtime: AgentToolRuntime,
) -> str:
    """Recall one kind of memory: this chat's action items, pending questions or entities,
    or the user's stored facts or tasks."""
    current = _current(runtime)
    in_chat = context_type in ("action_items", "pending_questions", "entities") and current is not None
    found = await queries.recall_context(
        runtime.store, _saver(runtime), _user(runtime), context_type,
        chat_id=current.thread_id if in_chat else None, current=current,
    )
    lines = [f"- [{i.id}] {i.text} ({i.status})" if i.status else f"- {i.text}" for i in found.items]
    empty = {"facts": "No facts stored.", "tasks": "No tasks."}.get(context_type, f"No {context_type.replace('_', ' ')} recorded.")
    return "\n".join(lines) or empty


async def _confirmed_task_change(runtime: AgentToolRuntime, update: TaskUpdate) -> str:
    # The due words mean a date from the user's message, not from when the user confirms (maybe much later).
    human, _ = current_turn(list(_state_value(runtime, "messages", []) or []))
    said_at = (sent_at(human) if human is not None else None) or utcnow()
    (update,) = with_dates(ExtractionResult(task_updates=[update]), said_at, date_languages(update.due or "")).task_updates
    # Pauses the run; the client answers with Command(resume={"approved": bool}).
    answer = interrupt(
        {
            "type": "task_change",
            "action": update.action,
            "description": update.description,
            "task_id": update.task_id,
            "status": update.status,
            "due": update.due,
            "due_date": update.due_date,
        }
    )
    approved = answer.get("approved") if isinstance(answer, dict) else answer
    if approved is not True:  # only an explicit yes changes the list ("false" or None must not)
        return f"The user declined: {update.action} task '{update.description}'. Nothing changed."
    report = await apply_extraction(
        runtime.store,
        _user(runtime),
        ExtractionResult(task_updates=[update]),
        thread_id=(runtime.config or {}).get("configurable", {}).get("thread_id"),
    )
    if not report.is_empty():
        return "Done: " + report.describe()
    # Nothing new to write. A resumed tool node runs every approved call again (one call's
    # approval re-runs its siblings), so "already in place" is the common, successful case.
    in_place = await _already_in_place(runtime, update)
    if in_place:
        return f"Done: {in_place}"
    return f"No change: '{update.description}' matched no task."


async def _already_in_place(runtime: AgentToolRuntime, update: TaskUpdate) -> str | None:
    """Whether the change is already what the task list says (bounded look-ups, never the whole list)."""
    user = _user(runtime)
    target = await queries.get_task(runtime.store, user, update.task_id) if update.task_id else None
    if target is None:
        wanted = normalize_text(update.description)
        hits = await queries.search_tasks(runtime.store, user, update.description, limit=3)
        target = next((t for t, _ in hits if normalize_text(t.description) == wanted), None)
        if target is None and update.action == "add" and hits and hits[0][1] >= TASK_DUPLICATE_THRESHOLD:
            target = hits[0][0]
    if target is None:
        return None
    if update.action == "add" and target.status != "done":
        return f"'{target.description}' is on the task list."
    if (update.action == "complete" or update.status == "done") and target.status == "done":
        return f"'{target.description}' is marked done."
    return None


@tool
async def add_task(description: str, runtime: AgentToolRuntime, due: str | None = None) -> str:
    """Add a task to the user's task list (the user is asked to confirm)."""
    return await _confirmed_task_change(runtime, TaskUpdate(action="add", description=description, due=due))


@tool
async def update_task(
    description: str,
    runtime: AgentToolRuntime,
    task_id: str | None = None,
    status: Literal["open", "in_progress", "done"] | None = None,
    due: str | None = None,
) -> str:
    """Change a task's status or due date; name it by id or by its description (the user confirms)."""
    return await _confirmed_task_change(runtime, TaskUpdate(action="update", description=description, task_id=task_id, status=status, due=due))


@tool
async def complete_task(description: str, runtime: AgentToolRuntime, task_id: str | None = None) -> str:
    """Mark a task done; name it by id or by its description (the user confirms)."""
    return await _confirmed_task_change(runtime, TaskUpdate(action="complete", description=description, task_id=task_id))


TASK_TOOLS = frozenset({"add_task", "update_task", "complete_task"})
"""The tools that change the task list, each only once the user confirms."""


@tool
async def forget_memory(what: str, runtime: AgentToolRuntime) -> str:
    """Forget something about the user everywhere it is kept (profile, preferences, facts, tasks,
    past messages, summaries), when the user asks you to forget it. ``what`` names it in the user's
    words, e.g. "that I play chess". The user is asked to confirm."""
    user = _user(runtime)
    found = await find_targets(runtime.store, user, what)
    if not found and not distinctive_stems(what):
        return "Nothing remembered matches that; nothing was forgotten."
    # Pauses the run; the client answers with Command(resume={"approved": bool}). The user sees
    # what will go; the model never sees those words again.
    answer = interrupt({"type": "forget", "what": what, "items": [c.label for c in found]})
    approved = answer.get("approved") if isinstance(answer, dict) else answer
    if approved is not True:
        return "The user declined: nothing was forgotten."
    report = await forget(runtime.store, user, [c.target for c in found], words=what)
    if report is None:
        return "Nothing remembered matches that; nothing was forgotten."
    # Counts only: the words themselves must not come back to the model.
    return f"Done: forgotten everywhere ({report.facts} fact(s), {len(report.fields)} profile field(s) or preference(s), " \
        f"{report.tasks} task(s), {report.messages} message(s), {report.summaries} summary(ies)). {prompts.FORGET_DONE_NOTE}"


FORGET_TOOLS = frozenset({"forget_memory"})
"""The tools that forget, each only once the user confirms."""


def agent_tools() -> list[BaseTool]:
    return [search_conversation_history, get_conversation_summary, recall_context, add_task, update_task, complete_task, forget_memory]


def _tool_error(exc: Exception) -> str:
    return f"Tool error: {exc}. Answer without this tool or try other arguments."


tools = ToolNode(agent_tools(), name="tools", handle_tool_errors=_tool_error)
