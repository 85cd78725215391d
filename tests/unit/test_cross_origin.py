"""A web page on another origin can call the API when the operator names that origin
(MEMORY_AGENT_CORS_ORIGINS): the browser's preflight is answered, and the answer names the origin.
Unnamed origins and a server with none configured get no such answer; a malformed origin is
refused at start, saying which."""

from __future__ import annotations

import httpx
import pytest

from app.http import serve
from app.http.app import create_app
from app.http.cross_origin import CORS_ENV, cors_origins

FRONTEND = "https://app.example.com"


async def _call(method: str, path: str, headers: dict) -> httpx.Response:
    # No lifespan: the preflight and a static file need neither the database nor a key.
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app()), base_url="http://api.test") as client:
        return await client.request(method, path, headers=headers)


PREFLIGHT = {"Origin": FRONTEND, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization, content-type"}


async def test_a_named_origin_gets_its_preflight_answered_and_its_origin_named(monkeypatch):
    monkeypatch.setenv(CORS_ENV, f"{FRONTEND}, http://localhost:5173")
    answer = await _call("OPTIONS", "/chats", PREFLIGHT)
    assert answer.status_code == 200
    assert answer.headers["access-control-allow-origin"] == FRONTEND
    assert {"POST", "DELETE", "PATCH"} <= set(answer.headers["access-control-allow-methods"].split(", "))
    assert "authorization" in answer.headers["access-control-allow-headers"].lower()
    assert "access-control-allow-credentials" not in answer.headers  # keys travel in a header, never a cookie
    page = await _call("GET", "/static/app.js", {"Origin": FRONTEND})
    assert page.headers["access-control-allow-origin"] == FRONTEND
    assert "x-worker-pid" in page.headers["access-control-expose-headers"].lower()


async def test_an_origin_not_named_and_a_server_with_none_get_no_cross_origin_answer(monkeypatch):
    monkeypatch.setenv(CORS_ENV, FRONTEND)
    other = await _call("OPTIONS", "/chats", {**PREFLIGHT, "Origin": "https://evil.example"})
    assert other.status_code == 400 and "access-control-allow-origin" not in other.headers
    monkeypatch.delenv(CORS_ENV)
    assert (await _call("OPTIONS", "/chats", PREFLIGHT)).status_code == 405
    assert "access-control-allow-origin" not in (await _call("GET", "/static/app.js", {"Origin": FRONTEND})).headers


@pytest.mark.parametrize("origin", ["https://app.example.com/", "app.example.com", "https://app.example.com/chat", "ftp://x.org", "https://h:port",
                                    "https://*.example.com"])
def test_a_malformed_origin_is_refused_saying_which(origin):
    with pytest.raises(ValueError, match="is not an origin"):
        cors_origins(origin)
    assert cors_origins("*, http://localhost:5173") == ["*", "http://localhost:5173"]


def test_an_origin_is_kept_as_a_browser_sends_it():
    """The server compares origins exactly: "HTTPS://App.Example.com" or ":443" never matched a browser's."""
    assert cors_origins("HTTPS://App.Example.com:443, http://[::1]:8080, http://Localhost:80") == [
        "https://app.example.com", "http://[::1]:8080", "http://localhost"]


def test_serve_refuses_to_start_with_a_malformed_origin(monkeypatch, capsys):
    monkeypatch.setenv(CORS_ENV, "https://app.example.com/")
    assert serve.main([]) == 2
    assert "is not an origin" in capsys.readouterr().err
