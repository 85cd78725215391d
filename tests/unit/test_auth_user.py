"""Which memory user a LangGraph Server caller acts as (core.auth_user)."""

from __future__ import annotations

import pytest
from langgraph_sdk.auth.types import StudioUser

from core.auth_user import LOCAL_USER, STUDIO_USER_ENV, memory_user_of, studio_user


def test_studio_acts_as_the_studio_user_never_the_local_one(monkeypatch):
    monkeypatch.delenv(STUDIO_USER_ENV, raising=False)
    assert memory_user_of(StudioUser("langgraph-studio-user")) == "studio" != LOCAL_USER
    assert memory_user_of({"kind": "StudioUser", "identity": "x"}) == "studio"  # after serialization


def test_the_studio_user_can_be_told_otherwise(monkeypatch):
    monkeypatch.setenv(STUDIO_USER_ENV, "local")
    assert memory_user_of(StudioUser("langgraph-studio-user")) == "local"
    assert studio_user({STUDIO_USER_ENV: "  dana "}) == "dana"


def test_an_unusable_studio_user_is_refused_by_name():
    with pytest.raises(ValueError, match=STUDIO_USER_ENV):
        studio_user({STUDIO_USER_ENV: "a.b"})


def test_a_key_holder_stays_themself():
    assert memory_user_of({"identity": "alice"}) == "alice"
    assert memory_user_of(None) is None


async def test_a_request_without_a_key_on_the_dev_server_is_the_studio_user(monkeypatch):
    monkeypatch.setenv("MEMORY_AGENT_AUTH", "optional")
    monkeypatch.delenv(STUDIO_USER_ENV, raising=False)
    from app.studio.auth import authenticate

    assert (await authenticate(None))["identity"] == "studio"
    monkeypatch.setenv(STUDIO_USER_ENV, "local")
    assert (await authenticate(None))["identity"] == "local"
