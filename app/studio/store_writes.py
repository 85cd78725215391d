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
tags answer 422, as the chat API does) by the writer's own check
(``memory.writer.edits.checked_client_item``, which the writer applies again whoever calls it),
then written by the one writer under the user's lock (``memory.writer.edits.put_client_item``,
reached through the server's store, ``app/studio/backend.py``): the same fact text put under six
keys is one fact.
"""

from __future__ import annotations

from typing import Any

from memory.kinds import KINDS, MemoryKind, kind_of_namespace
from memory.writer.edits import checked_client_item


class ReadOnlyNamespace(PermissionError):
    """Clients may not write there (HTTP 403)."""


def _writable(namespace: tuple[str, ...]) -> MemoryKind:
    kind = kind_of_namespace(namespace)
    if kind is None:
        writable = ", ".join(k.name for k in KINDS.values() if k.client_writable)
        raise ReadOnlyNamespace(f"Clients may write only to {writable} under ('users', <you>), not to {'.'.join(namespace)}.")
    if not kind.client_writable:
        raise ReadOnlyNamespace(f"The {kind.name} items are maintained by the server.")
    return kind


def checked_put(namespace: tuple[str, ...], key: Any, value: Any) -> tuple[MemoryKind, dict]:
    """The kind and the item to store (normalized by its model), or InvalidClientItem / ReadOnlyNamespace."""
    kind = _writable(namespace)
    return kind, checked_client_item(kind, key, value).model_dump(mode="json")


def check_delete(namespace: tuple[str, ...]) -> MemoryKind | None:
    """The kind a client deletes from (None: outside the memory kinds), or ReadOnlyNamespace."""
    kind = kind_of_namespace(namespace)
    if kind is not None and not kind.client_writable:
        raise ReadOnlyNamespace(f"The {kind.name} items are maintained by the server.")
    return kind
