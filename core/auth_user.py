"""Whose memory a turn uses when LangGraph Server runs the graph.

Under the server the caller is authenticated (``app/studio/auth.py``): the
turn must use that user's memory whatever ``context.user_id`` the client sent.
The server hands the authenticated user to the graph in
``config["configurable"]["langgraph_auth_user"]``, which LangGraph exposes as
``runtime.server_info.user``. Outside the server (CLI, HTTP app, tests) there is
no such user and ``Context.user_id`` — set by our own trusted code — is used.

LangGraph Studio, on ``langgraph dev``, is let in by the server's own Studio
backend as a ``StudioUser`` without credentials. It acts as a user of its own,
``studio`` (``$MEMORY_AGENT_STUDIO_USER`` names another), so personas tried in
Studio never touch the memory of ``local``, the CLI's and the web page's default
user. The auth handlers refuse Studio when ``MEMORY_AGENT_AUTH=required``.

A key-less caller (Studio, or a request without a key in ``optional`` mode: the machine's own
user) may name the user a run acts as, in ``configurable.user_id`` as the LangGraph memory-agent
template passes it (or ``context.user_id``). The auth handler decides (``app/studio/auth.py``) and
writes its decision into the run's ``context.user_id``, which the graph then follows for such a
caller; a key holder is always the key's user.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from langgraph_sdk.auth.types import StudioUser

from core.namespaces import InvalidUserId, user_id_problem

LOCAL_USER = "local"
STUDIO_USER = "studio"
STUDIO_USER_ENV = "MEMORY_AGENT_STUDIO_USER"
KEYLESS = "memory-agent:keyless"
"""The permission the auth handler gives a caller without a key (``optional`` mode only)."""


def studio_user(environ: Mapping[str, str] = os.environ) -> str:
    """The memory user LangGraph Studio acts as: ``$MEMORY_AGENT_STUDIO_USER``, else ``studio``."""
    configured = (environ.get(STUDIO_USER_ENV) or "").strip()
    if not configured:
        return STUDIO_USER
    if (problem := user_id_problem(configured)) is not None:
        raise InvalidUserId(f"{STUDIO_USER_ENV}={configured!r} is not a usable user id: {problem}")
    return configured


def is_studio_user(user: Any) -> bool:
    if isinstance(user, StudioUser):
        return True
    # A user that went through serialization arrives as a dict.
    return isinstance(user, Mapping) and user.get("kind") == "StudioUser"


def is_keyless(user: Any) -> bool:
    """Studio, or a caller let in without a key (``optional`` mode): the run's user is named by the run."""
    if user is None:
        return False
    if is_studio_user(user):
        return True
    permissions = user.get("permissions") if isinstance(user, Mapping) else getattr(user, "permissions", None)
    return KEYLESS in (permissions or ())


def memory_user_of(user: Any) -> str | None:
    """The memory user id of a server-authenticated user, or None when there is none."""
    if user is None:
        return None
    if is_studio_user(user):
        return studio_user()
    identity = user.get("identity") if isinstance(user, Mapping) else getattr(user, "identity", None)
    return str(identity) if identity else None


def _config_of(runtime: Any) -> Mapping[str, Any] | None:
    config = getattr(runtime, "config", None)  # ToolRuntime carries it
    if isinstance(config, Mapping):
        return config
    try:
        from langgraph.config import get_config

        return get_config()
    except RuntimeError:  # not inside a runnable: no server config either
        return None


def server_user(runtime: Any) -> Any | None:
    """The user LangGraph Server authenticated for this run (None outside the server)."""
    info = getattr(runtime, "server_info", None)
    user = getattr(info, "user", None) if info is not None else None
    if user is not None:
        return user
    config = _config_of(runtime)
    configurable = (config or {}).get("configurable") or {}
    return configurable.get("langgraph_auth_user")


def effective_user_id(runtime: Any, ctx: Any) -> str:
    """The user whose memory this turn reads and writes.

    The server-authenticated user when there is one, or for a key-less one the user the auth
    handler chose and wrote into ``ctx.user_id`` (the run's named user, else the Studio user);
    otherwise ``ctx.user_id``. ``runtime`` is a node's ``Runtime`` or a tool's ``ToolRuntime``;
    ``ctx`` the turn's :class:`core.context.Context` (from ``get_context(runtime)``).
    """
    user = server_user(runtime)
    if is_keyless(user):
        return ctx.user_id
    return memory_user_of(user) or ctx.user_id
