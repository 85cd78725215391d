"""Forget-me against requests already past authentication (real Postgres, offline model, the app in process).

A request authenticated (and, for a turn, past the chat's ownership check) just before ``DELETE /me``
that writes only after it is refused with 410 ``user_forgotten`` and leaves nothing of the user: no
owner row, store item, index row, run row or checkpoint. The interleaving is made deterministic by
running forget-me at the exact point (the run's start, or right after the key was checked).
"""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest

from fastapi import Depends

from app.http.auth import api_key_header, bearer, current_user
from app.http.services import Services, get_services
from memory import chat_admin
from storage import api_keys, chat_runs
from tests.support.in_process_app import client_of, in_process_app


@pytest.fixture
async def app(backend):
    async with in_process_app(backend) as app:
        yield app


@pytest.fixture
async def caller(backend, user_id):
    return user_id, await api_keys.create_key(backend.pool, user_id)


async def forget_me(app, key: str) -> None:
    """DELETE /me, as another request (its own task: its own context)."""
    async def delete() -> httpx.Response:
        async with client_of(app, key) as client:
            return await client.delete("/me")

    assert (await asyncio.create_task(delete())).status_code == 200


async def left_of(backend, user: str, thread_id: str | None = None) -> dict[str, int]:
    """Everything of ``user`` (and of ``thread_id``) a turn, a chat's creation or a memory write leaves."""
    checks = [
        ("owner", "SELECT count(*) AS n FROM memory_agent_thread_owners WHERE owner = %s", user),
        ("store", "SELECT count(*) AS n FROM store WHERE prefix LIKE %s", f"users.{user}.%"),
        ("index", "SELECT count(*) AS n FROM memory_agent_episodes WHERE owner = %s", user),
        ("runs", "SELECT count(*) AS n FROM memory_agent_runs WHERE user_id = %s", user),
    ]
    if thread_id is not None:
        checks += [
            ("checkpoints", "SELECT count(*) AS n FROM checkpoints WHERE thread_id = %s", thread_id),
            ("thread owner", "SELECT count(*) AS n FROM memory_agent_thread_owners WHERE thread_id = %s", thread_id),
        ]
    async with backend.pool.connection() as conn:
        return {name: (await (await conn.execute(sql, (arg,))).fetchone())["n"] for name, sql, arg in checks}


async def test_a_message_past_its_checks_whose_run_starts_after_forget_me_is_refused_with_410_and_leaves_nothing(app, backend, caller, monkeypatch):
    user, key = caller
    async with client_of(app, key) as client:
        created = await client.post("/chats", json={"title": "Notes"})
        assert created.status_code == 201, created.text
        chat_id = created.json()["chat"]["id"]
        real_start = chat_runs.start_run

        async def forget_me_lands_first(*args, **kwargs):
            monkeypatch.setattr(chat_runs, "start_run", real_start)
            await forget_me(app, key)  # the request is authenticated and owns the chat; its run is not started yet
            return await real_start(*args, **kwargs)

        monkeypatch.setattr(chat_runs, "start_run", forget_me_lands_first)
        response = await client.post(f"/chats/{chat_id}/messages", json={"text": "I work as a nurse in Porto."})
    assert response.status_code == 410, response.text
    assert response.json()["error"]["code"] == "user_forgotten"
    assert set((await left_of(backend, user, chat_id)).values()) == {0}, await left_of(backend, user, chat_id)


@pytest.mark.parametrize(
    "method, path, body",
    [
        ("POST", "/chats", {"title": "A new chat"}),
        ("PATCH", "/memory/profile", {"role": "nurse"}),
    ],
)
async def test_a_write_authenticated_just_before_forget_me_is_refused_with_410_and_writes_nothing(app, backend, caller, method, path, body):
    user, key = caller
    landed = False

    async def authenticated_then_forgotten(
        services: Services = Depends(get_services), credentials=Depends(bearer), header_key: str | None = Depends(api_key_header)
    ) -> str:
        nonlocal landed
        user = await current_user(services, credentials, header_key)
        if not landed:  # (the DELETE /me below authenticates through here too)
            landed = True
            await forget_me(app, key)
        return user

    app.dependency_overrides[current_user] = authenticated_then_forgotten
    async with client_of(app, key) as client:
        response = await client.request(method, path, json=body)
    assert response.status_code == 410, response.text
    assert response.json()["error"]["code"] == "user_forgotten"
    assert set((await left_of(backend, user)).values()) == {0}, await left_of(backend, user)


async def test_the_generation_is_read_with_the_key_and_a_run_started_after_a_forget_is_refused(backend, caller):
    """At the storage level: what the key check returns is what the run's start compares, in one statement each."""
    from storage.owner_forgets import OwnerForgotten

    user, key = caller
    who = await api_keys.authenticate(backend.pool, key)
    assert who is not None and who.user_id == user
    thread_id = str(uuid.uuid4())
    await chat_admin.forget_user_everywhere(backend, user)  # forget-me ran between the key check and the run's start
    with pytest.raises(OwnerForgotten):
        await chat_runs.start_run(backend.pool, thread_id, user, "message", "test", known_generation=who.generation)
    assert set((await left_of(backend, user, thread_id)).values()) == {0}
    assert await api_keys.authenticate(backend.pool, key) is None  # and the key is gone
    # A caller known now (the CLI, or a new key for the same id) starts runs as before.
    run_id = await chat_runs.start_run(backend.pool, thread_id, user, "message", "test")
    await chat_runs.finish(backend.pool, run_id, "released")
    fresh = await api_keys.authenticate(backend.pool, await api_keys.create_key(backend.pool, user))
    assert fresh.generation > who.generation
    run_id = await chat_runs.start_run(backend.pool, thread_id, user, "message", "test", known_generation=fresh.generation)
    await chat_runs.finish(backend.pool, run_id, "released")
    await chat_runs.delete_thread_runs(backend.pool, thread_id)


async def test_a_chat_created_with_messages_while_forget_me_ran_is_410_not_a_chat_that_is_gone(app, backend, caller, monkeypatch):
    """POST /chats answered each first message, and forget-me ran after a turn: it answered 201 with
    the chat's detail though the chat was gone."""
    user, key = caller
    services = app.state.services
    real_launch = services.runs.launch

    def launch_then_forget(run_id, spec):
        handle = real_launch(run_id, spec)
        real_collect = handle.collect

        async def collect():
            events = await real_collect()
            await forget_me(app, key)  # after the turn, before the answer
            return events

        handle.collect = collect
        return handle

    monkeypatch.setattr(services.runs, "launch", launch_then_forget)
    async with client_of(app, key) as client:
        response = await client.post("/chats", json={"messages": ["I work as a nurse in Porto."]})
    assert response.status_code == 410, response.text
    assert response.json()["error"]["code"] == "user_forgotten"
    assert set((await left_of(backend, user)).values()) == {0}, await left_of(backend, user)
