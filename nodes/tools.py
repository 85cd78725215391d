"""tools: what the model may call while replying, run by LangGraph's ToolNode.

Memory tools read; task tools change the user's task list and therefore ask the
user first with ``interrupt()``: the change is applied only after
``Command(resume={"approved": true})`` and exactly once.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any, Literal

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.prebuilt import ToolNode, ToolRuntime
from langgraph.types import interrupt

from core.context import Context, get_context
from core.state import State
from memory.memory_writer import TASK_DUPLICATE_THRESHOLD, apply_extraction
from core.schemas import ExtractionResult, SummaryBoard, TaskUpdate, normalize_text, utcnow
from memory.summarizer import render_transcript
from memory.user_memory import get_chat, list_facts, list_tasks, search_chats, search_tasks


# Typed with our context and state, so the tool-call schema matches what LangGraph injects.
AgentToolRuntime = ToolRuntime[Context, State]


def _state_value(runtime: AgentToolRuntime, key: str, default: Any = None) -> Any:
    state = runtime.state
    if isinstance(state, dict):
        return state.get(key, default)
    return getattr(state, key, default)


def _user(runtime: AgentToolRuntime) -> str:
    return get_context(runtime).user_id


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"\w+", text.casefold()) if len(w) > 2}


@tool
async def search_conversation_history(
    query: str,
    runtime: AgentToolRuntime,
    time_range: Literal["all", "today", "last_7_days", "last_30_days"] = "all",
    limit: int = 5,
) -> str:
    """Search the full history of this chat (including parts already summarized) and the
    summaries of the user's other chats. Use it when the user refers to something said earlier."""
    limit = max(1, min(int(limit), 20))
    terms = _words(query)
    hits: list[str] = []
    messages = _state_value(runtime, "messages", [])
    for m in messages:
        if m.type not in ("human", "ai") or not isinstance(m.content, str):
            continue
        overlap = len(terms & _words(m.content))
        if overlap:
            hits.append((overlap, render_transcript([m])))
    hits.sort(key=lambda h: -h[0])
    lines = [h[1][:400] for h in hits[:limit]]
    days = {"today": 1, "last_7_days": 7, "last_30_days": 30}.get(time_range)
    since = utcnow() - timedelta(days=days) if days else None
    for chat, score in await search_chats(runtime.store, _user(runtime), query, limit=limit):
        if since and chat.last_activity < since:
            continue
        if score >= 0.3:
            lines.append(f"[chat {chat.thread_id} \"{chat.title}\" {chat.last_activity:%Y-%m-%d}] {chat.summary_text[:300]}")
    return "\n".join(lines) if lines else "Nothing in the conversation history matches."


@tool
async def get_conversation_summary(runtime: AgentToolRuntime, chat_id: str | None = None) -> str:
    """The running summary of this chat, or of another chat of the user's by its id."""
    if chat_id:
        chat = await get_chat(runtime.store, _user(runtime), chat_id)
        if chat is None:
            return f"No chat with id {chat_id}."
        return f"{chat.title}\n{chat.summary_text or '(no summary yet)'}"
    summary = _state_value(runtime, "summary", {}) or {}
    board = SummaryBoard.model_validate(summary)
    return board.render() or "This chat has no summary yet: everything is still in the recent messages."


@tool
async def recall_context(
    context_type: Literal["action_items", "pending_questions", "facts", "entities", "tasks"],
    runtime: AgentToolRuntime,
) -> str:
    """Recall one kind of memory: this chat's action items, pending questions or entities,
    or the user's stored facts or tasks."""
    board = SummaryBoard.model_validate(_state_value(runtime, "summary", {}) or {})
    if context_type in ("action_items", "pending_questions", "entities"):
        items = getattr(board, context_type)
        return "\n".join(f"- {i}" for i in items) or f"No {context_type.replace('_', ' ')} recorded."
    if context_type == "facts":
        facts = await list_facts(runtime.store, _user(runtime))
        return "\n".join(f"- {f.text}" for f in facts) or "No facts stored."
    tasks = await list_tasks(runtime.store, _user(runtime))
    return "\n".join(f"- [{t.id}] {t.description} ({t.status})" for t in tasks) or "No tasks."


async def _confirmed_task_change(runtime: AgentToolRuntime, update: TaskUpdate) -> str:
    # Pauses the run; the client answers with Command(resume={"approved": bool}).
    answer = interrupt(
        {
            "type": "task_change",
            "action": update.action,
            "description": update.description,
            "task_id": update.task_id,
            "status": update.status,
            "due": update.due,
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
    tasks = await list_tasks(runtime.store, _user(runtime))
    by_id = {t.id: t for t in tasks}
    wanted = normalize_text(update.description)
    target = by_id.get(update.task_id or "") or next((t for t in tasks if normalize_text(t.description) == wanted), None)
    if target is None and update.action == "add":
        hits = await search_tasks(runtime.store, _user(runtime), update.description, limit=1)
        target = hits[0][0] if hits and hits[0][1] >= TASK_DUPLICATE_THRESHOLD else None
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


def agent_tools() -> list[BaseTool]:
    return [search_conversation_history, get_conversation_summary, recall_context, add_task, update_task, complete_task]


def _tool_error(exc: Exception) -> str:
    return f"Tool error: {exc}. Answer without this tool or try other arguments."


tools = ToolNode(agent_tools(), name="tools", handle_tool_errors=_tool_error)


def budget_exhausted_messages(message: AIMessage) -> list[ToolMessage]:
    """Answers to tool calls made after the tool budget ran out, so no call stays unanswered."""
    return [
        ToolMessage(content="Tool budget for this reply is used up; answer with what you have.", tool_call_id=c["id"], name=c["name"])
        for c in message.tool_calls
    ]
