"""Store namespaces: one set per user, so isolation is a matter of the prefix."""

from __future__ import annotations

import argparse

from core.errors import MemoryAgentError
from core.text_validation import ID_CHARS

ROOT = "users"
PROFILE_KEY = "profile"

# Value fields the store embeds (a document lacking a field is simply not embedded there).
INDEXED_FIELDS = ["text", "description", "summary_text"]


class InvalidUserId(MemoryAgentError, ValueError):
    """A user id the store cannot hold safely (see :func:`check_user_id`)."""


# Characters the Postgres store reads as structure: '.' joins namespace labels (so "a.b" is
# two labels and ".." climbs nothing but splits), '*' is the wildcard of list_namespaces'
# match conditions (a user "*" would list every user's namespaces); '/' and '\' make ids
# that read as paths ("../alice").
RESERVED_CHARS = ".*/\\"


def user_id_problem(user_id: object) -> str | None:
    """Why ``user_id`` is not a usable user id, or None when it is."""
    if not isinstance(user_id, str) or not user_id:
        return "it is empty"
    if len(user_id) > ID_CHARS:
        return f"it is longer than {ID_CHARS} characters"
    for position, ch in enumerate(user_id):
        if ch in RESERVED_CHARS:
            return f"it contains {ch!r} (position {position}); user ids may not contain any of . * / \\"
        if ch.isspace() or not ch.isprintable():  # control characters, NUL, lone surrogates, blanks
            return f"it contains the character U+{ord(ch):04X} (position {position}); user ids may not contain blanks or control characters"
    return None


def check_user_id(user_id: str) -> str:
    """``user_id`` unchanged, or InvalidUserId saying why: the one rule for user ids, applied by the
    namespaces below, API key creation and verification, thread ownership and every entry point."""
    problem = user_id_problem(user_id)
    if problem is not None:
        shown = user_id if len(user_id) <= 60 else f"{user_id[:60]}…"
        raise InvalidUserId(f"invalid user id {shown!r}: {problem}")
    return user_id


class InvalidThreadId(MemoryAgentError, ValueError):
    """A chat (thread) id no owner row is written for (see :func:`check_thread_id`)."""


def thread_id_problem(thread_id: object) -> str | None:
    """Why ``thread_id`` is no id a new chat may take, or None: not empty, at most ID_CHARS, no blank
    at either end, no control characters (a chat under such an id was answered but its record could
    not be written, or it was listed with a blank id). Applied where a new thread gets its owner
    (storage.thread_owners); a chat that already has its owner row keeps its id."""
    if not isinstance(thread_id, str) or not thread_id.strip():
        return "it is empty"
    if len(thread_id) > ID_CHARS:
        return f"it is longer than {ID_CHARS} characters"
    if thread_id != thread_id.strip():
        return "it begins or ends with a blank"
    for position, ch in enumerate(thread_id):
        if not ch.isprintable() and ch != " ":
            return f"it contains the character U+{ord(ch):04X} (position {position}); chat ids may not contain control characters"
    return None


def check_thread_id(thread_id: str) -> str:
    """``thread_id`` unchanged, or InvalidThreadId saying why (:func:`thread_id_problem`)."""
    problem = thread_id_problem(thread_id)
    if problem is not None:
        shown = thread_id if not isinstance(thread_id, str) or len(thread_id) <= 60 else f"{thread_id[:60]}…"
        raise InvalidThreadId(f"invalid chat id {shown!r}: {problem}")
    return thread_id


def thread_id_arg(value: str) -> str:
    """``check_thread_id`` as an argparse type (the CLI's --chat, --resume)."""
    try:
        return check_thread_id(value)
    except InvalidThreadId as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def user_id_arg(value: str) -> str:
    """``check_user_id`` as an argparse type: every command's --user is refused with the reason,
    before anything is opened, so a bad id leaves nothing behind."""
    try:
        return check_user_id(value)
    except InvalidUserId as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def user_root(user_id: str) -> tuple[str, ...]:
    return (ROOT, check_user_id(user_id))


def profile_ns(user_id: str) -> tuple[str, ...]:
    """One document: profile and preferences."""
    return (*user_root(user_id), "profile")


def facts_ns(user_id: str) -> tuple[str, ...]:
    return (*user_root(user_id), "facts")


def tasks_ns(user_id: str) -> tuple[str, ...]:
    return (*user_root(user_id), "tasks")


def chats_ns(user_id: str) -> tuple[str, ...]:
    return (*user_root(user_id), "chats")
