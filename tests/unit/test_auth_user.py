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


class _Runtime:
    """A node's runtime under the server: the authenticated user in its config."""

    def __init__(self, user) -> None:
        self.config = {"configurable": {"langgraph_auth_user": user}}


def test_a_keyless_caller_in_local_mode_acts_as_the_user_the_auth_handler_chose_from_the_run():
    from core.auth_user import KEYLESS, effective_user_id
    from core.context import Context

    named = Context(user_id="dana")  # what the handler wrote into the run's context
    assert effective_user_id(_Runtime({"identity": "studio", "permissions": [KEYLESS]}), named) == "dana"
    assert effective_user_id(_Runtime(StudioUser("langgraph-studio-user")), named) == "dana"


def test_a_key_holder_is_the_keys_user_whatever_user_id_the_run_carries():
    from core.auth_user import effective_user_id
    from core.context import Context

    assert effective_user_id(_Runtime({"identity": "alice", "permissions": []}), Context(user_id="bob")) == "alice"


def test_the_user_a_run_names_is_configurable_user_id_as_in_the_langgraph_template(monkeypatch):
    monkeypatch.setenv("MEMORY_AGENT_AUTH", "optional")
    from app.studio.auth import _named_user

    assert _named_user({"config": {"configurable": {"user_id": "dana"}}, "context": {"user_id": "noa"}}) == "dana"
    assert _named_user({"context": {"user_id": "noa"}}) == "noa"
    # The settings form's default is no choice: Studio's runs stay the Studio user's, not the CLI's.
    assert _named_user({"context": {"user_id": "local"}}) is None
    assert _named_user({"config": {"configurable": {"user_id": "local", "__context_provided__": True}}}) is None
    assert _named_user({"config": {"configurable": {"user_id": "  "}}}) is None
    assert _named_user(None) is None


async def test_with_keys_required_or_a_key_sent_the_named_user_is_ignored(monkeypatch):
    monkeypatch.setenv("MEMORY_AGENT_AUTH", "optional")
    from types import SimpleNamespace

    from app.studio.auth import _acting_user, authenticate

    # Only a caller let in without a key carries the mark that lets a run name its user.
    assert (await authenticate(None))["permissions"] == ["memory-agent:keyless"]
    key_holder = SimpleNamespace(user={"identity": "alice", "permissions": []})
    run = {"config": {"configurable": {"user_id": "bob"}}, "context": {"user_id": "bob"}}
    assert await _acting_user(key_holder, run, "alice") == "alice"
    monkeypatch.setenv("MEMORY_AGENT_AUTH", "required")
    with pytest.raises(Exception) as refused:
        await authenticate(None)
    assert refused.value.status_code == 401


@pytest.mark.parametrize(("said", "mode"), [("off", "optional"), ("on", "required"), ("Optional", "optional"), ("", "required")])
def test_the_studio_server_takes_serves_on_and_off_for_one_auth_setting(said, mode):
    """MEMORY_AGENT_AUTH=off, as the docs give it for serve, stopped the Studio server at start-up."""
    from app.studio.auth import auth_mode

    assert auth_mode({"MEMORY_AGENT_AUTH": said}) == mode
    with pytest.raises(ValueError, match="MEMORY_AGENT_AUTH='of' is not one of required, optional"):
        auth_mode({"MEMORY_AGENT_AUTH": "of"})
