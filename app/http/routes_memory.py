"""What the agent remembers about the caller: view, correct, delete; and forgetting the caller.

Edits take the user's memory write lock (storage.user_write_lock), the same one the
agent's memory update holds, so an edit and an extraction never interleave their
read-modify-write steps. PATCH of a fact or task re-embeds it (a store put).

A stored item that does not validate (memory.user_memory) is listed under ``invalid``
with its key and error, can be deleted (by its own route or ``/memory/invalid``), and
cannot be patched (409 ``invalid_item``).
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field

from app.http.auth import current_user
from app.http.errors import ApiError, not_found
from app.http.routes_chats import stop_all_user_runs
from app.http.schemas import (
    Deleted,
    ErrorResponse,
    FactList,
    FactPatch,
    InvalidItemList,
    InvalidItemOut,
    Me,
    TaskList,
    TaskPatch,
)
from app.http.services import Services, get_services
from memory.chat_admin import forget_user_everywhere
from core.errors import InvalidMessage
from core.schemas import Fact, Preferences, PreferencesPatch, Profile, ProfilePatch, Task
from core.text_validation import BoundedText, Identifier, StorableText
from memory.kinds import KINDS
from memory.writer.edits import delete_invalid as delete_invalid_memory, delete_item, edit_fact, edit_task, edit_user_document
from memory import queries as q
from memory.forgetting import FORGET_CHARS, ForgetReport, ForgetTarget, forget, forget_request
from storage import forget_ledger
from memory.queries import (
    InvalidItem, ItemIsValid, Kind, check_item, get_user_document, invalid_items, list_facts, memory_sources, sources_as_json,
)

router = APIRouter(tags=["memory"])


class ForgetIn(BaseModel):
    # maxLength for the OpenAPI docs; the limit itself is memory.forgetting's (every way to forget passes there).
    text: BoundedText(FORGET_CHARS) = Field(
        description=f"What to forget, in the user's words (\"that I work as a nurse\", \"Porto\"): at most {FORGET_CHARS} characters.",
        json_schema_extra={"maxLength": FORGET_CHARS},
    )


_ERRORS = {401: {"model": ErrorResponse}, 404: {"model": ErrorResponse}, 422: {"model": ErrorResponse}}
_ITEM_ERRORS = {**_ERRORS, 409: {"model": ErrorResponse}}


def _invalid_out(items: list[InvalidItem]) -> list[InvalidItemOut]:
    return InvalidItemOut.of(items)


async def _stored(services: Services, user: str, kind: Kind, key: str, what: str):
    """The stored item as its model; 404 when absent, 409 when it does not validate (it can only be deleted)."""
    item = await services.backend.store.aget(KINDS[kind].namespace(user), key)
    if item is None:
        raise not_found(f"{what} {key}")
    parsed, error = check_item(kind, item)
    if error is not None:
        raise ApiError(409, "invalid_item", f"{what} {key} is stored in an invalid form ({error}); it can only be deleted.")
    return parsed


# --------------------------------------------------------------------------- profile and preferences
def _document_part_routes(part: str, model: type, patch: type, reset_doc: str) -> None:
    """GET, PATCH and DELETE of one part of the user's profile document (``profile``, ``preferences``)."""

    async def read(user: str = Depends(current_user), services: Services = Depends(get_services)):
        return getattr(await get_user_document(services.backend.store, user), part)

    async def change(body, user: str = Depends(current_user), services: Services = Depends(get_services)):
        # A field sent as null is forgotten everywhere it lives (not only emptied here).
        cleared = [ForgetTarget(part=part, key=k) for k in body.model_fields_set if getattr(body, k) is None]
        if cleared:
            await forget(services.backend.store, user, cleared)
        changes = {k: getattr(body, k) for k in body.model_fields_set if getattr(body, k) is not None}
        if not changes:
            return getattr(await get_user_document(services.backend.store, user), part)
        return await edit_user_document(services.backend.store, user, part, changes)

    async def reset(user: str = Depends(current_user), services: Services = Depends(get_services)):
        fields = [ForgetTarget(part=part, key=k) for k in model.model_fields]
        await forget(services.backend.store, user, fields)
        return getattr(await get_user_document(services.backend.store, user), part)

    change.__annotations__["body"] = patch  # the part's own PATCH model, for validation and the OpenAPI schema
    for method, endpoint, name, doc in (
        ("GET", read, f"get_{part}", None),
        ("PATCH", change, f"patch_{part}", "Change the fields sent (null clears one; a blank value, or a blank item of a list, is refused with 422)."),
        ("DELETE", reset, f"delete_{part}", reset_doc),
    ):
        router.add_api_route(f"/memory/{part}", endpoint, methods=[method], name=name, description=doc, response_model=model, responses=_ERRORS)


_document_part_routes("profile", Profile, ProfilePatch, "Forget the whole profile (preferences stay).")
_document_part_routes("preferences", Preferences, PreferencesPatch, "Forget all preferences (the profile stays).")


# --------------------------------------------------------------------------- facts
@router.get("/memory/facts", response_model=FactList, responses=_ERRORS)
async def get_facts(
    include_superseded: bool = Query(False, description="Also facts replaced by newer ones."),
    user: str = Depends(current_user),
    services: Services = Depends(get_services),
):
    store = services.backend.store
    facts = await list_facts(store, user, include_superseded=include_superseded)
    return FactList(facts=facts, invalid=_invalid_out(await invalid_items(store, user, ("facts",))))


async def _patch_item(services: Services, user: str, kind: Kind, key: str, what: str, edit):
    """Shared by the fact and task PATCH routes (a blank text was refused by the body's types, 422):
    404/409 as ``_stored``, then ``edit()`` (404 when the item vanished meanwhile)."""
    await _stored(services, user, kind, key, what)  # 404 when absent, 409 when stored invalid
    item = await edit()
    if item is None:
        raise not_found(f"{what} {key}")
    return item


async def _delete(services: Services, user: str, kind: Kind, key: str, what: str) -> Deleted:
    """A valid item is forgotten everywhere it lives (memory.forgetting); an invalid one is deleted."""
    store = services.backend.store
    item = await store.aget(KINDS[kind].namespace(user), key)
    if item is None:
        raise not_found(f"{what} {key}")
    if check_item(kind, item)[1] is None:
        report = await forget(store, user, [ForgetTarget(part=kind, key=key)])
        if report is not None:
            return forget_counts(report)
    if not await delete_item(store, user, kind, key):
        raise not_found(f"{what} {key}")
    return Deleted(deleted={kind: 1})


def forget_counts(report: ForgetReport) -> Deleted:
    counts = {"facts": report.facts, "tasks": report.tasks, "fields": len(report.fields), "messages": report.messages,
              "summaries": report.summaries, "chats": report.chats}
    return Deleted(deleted={k: v for k, v in counts.items() if v} or {"facts": 0})


@router.patch("/memory/facts/{fact_id}", response_model=Fact, responses=_ITEM_ERRORS)
async def patch_fact(fact_id: Identifier, body: FactPatch, user: str = Depends(current_user), services: Services = Depends(get_services)):
    """Correct a fact; a new text is re-embedded, so recall finds it by its new meaning."""
    return await _patch_item(
        services, user, "facts", fact_id, "Fact",
        lambda: edit_fact(services.backend.store, user, fact_id, text=body.text, importance=body.importance, tags=body.tags),
    )


@router.delete("/memory/facts/{fact_id}", response_model=Deleted, responses=_ERRORS)
async def delete_fact(fact_id: Identifier, user: str = Depends(current_user), services: Services = Depends(get_services)):
    """Delete a fact, valid or not."""
    return await _delete(services, user, "facts", fact_id, "Fact")


async def _exists(services: Services, namespace: tuple[str, ...], key: str, what: str) -> None:
    # Existence only: an item that does not validate must stay deletable.
    if await services.backend.store.aget(namespace, key) is None:
        raise not_found(f"{what} {key}")


# --------------------------------------------------------------------------- tasks
@router.get("/memory/tasks", response_model=TaskList, responses=_ERRORS)
async def get_tasks(
    include_done: bool = Query(True, description="Also completed tasks."),
    user: str = Depends(current_user),
    services: Services = Depends(get_services),
):
    return await q.list_tasks(services.backend.store, user, include_done=include_done, with_invalid=True)


@router.patch("/memory/tasks/{task_id}", response_model=Task, responses=_ITEM_ERRORS)
async def patch_task(task_id: Identifier, body: TaskPatch, user: str = Depends(current_user), services: Services = Depends(get_services)):
    """Change a task's description, status or due date (null clears the due date)."""
    return await _patch_item(
        services, user, "tasks", task_id, "Task",
        lambda: edit_task(services.backend.store, user, task_id, {k: getattr(body, k) for k in body.model_fields_set}),
    )


@router.delete("/memory/tasks/{task_id}", response_model=Deleted, responses=_ERRORS)
async def delete_task(task_id: Identifier, user: str = Depends(current_user), services: Services = Depends(get_services)):
    """Delete a task, valid or not."""
    return await _delete(services, user, "tasks", task_id, "Task")


# --------------------------------------------------------------------------- forgetting and provenance
@router.delete("/memory/{part}/{field}", response_model=Deleted, responses=_ERRORS)
async def forget_field(part: Literal["profile", "preferences"], field: str, user: str = Depends(current_user), services: Services = Depends(get_services)):
    """Forget one profile field or preference everywhere it lives (facts, messages, summaries, chats)."""
    model = Profile if part == "profile" else Preferences
    if field not in model.model_fields:
        raise not_found(f"{part} field {field}")
    report = await forget(services.backend.store, user, [ForgetTarget(part=part, key=field)])
    if report is None:
        raise not_found(f"{part} field {field} (it has no value)")
    return forget_counts(report)


@router.post("/memory/forget", response_model=Deleted, responses=_ERRORS)
async def forget_words(body: ForgetIn, user: str = Depends(current_user), services: Services = Depends(get_services)):
    """Forget what the words name ("that I work as a nurse"): every fact, task, profile field and
    preference carrying them, and their copies in messages, summaries and chats. 404 when nothing does;
    422 when the text is blank, or over FORGET_CHARS (500) characters: it names one thing."""
    try:
        report = await forget_request(services.backend.store, user, body.text)
    except InvalidMessage as exc:  # blank: it names nothing (the length and NUL were the body's to refuse)
        raise ApiError(422, "invalid_request", str(exc)) from exc
    if report is None:
        raise not_found(f"Anything remembered about {body.text!r}")
    return forget_counts(report)


@router.get("/memory/sources", responses=_ERRORS)
async def get_sources(user: str = Depends(current_user), services: Services = Depends(get_services)) -> dict:
    """Where each remembered item came from: keyed "profile.role", "facts/<id>", "tasks/<id>"; each
    source names its chat and message (link: ``/chats/{thread_id}`` and the message id), its time and
    what wrote it down ("rules", "model …", "user")."""
    return sources_as_json(await memory_sources(services.backend.store, user))


@router.get("/memory/forgotten", responses=_ERRORS)
async def get_forgotten(user: str = Depends(current_user), services: Services = Depends(get_services)) -> dict:
    """The caller's forgets: when, what kind, how many messages were hidden whole (never the words)."""
    records = await forget_ledger.records(services.backend.pool, user)
    return {"forgotten": [{"id": r.id, "kind": r.kind, "forgotten_at": r.forgotten_at.isoformat(), "messages_hidden": r.messages} for r in records]}


# --------------------------------------------------------------------------- invalid items
@router.get("/memory/invalid", response_model=InvalidItemList, responses=_ERRORS)
async def get_invalid(user: str = Depends(current_user), services: Services = Depends(get_services)):
    """Every stored item of the caller (profile, facts, tasks, chat records) that does not validate."""
    return InvalidItemList(invalid=_invalid_out(await invalid_items(services.backend.store, user)))


@router.delete("/memory/invalid/{kind}/{key}", response_model=Deleted, responses=_ITEM_ERRORS)
async def delete_invalid(kind: Kind, key: StorableText, user: str = Depends(current_user), services: Services = Depends(get_services)):
    """Delete one item listed by GET /memory/invalid (409 ``item_is_valid`` when it validates)."""
    try:
        deleted = await delete_invalid_memory(services.backend.store, user, kind, key)
    except ItemIsValid as exc:
        raise ApiError(409, "item_is_valid", str(exc)) from exc
    if not deleted:
        raise not_found(f"{kind} item {key}")
    return Deleted(deleted={kind: 1})


# --------------------------------------------------------------------------- the caller
@router.get("/me", response_model=Me, tags=["me"], responses={401: {"model": ErrorResponse}})
async def who_am_i(user: str = Depends(current_user), services: Services = Depends(get_services)):
    return Me(user_id=user, auth="on" if services.auth_enabled else "off")


@router.delete("/me", response_model=Deleted, tags=["me"], responses={401: {"model": ErrorResponse}})
async def forget_me(user: str = Depends(current_user), services: Services = Depends(get_services)):
    """Forget the caller entirely: chats and their checkpoints, all memory, API keys, run records.
    The key used for this call stops working. A request of the caller's authenticated before this
    one that writes after it is refused with 410 ``user_forgotten``."""
    # The user's runs are stopped once no new one can start (forget-me's first step).
    counts = await forget_user_everywhere(services.backend, user, stop_runs=lambda: stop_all_user_runs(services, user))
    return Deleted(deleted=counts)
