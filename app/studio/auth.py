"""Who calls our LangGraph Server, and what they may touch: langgraph.json's ``auth.path``.

Authentication: ``Authorization: Bearer <API key>`` (``memory-agent keys create --user U``)
makes the caller user U. A wrong, revoked or malformed key is always a 401.
Without a header it depends on ``MEMORY_AGENT_AUTH``:

* ``optional`` — the caller is the Studio user (``studio``, or ``$MEMORY_AGENT_STUDIO_USER``),
  never the CLI's and web page's ``local``, so what is tried here stays out of their memory.
  A run may name another user, as the LangGraph memory-agent template does:
  ``config.configurable.user_id`` (or ``context.user_id``), unless it is the settings form's
  default ``local``: a default is no choice. The run then reads and writes that user's memory, and its
  thread becomes that user's chat (see :func:`_acting_user`). A user who holds an API key (or
  held one, since revoked) is acted as only with a key;
* ``required`` — 401.

The default is ``optional`` under ``langgraph dev`` (which marks itself with
``LANGSMITH_LANGGRAPH_API_VARIANT=local_dev``) and ``required`` anywhere else.

LangGraph Studio reaches ``langgraph dev`` through the server's own Studio backend
(``x-auth-scheme: langsmith``), which checks nothing and skips this module's
authentication; Studio is therefore the Studio user in ``optional`` mode and refused in
``required`` mode. Which ``Host`` and ``Origin`` may call at all is checked before any of
this, for every scheme, by ``app/studio/server_app.py``.

Authorization: each user sees only their own threads and runs (an ``owner`` metadata
key set on create, filtered on every read/search/update/delete), their own
assistants plus the graph's built-in ones, and store namespaces under
``("users", <their id>)``. Runs always use the caller's memory: the run's
``context.user_id`` is overwritten with the caller, the safety settings with the server's,
``context.model`` must be one the server offers (``MEMORY_AGENT_ALLOWED_MODELS``), and a
client's ``Command`` may only resume (no ``goto``/``update`` past the validation). Creating crons is refused (see
:func:`on_cron_change`). Anything else is denied.

Thread ownership is also written to ``storage.thread_owners``, the table the chat
API, forget-me and MCP trust (a chat of ``memory-agent serve`` on the same database
is a thread with checkpoints but no LangGraph thread record). Creating a thread
under an id that has an owner or checkpoints is refused (409), and a run on a
thread whose id is another user's (or has history nobody owns) is refused, so a
known chat id cannot be turned into a thread of one's own.

Store writes: chat records are the server's (refused); profile, facts and tasks are
validated against their schemas (``app/studio/store_writes.py``).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from contextlib import asynccontextmanager
from typing import Any

from langgraph_sdk import Auth

from app.studio.store_writes import ReadOnlyNamespace, check_delete, checked_put
from memory.writer.edits import InvalidClientItem
from core.context import allowed_models, server_safety_settings
from core.auth_user import KEYLESS, is_keyless, is_studio_user, memory_user_of, studio_user
from core.context import Context
from core.namespaces import user_id_problem, user_root
from storage import thread_owners
from storage.api_keys import list_keys, verify_key

OWNER_KEY = "owner"
# Set by the server on the assistants it creates for each graph in langgraph.json.
SYSTEM_ASSISTANT = {"created_by": "system"}

MODE_ENV = "MEMORY_AGENT_AUTH"
MODES = ("required", "optional")


def auth_mode(environ: Mapping[str, str] = os.environ) -> str:
    """``required`` or ``optional`` (see the module docstring)."""
    configured = (environ.get(MODE_ENV) or "").strip().lower()
    if not configured:
        return "optional" if environ.get("LANGSMITH_LANGGRAPH_API_VARIANT") == "local_dev" else "required"
    # serve's words for the same variable, so that one setting serves both: `off` (serve lets every
    # caller in) stopped the Studio server at start-up
    configured = {"on": "required", "off": "optional"}.get(configured, configured)
    if configured not in MODES:
        raise ValueError(f"{MODE_ENV}={configured!r} is not one of {', '.join(MODES)} (or serve's on / off)")
    return configured


auth_mode()  # a misspelt mode (or Studio user) stops the server at start-up instead of failing every request
studio_user()

auth = Auth()

def _unauthorized(detail: str) -> Auth.exceptions.HTTPException:
    return Auth.exceptions.HTTPException(status_code=401, detail=detail, headers={"WWW-Authenticate": "Bearer"})


def _forbidden(detail: str) -> Auth.exceptions.HTTPException:
    return Auth.exceptions.HTTPException(status_code=403, detail=detail)


@asynccontextmanager
async def _pool():
    from app.studio.backend import shared_backend

    # Normally the pool the checkpointer already holds open; opened here only if not.
    async with shared_backend().use() as backend:
        yield backend.pool


async def _user_of_key(key: str) -> str | None:
    async with _pool() as pool:
        return await verify_key(pool, key)


@auth.authenticate
async def authenticate(authorization: str | None = None) -> Auth.types.MinimalUserDict:
    # Which Host and Origin may call without a key is decided before this (app/studio/server_app.py).
    if not authorization or not authorization.strip():
        if auth_mode() == "required":
            raise _unauthorized("Missing API key: send 'Authorization: Bearer <key>' (create one with `memory-agent keys create --user U`).")
        anonymous = studio_user()
        return {"identity": anonymous, "display_name": anonymous, "permissions": [KEYLESS], "is_authenticated": True}
    scheme, _, key = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise _unauthorized("Malformed Authorization header: expected 'Bearer <key>'.")
    user_id = await _user_of_key(key.strip())
    if user_id is None:
        raise _unauthorized("Invalid or revoked API key.")
    return {"identity": user_id, "display_name": user_id, "permissions": [], "is_authenticated": True}


def caller(ctx: Auth.types.AuthContext) -> str:
    """The memory user id of the caller; refuses Studio when auth is required."""
    if is_studio_user(ctx.user) and auth_mode() == "required":
        raise _forbidden("LangGraph Studio is not authenticated by this server (MEMORY_AGENT_AUTH=required): use an API key.")
    user_id = memory_user_of(ctx.user)
    if not user_id:
        raise _forbidden("No authenticated user.")
    return user_id


def _dict_at(parent: dict, key: str) -> dict:
    """``parent[key]``, made a new dict first when it is not one, so a field can be set in it in place."""
    child = parent.get(key)
    if not isinstance(child, dict):
        child = parent[key] = {}
    return child


def _owned_metadata(value: dict, owner: str) -> None:
    """Stamp the owner on the value's metadata (whatever the client put there)."""
    _dict_at(value, "metadata")[OWNER_KEY] = owner


def _thread_key(thread_id: Any) -> str:
    """The id as the checkpointer and our tables spell it (the server passes a UUID)."""
    return str(uuid.UUID(str(thread_id)))


# --------------------------------------------------------------------------- threads and runs
@auth.on.threads.create
async def on_thread_create(ctx: Auth.types.AuthContext, value: Auth.types.on.threads.create.value):
    owner = caller(ctx)
    _owned_metadata(value, owner)
    # Recorded before the server creates the thread: a refusal here leaves nothing behind.
    async with _pool() as pool:
        try:
            await thread_owners.create(pool, _thread_key(value["thread_id"]), owner)
        except thread_owners.ThreadExists as exc:
            raise Auth.exceptions.HTTPException(status_code=409, detail=str(exc)) from exc
    return {OWNER_KEY: owner}


_FORM_DEFAULT_USER = Context.__dataclass_fields__["user_id"].default


def _named_user(kwargs: Any) -> str | None:
    """The user a run names: ``config.configurable.user_id`` (the LangGraph memory-agent template's
    way) or ``context.user_id`` (the server mirrors one into the other), unless it is the settings
    form's default ``local``: Studio may send the form as it stands, and a default is no choice
    (``memory-agent studio --user local`` shares the CLI's memory on purpose)."""
    if not isinstance(kwargs, dict):
        return None
    config, context = kwargs.get("config"), kwargs.get("context")
    configurable = config.get("configurable") if isinstance(config, dict) else None
    for source in (configurable, context):
        named = source.get("user_id") if isinstance(source, dict) else None
        if isinstance(named, str) and named.strip() and named.strip() != _FORM_DEFAULT_USER:
            return named.strip()
    return None


async def _acting_user(ctx: Auth.types.AuthContext, kwargs: Any, owner: str) -> str:
    """Whose memory the run uses: the key's user; for a key-less caller (``optional`` mode) the user
    the run names, else the Studio user. Naming a user who holds or held an API key is refused: their key decides."""
    named = _named_user(kwargs) if is_keyless(ctx.user) else None
    if named is None or named == owner:
        return owner
    if (problem := user_id_problem(named)) is not None:
        raise Auth.exceptions.HTTPException(status_code=422, detail=f"user_id {named[:100]!r} is not usable: {problem}")
    async with _pool() as pool:
        if await list_keys(pool, named):  # revoked ones too: a key revoked because it leaked must not open the user up
            raise _forbidden(f"User {named!r} has (or had) an API key: send an active one ('Authorization: Bearer <key>') to act as them.")
    return named


async def _claim_thread(thread_id: str, user: str, owner: str, keyless: bool) -> None:
    async with _pool() as pool:
        try:
            if user != owner:
                # Studio made the thread as its own user: its first run hands it to the user it names.
                await thread_owners.claim_handed_over(pool, thread_id, user, owner)
            else:
                # A run may create its thread (if_not_exists="create"): then it is a first claim, and
                # history without an owner cannot be told from another user's chat, so it is refused.
                await thread_owners.claim_ownership(pool, thread_id, owner, adopt_history=False)
        except thread_owners.ThreadTaken as exc:
            if keyless and exc.owner is not None:  # a chat of this machine's, handed to a user the run did not name
                raise Auth.exceptions.HTTPException(
                    status_code=409,
                    detail=f"Thread {thread_id} is the chat of another user: name its user in configurable.user_id, "
                    "or start a new thread.",
                ) from exc
            if exc.owner is not None:  # as the server answers for another user's thread
                raise Auth.exceptions.HTTPException(status_code=404, detail=f"Thread with ID {thread_id} not found") from exc
            raise Auth.exceptions.HTTPException(status_code=409, detail=str(exc)) from exc


@auth.on.threads.create_run
async def on_run_create(ctx: Auth.types.AuthContext, value: Auth.types.on.threads.create_run.value):
    owner = caller(ctx)
    _owned_metadata(value, owner)  # the thread record stays the caller's: Studio keeps seeing it
    kwargs = value.get("kwargs")
    user = await _acting_user(ctx, kwargs, owner)
    if value.get("thread_id") is not None:  # None: a stateless run, on a new thread of its own
        await _claim_thread(_thread_key(value["thread_id"]), user, owner, is_keyless(ctx.user))
    # The graph reads Context.user_id: make it the acting user's, whatever the client sent.
    # Mutated in place: the server builds the run from these very dicts after this handler.
    if isinstance(kwargs, dict):
        _check_command(kwargs.get("command"))
        _check_message_sizes(kwargs.get("input"))
        context = _dict_at(kwargs, "context")
        _check_model(context)
        context["user_id"] = user
        # Message size, tool steps and budgets are the server's, never the client's.
        context.update(server_safety_settings())
        # A stateless run's thread is deleted when it ends: no chat of it to list, search or open.
        context["keep_chat"] = kwargs.get("temporary") is not True
        config = kwargs.get("config")
        if isinstance(config, dict):
            _dict_at(config, "configurable")["user_id"] = user
    return {OWNER_KEY: owner}


def _check_command(command: Any) -> None:
    """A client's Command may only answer a pending confirmation (``resume``): ``goto`` and
    ``update`` would write messages past load_context, where every message is validated."""
    if not command:
        return
    if not isinstance(command, dict) or any(command.get(field) not in (None, [], {}, "") for field in ("goto", "update", "graph")):
        raise Auth.exceptions.HTTPException(
            status_code=422,
            detail="A run's command may only resume a pending confirmation ({'resume': ...}); "
            "send new messages as the run's input, where they are checked.",
        )


def _check_message_sizes(graph_input: Any) -> None:
    """A message over the server's limit is refused here, 413, before the run writes its input (load_context
    refused it too, but only after a 30 MB message was saved among the thread's writes)."""
    messages = graph_input.get("messages") if isinstance(graph_input, dict) else None
    limit = server_safety_settings()["max_message_chars"]
    for message in messages if isinstance(messages, list) else [messages] if messages else []:
        content = message.get("content") if isinstance(message, dict) else message
        if isinstance(content, list):
            size = sum(len(p.get("text") or "") if isinstance(p, dict) else len(str(p)) for p in content)
        else:
            size = len(content) if isinstance(content, str) else 0
        if size > limit:
            raise Auth.exceptions.HTTPException(
                status_code=413, detail=f"The message is too long: {size:,} characters, the limit is {limit:,}. Send a shorter message."
            )


def _check_model(context: Any) -> None:
    """The client may pick only a model the server offers (``MEMORY_AGENT_ALLOWED_MODELS``)."""
    if not isinstance(context, dict) or context.get("model") in (None, ""):
        return
    allowed = allowed_models()
    if context["model"] not in allowed:
        raise _forbidden(f"Model {str(context['model'])[:100]!r} is not offered by this server; pick one of: {', '.join(allowed)}.")


@auth.on.threads.update
async def on_thread_update(ctx: Auth.types.AuthContext, value: Auth.types.on.threads.update.value):
    owner = caller(ctx)
    if isinstance(value.get("metadata"), dict):
        value["metadata"][OWNER_KEY] = owner  # ownership cannot be given away by a metadata patch
    return {OWNER_KEY: owner}


@auth.on.threads(actions=["read", "delete", "search"])
async def on_thread_access(ctx: Auth.types.AuthContext, value: Any):
    return {OWNER_KEY: caller(ctx)}


# --------------------------------------------------------------------------- assistants
def _without_system_claim(value: dict) -> None:
    if isinstance(value.get("metadata"), dict):
        value["metadata"].pop("created_by", None)  # would make the assistant visible to everyone


@auth.on.assistants.create
async def on_assistant_create(ctx: Auth.types.AuthContext, value: Auth.types.on.assistants.create.value):
    owner = caller(ctx)
    _check_model(value.get("context"))
    _without_system_claim(value)
    _owned_metadata(value, owner)
    return {OWNER_KEY: owner}


@auth.on.assistants.update
async def on_assistant_update(ctx: Auth.types.AuthContext, value: Auth.types.on.assistants.update.value):
    owner = caller(ctx)
    _check_model(value.get("context"))
    _without_system_claim(value)
    if isinstance(value.get("metadata"), dict):
        value["metadata"][OWNER_KEY] = owner
    return {OWNER_KEY: owner}


@auth.on.assistants.delete
async def on_assistant_delete(ctx: Auth.types.AuthContext, value: Any):
    return {OWNER_KEY: caller(ctx)}


@auth.on.assistants(actions=["read", "search"])
async def on_assistant_read(ctx: Auth.types.AuthContext, value: Any):
    return {"$or": [{OWNER_KEY: caller(ctx)}, SYSTEM_ASSISTANT]}


# --------------------------------------------------------------------------- crons
@auth.on.crons(actions=["create", "update"])
async def on_cron_change(ctx: Auth.types.AuthContext, value: Any):
    caller(ctx)
    # The scheduler replays a cron as its creator's bare identity: Studio's crons would run as
    # "langgraph-studio-user" rather than "local", and an API user's schedule outlives key revocation.
    raise _forbidden("Scheduled runs (crons) are not supported by memory-agent's server.")


@auth.on.crons(actions=["read", "search", "delete"])
async def on_cron_access(ctx: Auth.types.AuthContext, value: Any):
    return {OWNER_KEY: caller(ctx)}  # none can exist; listing answers "no crons" rather than an error


# --------------------------------------------------------------------------- store
def _scoped(namespace: tuple[str, ...] | list[str] | None, owner: str, *, widen_prefix: bool) -> tuple[str, ...]:
    """The namespace if it lies inside the owner's root; a prefix of the root is narrowed
    to the root (searching or listing ``()`` means "all of mine") when ``widen_prefix``."""
    root = user_root(owner)
    ns = tuple(namespace or ())
    if ns[: len(root)] == root:
        return ns
    if widen_prefix and root[: len(ns)] == ns:
        return root
    raise _forbidden(f"Store namespace {'.'.join(ns) or '()'} is outside your own ({'.'.join(root)}).")


@auth.on.store(actions=["get"])
async def on_store_get(ctx: Auth.types.AuthContext, value: Any):
    value["namespace"] = _scoped(value.get("namespace"), caller(ctx), widen_prefix=False)


@auth.on.store(actions=["put"])
async def on_store_put(ctx: Auth.types.AuthContext, value: Any):
    namespace = value["namespace"] = _scoped(value.get("namespace"), caller(ctx), widen_prefix=False)
    try:
        kind, item = checked_put(namespace, value.get("key"), value.get("value"))
    except ReadOnlyNamespace as exc:
        raise _forbidden(str(exc)) from exc
    except InvalidClientItem as exc:
        raise Auth.exceptions.HTTPException(status_code=422, detail=str(exc)) from exc
    # The server builds its write from this very dict; its store hands it to the writer (app/studio/backend.py).
    value["value"], value["index"], value["ttl"] = item, kind.index, None


@auth.on.store(actions=["delete"])
async def on_store_delete(ctx: Auth.types.AuthContext, value: Any):
    namespace = value["namespace"] = _scoped(value.get("namespace"), caller(ctx), widen_prefix=False)
    try:
        check_delete(namespace)
    except ReadOnlyNamespace as exc:
        raise _forbidden(str(exc)) from exc


@auth.on.store(actions=["search", "list_namespaces"])
async def on_store_listing(ctx: Auth.types.AuthContext, value: Any):
    value["namespace"] = _scoped(value.get("namespace"), caller(ctx), widen_prefix=True)


# --------------------------------------------------------------------------- anything else
@auth.on
async def deny_unknown(ctx: Auth.types.AuthContext, value: Any):
    """Resources added to the server later are denied until handled here."""
    raise _forbidden("Not allowed.")
