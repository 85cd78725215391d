"""The memory kinds: what a user's memory is made of, in one table.

Every place that handles "each kind" loops over :data:`KINDS` instead of naming them: the
readers' validation (memory.user_memory), the store API's write checks (app/studio/store_writes.py),
the writer's report, the CLI's ``memory drop`` choices, the memory views and forget-me.
Adding a kind is its pydantic model (core/schemas.py), its namespace (core/namespaces.py)
and one :class:`MemoryKind` below; a kind kept in a table of its own (not the store) gives
``namespace=None`` and a ``forget`` hook that deletes the user's rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Literal

from pydantic import BaseModel

from core.namespaces import PROFILE_KEY, chats_ns, facts_ns, profile_ns, tasks_ns
from core.schemas import ChatRecord, Fact, SaidMessage, Task, UserDocument
from storage import episodes


@dataclass(frozen=True)
class MemoryKind:
    name: str
    """The namespace's last label and the name users and clients see ("facts")."""
    model: type[BaseModel]
    """What an item must validate as, on the way in and when read back."""
    namespace: Callable[[str], tuple[str, ...]] | None
    """The user's store namespace of this kind; None for a kind kept in a table of its own."""
    id_field: str | None
    """The model field that must equal the store key; None when the kind has one fixed key."""
    fixed_key: str | None = None
    """The one key of a single-document kind (the profile)."""
    embedded: tuple[str, ...] = ()
    """Fields the store embeds for semantic search (empty: never searched by meaning)."""
    client_writable: bool = False
    """Whether a client may put items of this kind through the LangGraph store API (always through
    the writer, memory.writer.edits.put_client_item); the server maintains the others."""
    forget: Callable[[Any, str], Awaitable[int]] | None = None
    """Deletes one user's items (pool, user_id) -> count, for a kind outside the store; a store kind
    is forgotten with the user's whole namespace root (memory.chat_admin.forget_user_everywhere)."""

    def key_of(self, item: BaseModel) -> str:
        return self.fixed_key if self.id_field is None else str(getattr(item, self.id_field))

    @property
    def index(self) -> list[str] | bool:
        """The store ``index`` argument for a put of this kind."""
        return list(self.embedded) if self.embedded else False


KINDS: dict[str, MemoryKind] = {
    k.name: k
    for k in (
        MemoryKind("profile", UserDocument, profile_ns, None, fixed_key=PROFILE_KEY, client_writable=True),
        MemoryKind("facts", Fact, facts_ns, "id", embedded=("text",), client_writable=True),
        MemoryKind("tasks", Task, tasks_ns, "id", embedded=("description",), client_writable=True),
        MemoryKind("chats", ChatRecord, chats_ns, "thread_id", embedded=("summary_text",)),
        # Every message of every chat, in a table of its own (memory.episodes): derived data.
        MemoryKind("messages", SaidMessage, None, "message_id", embedded=("text",), forget=episodes.delete_owner),
    )
}
STORE_KINDS: tuple[MemoryKind, ...] = tuple(k for k in KINDS.values() if k.namespace is not None)
STORE_KIND_NAMES: tuple[str, ...] = tuple(k.name for k in STORE_KINDS)
Kind = Literal[STORE_KIND_NAMES]  # type: ignore[valid-type]  # a store kind's name, for pydantic and FastAPI


def kind_of_namespace(namespace: tuple[str, ...]) -> MemoryKind | None:
    """The kind stored at ``("users", U, <kind>)``; None for anything else."""
    if len(namespace) != 3:
        return None
    kind = KINDS.get(namespace[2])
    return kind if kind is not None and kind.namespace is not None else None
