"""Store namespaces: one set per user, so isolation is a matter of the prefix."""

from __future__ import annotations

ROOT = "users"
PROFILE_KEY = "profile"

# Value fields the store embeds (a document lacking a field is simply not embedded there).
INDEXED_FIELDS = ["text", "description", "summary_text"]


def _check(user_id: str) -> str:
    if not user_id or "." in user_id or "/" in user_id:
        raise ValueError(f"invalid user id {user_id!r}: it must be non-empty, without '.' or '/'")
    return user_id


def user_root(user_id: str) -> tuple[str, ...]:
    return (ROOT, _check(user_id))


def profile_ns(user_id: str) -> tuple[str, ...]:
    """One document: profile and preferences."""
    return (*user_root(user_id), "profile")


def facts_ns(user_id: str) -> tuple[str, ...]:
    return (*user_root(user_id), "facts")


def tasks_ns(user_id: str) -> tuple[str, ...]:
    return (*user_root(user_id), "tasks")


def chats_ns(user_id: str) -> tuple[str, ...]:
    return (*user_root(user_id), "chats")
