"""Calls from a web page on another origin (a frontend served elsewhere): the browser asks first
(a CORS preflight) and reads an answer only when it names the page's origin. Off unless
``MEMORY_AGENT_CORS_ORIGINS`` lists the origins, comma-separated (``https://app.example.com``); ``*``
lets any page call with a key it holds. Keys travel in a header, never a cookie, so no credentials
are allowed: a page can use only a key the user gave it."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware

CORS_ENV = "MEMORY_AGENT_CORS_ORIGINS"
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]
HEADERS = ["Authorization", "X-API-Key", "Content-Type", "Last-Event-ID"]
# What a page may read of an answer besides the simple headers: the worker that served it.
EXPOSED = ["X-Worker-Pid"]


_DEFAULT_PORTS = {"http": 80, "https": 443}


def cors_origins(value: str | None = None) -> list[str]:
    """The origins ``MEMORY_AGENT_CORS_ORIGINS`` names (``value`` when given), written as a browser
    sends them (lower case, no default port: the server compares them exactly); ValueError, saying
    which, for one that is not ``scheme://host[:port]`` (a path, a trailing slash or a wildcard in
    the host never matches what a browser sends) or ``*``."""
    raw = os.environ.get(CORS_ENV, "") if value is None else value
    origins = []
    for origin in (o.strip() for o in raw.split(",") if o.strip()):
        if origin == "*":
            origins.append(origin)
            continue
        parts = urlsplit(origin)
        try:
            port = parts.port
        except ValueError:
            parts, port = None, None
        if (parts is None or parts.scheme.lower() not in _DEFAULT_PORTS or not parts.hostname or "*" in parts.netloc
                or parts.path or parts.query or parts.fragment or parts.username or parts.password):
            raise ValueError(f"{CORS_ENV}: {origin!r} is not an origin: write scheme://host[:port], as https://app.example.com, "
                             "each origin whole (no wildcard in a host), or *")
        scheme, host = parts.scheme.lower(), parts.hostname.lower()
        host = f"[{host}]" if ":" in host else host
        origins.append(f"{scheme}://{host}" + (f":{port}" if port is not None and port != _DEFAULT_PORTS[scheme] else ""))
    return origins


def allow_cross_origin(app: FastAPI) -> None:
    """Answer the preflight and name the origin, for the configured origins (none: nothing added)."""
    origins = cors_origins()
    if origins:
        app.add_middleware(CORSMiddleware, allow_origins=origins, allow_methods=METHODS, allow_headers=HEADERS,
                           expose_headers=EXPOSED, allow_credentials=False, max_age=600)
