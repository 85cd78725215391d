"""What a client may write into its own memory through the LangGraph store API.

The graph and the HTTP API write memory through the pydantic models of
``core/schemas.py``; the store API of LangGraph Server (``memory-agent studio``,
``PUT``/``DELETE /store/items``) takes any JSON. Every such write passes here first
(from the store handlers of ``app/studio/auth.py``), inside the caller's own
``("users", U)`` namespace:

=============  ==========================================================  ========
namespace      put                                                         delete
=============  ==========================================================  ========
``profile``    key ``profile``, validated as ``UserDocument``              allowed
``facts``      validated as ``Fact``, key = its ``id``; ``hash`` recomputed  allowed
``tasks``      validated as ``Task``, key = its ``id``                      allowed
``chats``      refused: chat records are maintained by the server          refused
anything else  refused: nothing reads it                                    allowed
=============  ==========================================================  ========

A valid item is stored as the server would store it: normalized by its model, indexed
the way the server indexes it, without a TTL. An invalid one is refused with the
reason, so an item the agent could not read never reaches the store.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from core.namespaces import PROFILE_KEY
from core.schemas import Fact, Task, UserDocument, text_hash

MAX_TEXT_CHARS = 2000  # as the memory API's PATCH bodies (app/http/schemas.py)


class InvalidItem(ValueError):
    """The item does not match its namespace's schema (HTTP 422)."""


class ReadOnlyNamespace(PermissionError):
    """Clients may not write there (HTTP 403)."""


def _kind(namespace: tuple[str, ...]) -> str | None:
    """``facts`` for ("users", U, "facts"); None for the root or anything deeper."""
    return namespace[2] if len(namespace) == 3 else None


def _reasons(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in exc.errors())


def _checked_text(field: str, text: str) -> None:
    if not text.strip():
        raise InvalidItem(f"{field} is empty.")
    if len(text) > MAX_TEXT_CHARS:
        raise InvalidItem(f"{field} is {len(text):,} characters long; the limit is {MAX_TEXT_CHARS:,}.")


def _validated(model: type[BaseModel], value: Any, what: str) -> BaseModel:
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise InvalidItem(f"Not a valid {what}: {_reasons(exc)}.") from exc


def checked_put(namespace: tuple[str, ...], key: str, value: Any) -> tuple[dict, list[str] | bool | None]:
    """The item to store and how to index it, or InvalidItem / ReadOnlyNamespace."""
    kind = _kind(namespace)
    if kind == "chats":
        raise ReadOnlyNamespace("Chat records are maintained by the server; create and run threads instead.")
    if kind == "profile":
        if key != PROFILE_KEY:
            raise InvalidItem(f"The profile namespace holds one item, with key {PROFILE_KEY!r}.")
        doc = _validated(UserDocument, value, "profile document (profile, preferences)")
        return doc.model_dump(mode="json"), False  # read whole, never searched: as the server stores it
    if kind == "facts":
        fact = _validated(Fact, value, "fact")
        if fact.id != key:
            raise InvalidItem(f"A fact is stored under its id: key {key!r} differs from id {fact.id!r}.")
        _checked_text("text", fact.text)
        fact.hash = text_hash(fact.text)  # what duplicate detection compares; never the client's word
        return fact.model_dump(mode="json"), None  # None: the store's indexed fields, as the server's writes
    if kind == "tasks":
        task = _validated(Task, value, "task")
        if task.id != key:
            raise InvalidItem(f"A task is stored under its id: key {key!r} differs from id {task.id!r}.")
        _checked_text("description", task.description)
        return task.model_dump(mode="json"), None
    raise ReadOnlyNamespace(
        f"Clients may write only to profile, facts and tasks under ('users', <you>), not to {'.'.join(namespace)}."
    )


def check_delete(namespace: tuple[str, ...]) -> None:
    if _kind(namespace) == "chats":
        raise ReadOnlyNamespace("Chat records are maintained by the server.")
