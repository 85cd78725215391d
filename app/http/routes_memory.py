"""What the agent remembers about the caller: view, correct, delete; and forgetting the caller.

Edits take the user's memory write lock (storage.user_write_lock), the same one the
agent's memory update holds, so an edit and an extraction never interleave their
read-modify-write steps. PATCH of a fact or task re-embeds it (a store put).

A stored item that does not validate (memory.user_memory) is listed under ``invalid``
with its key and error, can be deleted (by its own route or ``/memory/invalid``), and
cannot be patched (409 ``invalid_item``).
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query

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
from core.schemas import Fact, Preferences, PreferencesPatch, Profile, ProfilePatch, Task
from core.text_validation import Identifier
from memory.kinds import KINDS
from memory.memory_writer import delete_invalid as delete_invalid_memory, delete_item, edit_fact, edit_task, edit_user_document
from memory import queries as q
from memory.queries import InvalidItem, ItemIsValid, Kind, check_item, get_user_document, invalid_items, list_facts

router = APIRouter(tags=["memory"])
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
def _document_part_routes(part: str, model: type, patch: type, forget: str) -> None:
    """GET, PATCH and DELETE of one part of the user's profile document (``profile``, ``preferences``)."""

    async def read(user: str = Depends(current_user), services: Services = Depends(get_services)):
        return getattr(await get_user_document(services.backend.store, user), part)

    async def change(body, user: str = Depends(current_user), services: Services = Depends(get_services)):
        return await edit_user_document(services.backend.store, user, part, {k: getattr(body, k) for k in body.model_fields_set})

    async def reset(user: str = Depends(current_user), services: Services = Depends(get_services)):
        return await edit_user_document(services.backend.store, user, part, None)

    change.__annotations__["body"] = patch  # the part's own PATCH model, for validation and the OpenAPI schema
    for method, endpoint, name, doc in (
        ("GET", read, f"get_{part}", None),
        ("PATCH", change, f"patch_{part}", "Change the fields sent (null clears one)."),
        ("DELETE", reset, f"delete_{part}", forget),
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


async def _patch_item(services: Services, user: str, kind: Kind, key: str, what: str, text: str | None, empty_message: str, edit):
    """Shared by the fact and task PATCH routes: 422 when the new text is blank, 404/409 as
    ``_stored``, then ``edit()`` (404 when the item vanished meanwhile)."""
    if text is not None and not text.strip():
        raise ApiError(422, "invalid_request", empty_message)
    await _stored(services, user, kind, key, what)  # 404 when absent, 409 when stored invalid
    item = await edit()
    if item is None:
        raise not_found(f"{what} {key}")
    return item


async def _delete(services: Services, user: str, kind: Kind, key: str, what: str) -> Deleted:
    if not await delete_item(services.backend.store, user, kind, key):
        raise not_found(f"{what} {key}")
    return Deleted(deleted={kind: 1})


@router.patch("/memory/facts/{fact_id}", response_model=Fact, responses=_ITEM_ERRORS)
async def patch_fact(fact_id: Identifier, body: FactPatch, user: str = Depends(current_user), services: Services = Depends(get_services)):
    """Correct a fact; a new text is re-embedded, so recall finds it by its new meaning."""
    return await _patch_item(
        services, user, "facts", fact_id, "Fact", body.text, "A fact's text cannot be empty.",
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
        services, user, "tasks", task_id, "Task", body.description, "A task's description cannot be empty.",
        lambda: edit_task(services.backend.store, user, task_id, {k: getattr(body, k) for k in body.model_fields_set}),
    )


@router.delete("/memory/tasks/{task_id}", response_model=Deleted, responses=_ERRORS)
async def delete_task(task_id: Identifier, user: str = Depends(current_user), services: Services = Depends(get_services)):
    """Delete a task, valid or not."""
    return await _delete(services, user, "tasks", task_id, "Task")


# --------------------------------------------------------------------------- invalid items
@router.get("/memory/invalid", response_model=InvalidItemList, responses=_ERRORS)
async def get_invalid(user: str = Depends(current_user), services: Services = Depends(get_services)):
    """Every stored item of the caller (profile, facts, tasks, chat records) that does not validate."""
    return InvalidItemList(invalid=_invalid_out(await invalid_items(services.backend.store, user)))


@router.delete("/memory/invalid/{kind}/{key}", response_model=Deleted, responses=_ITEM_ERRORS)
async def delete_invalid(kind: Kind, key: str, user: str = Depends(current_user), services: Services = Depends(get_services)):
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
    The key used for this call stops working."""
    await stop_all_user_runs(services, user)
    counts = await forget_user_everywhere(services.backend, user)
    return Deleted(deleted=counts)
