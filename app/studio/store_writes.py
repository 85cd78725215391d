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

(The table is ``memory.kinds.KINDS``: ``client_writable`` says which kinds a client may put.)
A value is checked with every bound of the chat API (a NUL, a 50,000-character tag or 5,000
tags answer 422, as the chat API does), then written by the one writer under the user's lock
(``memory.writer.edits.put_client_item``, reached through the server's store,
``app/studio/backend.py``): the same fact text put under six keys is one fact.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from memory.kinds import KINDS, MemoryKind, kind_of_namespace

NEW_VALUES: dict = {}
"""Validation context of a client's value: every bound of the chat API applies (no NUL, lengths,
list sizes), unlike reading back what is already stored (core.schemas.StoredModel)."""


class InvalidItem(ValueError):
    """The item does not match its namespace's schema (HTTP 422)."""


class ReadOnlyNamespace(PermissionError):
    """Clients may not write there (HTTP 403)."""


def _reasons(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in exc.errors()[:5])


def _writable(namespace: tuple[str, ...]) -> MemoryKind:
    kind = kind_of_namespace(namespace)
    if kind is None:
        writable = ", ".join(k.name for k in KINDS.values() if k.client_writable)
        raise ReadOnlyNamespace(f"Clients may write only to {writable} under ('users', <you>), not to {'.'.join(namespace)}.")
    if not kind.client_writable:
        raise ReadOnlyNamespace(f"The {kind.name} items are maintained by the server.")
    return kind


def checked_put(namespace: tuple[str, ...], key: Any, value: Any) -> tuple[MemoryKind, dict]:
    """The kind and the item to store (normalized by its model), or InvalidItem / ReadOnlyNamespace."""
    kind = _writable(namespace)
    if not isinstance(value, dict):
        raise InvalidItem(f"A {kind.name} item is a JSON object, not {type(value).__name__}.")
    try:
        item = kind.model.model_validate(value, context=NEW_VALUES)
    except ValidationError as exc:
        raise InvalidItem(f"Not a valid {kind.name} item: {_reasons(exc)}.") from exc
    if kind.key_of(item) != key:
        where = f"its {kind.id_field}" if kind.id_field else f"the key {kind.fixed_key!r}"
        raise InvalidItem(f"A {kind.name} item is stored under {where}: key {str(key)[:200]!r} differs.")
    for name in kind.embedded:
        text = getattr(item, name, "")
        if isinstance(text, str) and not text.strip():
            raise InvalidItem(f"{name} is empty.")
    return kind, item.model_dump(mode="json")


def check_delete(namespace: tuple[str, ...]) -> MemoryKind | None:
    """The kind a client deletes from (None: outside the memory kinds), or ReadOnlyNamespace."""
    kind = kind_of_namespace(namespace)
    if kind is not None and not kind.client_writable:
        raise ReadOnlyNamespace(f"The {kind.name} items are maintained by the server.")
    return kind
