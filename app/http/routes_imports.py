"""``POST /chats/import``: a chat history (ours or LoCoMo's format, docs/import.md) into a new chat
of the caller, running the memory nodes after every exchange as a chat does (memory.chat_import,
memory.import_job); it answers once all is imported (not streamed).

- The caller is authenticated before the body is read (a refusal closes the connection, so a
  stranger's body is never read); the body is counted against the import's byte limit as it
  arrives (``BodyLimit`` leaves it to this route), then read and checked within the import's
  limits in a thread, off the event loop.
- A client that leaves stops the import: the chat is kept, marked incomplete, and
  ``?resume=<id>`` with the same history goes on from where it stopped. (Why not a job to poll:
  docs/import.md.) While it runs the chat takes no message (409 ``import_in_progress``, from
  storage.chat_runs); deleting it, or forget-me, stops it and nothing of it stays.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.security import HTTPAuthorizationCredentials
from starlette.requests import ClientDisconnect

from app.http.auth import api_key_header, bearer, current_user, owned_chat
from app.http.errors import ApiError
from app.http.routes_chats import _TURN_ERRORS, AppServices, chat_detail, chat_summary
from app.http.schemas import ChatDetail, ErrorResponse, ImportedChatOut, ImportedChats
from core.context import Context
from core.text_validation import Identifier
from memory.chat_import import (
    MAX_IMPORT_BYTES,
    ChatImport,
    ImportFailed,
    ImportTooLarge,
    InvalidImport,
    LocomoSample,
    check_messages,
    read_import,
)
from memory.import_formats import ChatGPTConversation, ClaudeConversation
from memory.import_job import ImportCancelled, ImportStopped, import_chat
from storage import chat_imports, owner_forgets

router = APIRouter(tags=["chats"])


# The body is read by the route (after authentication), so it is described here for the API document.
_IMPORT_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"anyOf": [
            {"$ref": "#/components/schemas/ChatImport"},
            {"$ref": "#/components/schemas/LocomoSample"},
            {"type": "array", "items": {"$ref": "#/components/schemas/ChatGPTConversation"}, "title": "ChatGPT conversations.json"},
            {"type": "array", "items": {"$ref": "#/components/schemas/ClaudeConversation"}, "title": "Claude conversations.json"},
        ]}}},
    }
}
def add_import_schemas(document: dict) -> dict:
    """Put the import body's models into the API document's components (create_app's openapi)."""
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    for model in (ChatImport, LocomoSample, ChatGPTConversation, ClaudeConversation):
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    return document


_IMPORT_ERRORS = {**_TURN_ERRORS, 410: {"model": ErrorResponse}, 429: {"model": ErrorResponse}, 500: {"model": ErrorResponse}}


async def read_import_body(request: Request) -> bytes:
    """The body, counted as it arrives (413 past MAX_IMPORT_BYTES; the server's deadlines cut a slow one off)."""
    body = bytearray()
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_IMPORT_BYTES:
                raise ApiError(413, "request_too_large", f"The request body is larger than {MAX_IMPORT_BYTES:,} bytes.", headers={"Connection": "close"})
    except ClientDisconnect:
        raise ApiError(400, "client_disconnected", "The client left before the body was complete.") from None
    return bytes(body)


def _read_and_check(body: bytes, max_chars: int) -> tuple[list[ChatImport], bool]:
    """Parse and validate an import body (every chat of an export before the first is written):
    CPU work, run in a thread off the event loop. True: a ChatGPT or Claude export."""
    chats = read_import(body)
    exported = all(c.from_export for c in chats)
    if len(chats) != 1 and not exported:
        raise InvalidImport(f"The body holds {len(chats)} histories; send one per request (a list of LoCoMo samples is for the CLI).")
    checked = []
    for chat in chats:
        try:
            check_messages(chat, max_chars)
            checked.append(chat)
        except InvalidImport as exc:
            raise InvalidImport(f"conversation {chat.source_id} {chat.title or 'untitled'!r}: {exc}" if len(chats) > 1 else str(exc)) from None
    return checked, exported


async def caller_before_body(
    services: AppServices,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    header_key: Annotated[str | None, Depends(api_key_header)],
) -> str:
    """current_user, for a route that reads its body itself: a refusal also closes the connection,
    so a stranger's body is never read (not even to find the next request)."""
    try:
        return await current_user(services, credentials, header_key)
    except ApiError as exc:
        exc.headers = {**(exc.headers or {}), "Connection": "close"}
        raise


@router.post("/chats/import", status_code=201, response_model=ChatDetail | ImportedChats, responses=_IMPORT_ERRORS, openapi_extra=_IMPORT_BODY)
async def import_history(
    request: Request,
    user: Annotated[str, Depends(caller_before_body)],
    services: AppServices,
    response: Response,
    resume: Annotated[Identifier | None, Query(description="An incomplete import's chat id: go on with it (the same history).")] = None,
):
    """Import a chat history into a new chat: every message checked first (422 names the first bad
    one, and nothing is created), then each exchange is added as if the agent had answered it and the
    memory nodes run after it (summary, memories, the search index). Returns when all is imported.

    Limits (413): 32 MB, 5,000 messages. A client that leaves stops the import; the chat is kept,
    marked incomplete, and ``?resume=<chat id>`` with the same history goes on from where it stopped.

    A ChatGPT or Claude ``conversations.json`` becomes one chat per conversation and answers with the
    list of them; a conversation (or a history with a ``source_id``) the caller imported before adds
    nothing, or its new messages when it has grown since (one whose import stopped part way goes on).
    200 instead of 201 when every conversation was imported before (grown or not)."""
    # The forget generation read with the key: a forget-me while the body arrives refuses the import (410).
    known_generation = owner_forgets.known_generation(user)
    if resume is not None:
        await owned_chat(resume, user, services)  # 404 / 403 before the body is read
    body = await read_import_body(request)  # only now: the caller is known
    try:
        checked, exported = await asyncio.to_thread(_read_and_check, body, services.max_message_chars)
        del body  # parsed: the bytes need not stay for the whole import
        if resume is not None and len(checked) != 1:
            raise InvalidImport(f"?resume takes a body of one history; this one holds {len(checked)}.")
        context = Context(user_id=user, max_message_chars=services.max_message_chars)
        done = [
            await import_chat(
                services.graph, services.backend.pool, user, chat, resume=resume, stop_when=request.is_disconnected,
                context=context, known_generation=known_generation,
            )
            for chat in checked
        ]
    except ImportTooLarge as exc:
        raise ApiError(413, "import_too_large", str(exc)) from exc
    except InvalidImport as exc:
        raise ApiError(422, "invalid_import", str(exc)) from exc
    except chat_imports.OwnerForgotten as exc:
        raise ApiError(410, "user_forgotten", str(exc)) from exc
    except chat_imports.TooManyImports as exc:
        raise ApiError(429, "too_many_imports", str(exc)) from exc
    except chat_imports.NotResumable as exc:
        raise ApiError(409, "not_resumable", str(exc)) from exc
    except ImportCancelled as exc:
        raise ApiError(409, "import_cancelled", str(exc)) from exc
    except ImportStopped as exc:  # the client is gone; this answer is for the log
        raise ApiError(409, "import_stopped", str(exc)) from exc
    except ImportFailed as exc:
        raise ApiError(500, "import_failed", str(exc)) from exc
    if all(d.already_imported or d.held_before for d in done):  # each imported before (a grown one's messages went on its chat)
        response.status_code = 200
    if not exported and done[0].not_added:  # (our format answers with the chat: no room to say why its new messages were not added)
        raise ApiError(409, done[0].not_added, done[0].not_added_reason)
    if not exported:
        return await chat_detail(services, await owned_chat(done[0].chat_id, user, services), user)
    out = [
        ImportedChatOut(
            chat=chat_summary(await owned_chat(d.chat_id, user, services)), imported_messages=d.messages - d.held_before,
            already_imported=d.already_imported, grown=bool(d.held_before), not_added=d.not_added, not_added_reason=d.not_added_reason,
            skipped_copies=chat.skipped_copies, split_messages=chat.split_messages,
        )
        for chat, d in zip(checked, done)
    ]
    return ImportedChats(chats=out)
