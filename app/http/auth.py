"""Who is calling (API key → user) and whether they may touch a chat.

A key comes as ``Authorization: Bearer <key>`` or ``X-API-Key: <key>`` and maps to
its user through :func:`storage.api_keys.verify_key` (401 when missing, unknown or
revoked). A chat belongs to the user the server recorded as its owner
(``storage.thread_owners``): another user's chat is 403, a chat nobody has is 404.

The key check also reads the user's forget generation (one statement): the request carries it
(:func:`storage.owner_forgets.set_caller`), and each of its writes is refused, 410 ``user_forgotten``,
when forget-me ran since (a message whose run starts after forget-me stopped the user's runs).

``MEMORY_AGENT_AUTH=off`` switches keys off for local development: every caller is
user ``local``. The default is on.
"""

from __future__ import annotations

import os

from fastapi import Depends
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from app.http.errors import ApiError
from app.http.services import Services, get_services
from storage import owner_forgets, thread_owners
from storage.api_keys import authenticate
from core.schemas import ChatRecord
from core.text_validation import Identifier
from memory.queries import get_chat

AUTH_ENV = "MEMORY_AGENT_AUTH"
LOCAL_USER = "local"

bearer = HTTPBearer(auto_error=False, description="An API key from `memory-agent keys create --user <you>`.")
api_key_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="The same API key, as a header.")


def auth_enabled() -> bool:
    return os.environ.get(AUTH_ENV, "on").strip().lower() not in ("off", "0", "false", "no")


def _unauthorized(message: str) -> ApiError:
    return ApiError(401, "unauthorized", message, headers={"WWW-Authenticate": "Bearer"})


async def current_user(
    services: Services = Depends(get_services),
    credentials: HTTPAuthorizationCredentials | None = Depends(bearer),
    header_key: str | None = Depends(api_key_header),
) -> str:
    if not services.auth_enabled:
        owner_forgets.set_caller(LOCAL_USER, await owner_forgets.generation(services.backend.pool, LOCAL_USER))
        return LOCAL_USER
    key = (credentials.credentials if credentials else None) or header_key
    if not key:
        raise _unauthorized(
            "Missing API key: send `Authorization: Bearer <key>` or `X-API-Key: <key>`. "
            "Create one with `memory-agent keys create --user <you>`."
        )
    caller = await authenticate(services.backend.pool, key.strip())
    if caller is None:
        raise _unauthorized("Unknown or revoked API key.")
    owner_forgets.set_caller(caller.user_id, caller.generation)  # this request's writes are checked against it
    return caller.user_id


async def owned_chat(chat_id: Identifier, user: str = Depends(current_user), services: Services = Depends(get_services)) -> ChatRecord:
    """The caller's chat ``chat_id``: 404 when no one has it, 403 when it is someone else's."""
    owner = await thread_owners.owner_of(services.backend.pool, chat_id)
    if owner is None:
        raise ApiError(404, "not_found", f"No chat with id {chat_id}.")
    if owner != user:
        raise ApiError(403, "forbidden", "This chat belongs to another user.")
    # A thread started elsewhere (LangGraph Server, the CLI) has its record after its first reply.
    return await get_chat(services.backend.store, user, chat_id) or ChatRecord(thread_id=chat_id)
