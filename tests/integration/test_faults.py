"""Faults mid-reply on live servers (`memory-agent serve`) and a real embedded Postgres:
the Postgres server killed and restarted, a worker killed with SIGKILL.

What must hold: the client's stream ends with an ``error`` event within seconds; the chat
is usable again within 30 s (no 409, ``running: false``); the turn is kept as a stopped
one (the user's message, the reply as far as it got, marked stopped) and memory learns
nothing from it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid

import httpx
import psutil
import psycopg
import pytest

from storage.chat_runs import STALE_AFTER_SECONDS
from tests.support.embedded_postgres import throwaway_postgres, with_database
from tests.support.graph_turns import turn_paused_at_commit_point
from tests.support.http_server import BackgroundStream, create_keys, final, new_chat, new_user, paced_test_model, reply_text, running_server, say, start_server
from tests.support.openai_stub_server import openai_stub, openai_stub_server  # noqa: F401 (pytest fixtures)

# Replies of the servers that meet a fault come at 300 ms a word; to a user it knows nothing
# about, the offline model echoes this message: ~30 words, still streaming when the fault hits.
SLOW = paced_test_model(300)
SLOW_MESSAGE = "I have a dog named Rex, a cat called Tom, two goldfish and a garden full of tomatoes, beans and sunflowers"
FIRST = "hello"  # a first turn that teaches memory nothing (so the next reply is the long echo)
REAPED_WITHIN_SECONDS = 30


def slow_replies(server, key: str, *chat_ids: str, tokens: int = 5) -> list[BackgroundStream]:
    """Slow replies on these chats, once each has streamed ``tokens`` and a heartbeat has saved some of it."""
    running = [BackgroundStream(server, key, "POST", f"/chats/{chat_id}/messages", {"text": SLOW_MESSAGE}) for chat_id in chat_ids]
    deadline = time.monotonic() + 60
    for reply in running:
        reply.wait_for_tokens()
        while sum(e.name == "token" for e in reply.events) < tokens:
            assert time.monotonic() < deadline and not reply.error, "the reply stopped streaming"
            time.sleep(0.05)
    for chat_id in chat_ids:  # what a take-back keeps: the reply as far as a heartbeat saved it
        while not saved_reply(server.database_url, chat_id):
            assert time.monotonic() < deadline, "no heartbeat saved the reply"
            time.sleep(0.05)
    for reply in running:
        assert not any(e.name in ("done", "error") for e in reply.events), "the reply ended before the fault"
    return running


def saved_reply(database_url: str, chat_id: str) -> str:
    """The reply of the chat's running run as far as its heartbeats have saved it."""
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT partial_reply FROM memory_agent_runs WHERE thread_id = %s AND status = 'running'", (chat_id,)
        ).fetchone()
    return (row[0] or "") if row else ""


def wait_until_usable(client, chat_id: str, since: float, timeout: float = REAPED_WITHIN_SECONDS) -> dict:
    """Poll the chat until no reply runs on it; the chat then. Transport errors and 5xx (a
    database coming back) count as not yet."""
    while True:
        try:
            response = client.get(f"/chats/{chat_id}")
            if response.status_code == 200 and not response.json()["running"]:
                return response.json()
        except httpx.TransportError:
            pass
        assert time.monotonic() - since < timeout, f"the chat was still running {timeout}s after the fault"
        time.sleep(0.25)


def wait_until_reaped(database_url: str, chat_id: str, since: float, timeout: float = REAPED_WITHIN_SECONDS) -> None:
    """Wait, without touching the chat through the API (which would take the run back itself),
    until no run is active on it: the periodic reaper of a live worker did it."""
    while True:
        with psycopg.connect(database_url) as conn:
            active = conn.execute(
                "SELECT count(*) FROM memory_agent_runs WHERE thread_id = %s AND status IN ('running', 'stopping', 'committing')",
                (chat_id,),
            ).fetchone()[0]
        if not active:
            return
        assert time.monotonic() - since < timeout, f"the dead worker's run was not reaped within {timeout}s"
        time.sleep(0.25)


def assert_kept_as_stopped(detail: dict, streamed: str) -> None:
    """The half-turn is kept as a stopped one: the message, and the reply as far as it got."""
    roles = [m["role"] for m in detail["messages"]]
    assert roles == ["user", "assistant", "user", "assistant"], roles
    assert detail["messages"][0]["content"] == FIRST
    question, kept = detail["messages"][2:]
    assert question["content"] == SLOW_MESSAGE
    assert kept["stopped"] is True
    assert kept["content"] and streamed.startswith(kept["content"]), (kept["content"], streamed)


# --------------------------------------------------------------------------- Postgres killed mid-reply
@pytest.fixture(scope="module")
def own_postgres():
    """A Postgres server of its own: this module kills it."""
    with throwaway_postgres("ma-kill-") as server:
        yield server


def kill_postgres(server) -> None:
    """SIGKILL the postmaster and every backend: a crash, not a shutdown."""
    master = psutil.Process(server.get_pid())
    processes = [master, *master.children(recursive=True)]
    for process in processes:
        try:
            process.kill()
        except psutil.NoSuchProcess:  # a backend that noticed its postmaster die and left first
            pass
    psutil.wait_procs(processes, timeout=10)


@pytest.mark.slow  # kills Postgres
async def test_postgres_killed_mid_reply_ends_the_stream_with_an_error_in_seconds_and_the_turn_is_kept_once_it_is_back(own_postgres):
    name = f"kill_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(own_postgres.get_uri(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = with_database(own_postgres.get_uri(), name)
    live = start_server(url, workers=1, model=SLOW)
    try:
        user = new_user()
        key = (await create_keys(url, [user]))[user]
        with live.client(key, timeout=30) as client:
            chat_id = new_chat(client)
            assert final(say(client, chat_id, FIRST)).name == "done"
            (running,) = slow_replies(live, key, chat_id)

            killed = time.monotonic()
            kill_postgres(own_postgres)
            events = running.join(timeout=60)
            ended_after = time.monotonic() - killed
            end = final(events)
            assert end.name == "error" and end.data["code"] == "database_unavailable", end
            assert end.data["text"] == SLOW_MESSAGE  # the message comes back with the error
            assert ended_after < 10, f"the stream ended {ended_after:.1f}s after the database died"

            own_postgres.ensure_postgres_running()
            restarted = time.monotonic()
            detail = wait_until_usable(client, chat_id, restarted)
            assert_kept_as_stopped(detail, reply_text(events))
            facts = client.get("/memory/facts").json()["facts"]
            assert not any("Rex" in f["text"] for f in facts), facts  # nothing learned from the stopped turn
            assert final(say(client, chat_id, "hello again")).name == "done"  # and the chat goes on
            print(f"\nstream ended {ended_after:.1f}s after the kill; chat usable {time.monotonic() - restarted:.1f}s after the restart")
    finally:
        live.stop()


@pytest.mark.slow
async def test_while_postgres_is_down_requests_get_their_503_within_seconds_not_the_pools_30(own_postgres):
    name = f"down_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(own_postgres.get_uri(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = with_database(own_postgres.get_uri(), name)
    live = start_server(url, workers=1)
    try:
        user = new_user()
        key = (await create_keys(url, [user]))[user]
        with live.client(key, timeout=60) as client:
            assert client.get("/chats").status_code == 200
            kill_postgres(own_postgres)
            took = []
            for path in ("/chats", "/memory/facts", "/healthz"):
                started = time.monotonic()
                response = client.get(path)
                took.append(time.monotonic() - started)
                assert response.status_code == 503, (path, response.text)
            print(f"\n503s after {', '.join(f'{t:.1f}' for t in took)} s")
            assert max(took) < 10, took
    finally:
        own_postgres.ensure_postgres_running()
        live.stop()


# --------------------------------------------------------------------------- a worker killed mid-reply
@pytest.fixture(scope="module")
def database(new_database):
    return new_database("faults")


@pytest.fixture(scope="module")
def survivor(database):
    """The server that stays up while another one on the same database is killed."""
    with running_server(database, workers=1) as live:
        yield live


@pytest.mark.slow  # kills a worker
async def test_a_worker_killed_mid_reply_is_reaped_by_a_live_one_and_stop_on_its_run_answers(database, survivor):
    user = new_user()
    key = (await create_keys(database, [user]))[user]
    doomed = start_server(database, workers=1, model=SLOW)
    try:
        with doomed.client(key) as c:
            reaped_chat, stopped_chat = new_chat(c), new_chat(c)
            for chat_id in (reaped_chat, stopped_chat):
                assert final(say(c, chat_id, FIRST)).name == "done"
        left_to_reaper, left_to_stop = slow_replies(doomed, key, reaped_chat, stopped_chat)
        killed = time.monotonic()
        os.kill(doomed.process.pid, signal.SIGKILL)
        doomed.process.wait(timeout=10)
    finally:
        doomed.stop()
    streamed = {}
    for chat_id, running in ((reaped_chat, left_to_reaper), (stopped_chat, left_to_stop)):
        with pytest.raises(httpx.TransportError):  # the connection died with the worker: no end event
            running.join()
        streamed[chat_id] = reply_text(running.events)

    with survivor.client(key, timeout=60) as client:
        # /stop on the dead worker's run: answered as soon as its heartbeat has expired, with the turn kept.
        stopped = client.post(f"/chats/{stopped_chat}/stop").json()
        stop_answered = time.monotonic() - killed
        assert stopped["stopped"] is True and stopped["status"] == "stopped" and "kept" in stopped["message"], stopped
        assert stop_answered < STALE_AFTER_SECONDS + 5
        assert_kept_as_stopped(client.get(f"/chats/{stopped_chat}").json(), streamed[stopped_chat])

        # The other chat: nobody asks, the live worker's reaper frees it.
        wait_until_reaped(database, reaped_chat, killed)
        reaped = time.monotonic() - killed
        detail = client.get(f"/chats/{reaped_chat}").json()
        assert detail["running"] is False
        assert_kept_as_stopped(detail, streamed[reaped_chat])
        assert not any("Rex" in f["text"] for f in client.get("/memory/facts").json()["facts"])
        for chat_id in (reaped_chat, stopped_chat):
            assert final(say(client, chat_id, "hello again")).name == "done"
    with psycopg.connect(database) as conn:
        rows = conn.execute(
            "SELECT kind, status FROM memory_agent_runs WHERE thread_id = %s ORDER BY started_at", (reaped_chat,)
        ).fetchall()
    assert rows[-3:] == [("message", "abandoned"), ("recover", "stopped"), ("message", "finished")]
    print(f"\n/stop answered {stop_answered:.1f}s after the kill; the other chat was reaped {reaped:.1f}s after it")


@pytest.mark.slow  # kills a worker
async def test_a_worker_killed_the_moment_it_answers_a_message_keeps_the_message(database, survivor):
    """The answer (200, the stream opening) comes only once the run has recorded the turn, so a
    worker killed right after it can no longer lose a message its client saw accepted: a live
    worker keeps it as a stopped turn (an empty reply). Killed earlier, the client gets no
    answer at all, and the message is still the client's to send again."""
    user = new_user()
    key = (await create_keys(database, [user]))[user]
    doomed = start_server(database, workers=1, model=SLOW)
    try:
        with doomed.client(key) as c:
            chat_id = new_chat(c)
            with c.stream("POST", f"/chats/{chat_id}/messages", json={"text": SLOW_MESSAGE}) as response:
                assert response.status_code == 200
                os.kill(doomed.process.pid, signal.SIGKILL)
                killed = time.monotonic()
        doomed.process.wait(timeout=10)
    finally:
        doomed.stop()
    with survivor.client(key, timeout=60) as client:
        detail = wait_until_usable(client, chat_id, killed)
    assert [m["role"] for m in detail["messages"]] == ["user", "assistant"], detail["messages"]
    question, kept = detail["messages"]
    assert question["content"] == SLOW_MESSAGE and kept["stopped"] is True


@pytest.mark.slow  # kills a worker
async def test_a_worker_killed_in_the_memory_phase_leaves_a_reply_whose_memory_update_the_reaper_completes(database, survivor, minilm):
    """A worker killed after the commit point leaves its run ``committing`` and the thread paused
    at the commit point (the reply saved, memory not yet updated): that state is made here, and
    the live server's reaper, with nobody touching the chat, completes the memory update."""
    user = new_user()
    key = (await create_keys(database, [user]))[user]
    with survivor.client(key) as client:
        chat_id = new_chat(client)
    await turn_paused_at_commit_point(database, minilm, user, chat_id)
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO memory_agent_runs (run_id, thread_id, user_id, kind, status, worker, heartbeat_at) "
            "VALUES (gen_random_uuid(), %s, %s, 'message', 'committing', 'elsewhere:1', now() - make_interval(secs => %s))",
            (chat_id, user, STALE_AFTER_SECONDS + 1),
        )
    wait_until_reaped(database, chat_id, time.monotonic())
    with survivor.client(key) as client:
        assert [f["text"] for f in client.get("/memory/facts").json()["facts"]] == ["Has a dog named Rex"]
        detail = client.get(f"/chats/{chat_id}").json()
        assert [m["role"] for m in detail["messages"]] == ["user", "assistant"] and not detail["messages"][1]["stopped"]
    with psycopg.connect(database) as conn:
        rows = conn.execute("SELECT kind, status FROM memory_agent_runs WHERE thread_id = %s ORDER BY started_at", (chat_id,)).fetchall()
    assert rows == [("message", "abandoned"), ("recover", "finished")]


# --------------------------------------------------------------------------- a provider that does not answer
@pytest.mark.slow  # waits out real client timeouts
async def test_a_provider_that_does_not_answer_in_time_fails_the_reply_clearly_and_the_chat_is_as_before(
    backend, user_id, openai_stub, monkeypatch
):
    """Through the runner the API and the CLI use; the real openai client against the stub."""
    from langchain_core.messages import HumanMessage

    from app.runs.active_runs import ActiveRuns
    from app.runs.turn_runner import TurnSpec
    from graph.assembly import compile_graph
    from storage.fenced_saver import FencedPostgresSaver
    from tests.support.openai_stub_server import StubReply, structured_answer

    monkeypatch.setenv("MEMORY_AGENT_MODEL_TIMEOUT", "1")
    model = f"openai:stub-{uuid.uuid4().hex[:8]}"
    late = {"on": True}

    def answer(request):
        if request.kind == "reply":
            return StubReply(content="Too late.", delay_seconds=3 if late["on"] else 0)
        if request.kind == "extract":
            return structured_answer(request, {"new_facts": [], "new_preferences": {}, "profile_updates": {}, "task_updates": []})
        return structured_answer(request, {"summary": "A chat.", "topics": ["chat"]} if request.kind == "fold" else {"title": "A chat"})

    openai_stub.reset(answer)
    runs = ActiveRuns(compile_graph(FencedPostgresSaver(backend.pool), backend.store), backend.pool)
    thread_id = str(uuid.uuid4())

    async def turn(text: str) -> list[tuple[str, dict]]:
        run_id = await runs.claim_run_slot(thread_id, user_id, "message")
        graph_input = {"messages": [HumanMessage(text, id=str(uuid.uuid4()))]}
        spec = TurnSpec(thread_id, user_id, "assistant", "message", graph_input, user_text=text, context={"model": model})
        return await runs.launch(run_id, spec).collect()

    started = time.monotonic()
    events = await turn("I live in Haifa")
    waited = time.monotonic() - started
    name, data = events[-1]
    assert name == "error" and data["code"] == "reply_failed" and "timed out" in data["message"].lower(), events
    assert data["text"] == "I live in Haifa"  # offered back to send again
    assert len(openai_stub.requests_of("reply")) == 3  # the first try and the client's two retries, 1 s each
    assert waited < 20
    assert not (await runs.graph.aget_state({"configurable": {"thread_id": thread_id}})).values.get("messages")  # as before: no message

    late["on"] = False
    assert (await turn("I live in Haifa"))[-1][0] == "done"  # the same message, once the provider answers


# --------------------------------------------------------------------------- the heartbeat poller winding down
@pytest.mark.slow
async def test_a_run_launched_while_the_heartbeat_poller_winds_down_still_gets_heartbeats(backend, user_id):
    """The poller ends when its worker has no run left, closing its connection on the way out.
    A run launched during that close found the poller not yet done and started none: it went
    without heartbeats, so a dying database never aborted it (its stream stayed open for a
    minute) and a live worker's reaper would have taken it for a dead one after 15 s."""
    from langchain_core.messages import HumanMessage

    from app.runs.active_runs import ActiveRuns
    from app.runs.turn_runner import TurnSpec
    from graph.assembly import compile_graph
    from storage.fenced_saver import FencedPostgresSaver

    runs = ActiveRuns(compile_graph(FencedPostgresSaver(backend.pool), backend.store), backend.pool)
    closing, go_on = asyncio.Event(), asyncio.Event()
    close_for_real = runs._close_beat_conn

    async def close_slowly() -> None:  # the poller's way out, held open until the next run is launched
        if not runs.runs and not closing.is_set():
            closing.set()
            await go_on.wait()
        await close_for_real()

    runs._close_beat_conn = close_slowly

    async def launch(thread_id: str, text: str, model: str):
        run_id = await runs.claim_run_slot(thread_id, user_id, "message")
        spec = TurnSpec(thread_id, user_id, "assistant", "message", {"messages": [HumanMessage(text, id=str(uuid.uuid4()))]},
                        user_text=text, context={"model": model})
        return run_id, runs.launch(run_id, spec)

    try:
        _, first = await launch(str(uuid.uuid4()), "hello", "offline")
        assert (await first.collect())[-1][0] == "done"
        await asyncio.wait_for(closing.wait(), 10)  # no run left: the poller is on its way out
        thread_id = str(uuid.uuid4())
        run_id, second = await launch(thread_id, SLOW_MESSAGE, "offline-slow:500")
        go_on.set()

        async def saved_by_a_heartbeat() -> bool:  # only heartbeats save a reply as far as it streamed
            async with backend.pool.connection() as conn:
                row = await (await conn.execute("SELECT status, partial_reply FROM memory_agent_runs WHERE run_id = %s", (run_id,))).fetchone()
            assert row["status"] == "running", row  # (the reply takes ~15 s)
            return bool(row["partial_reply"])

        deadline = time.monotonic() + 5
        while not await saved_by_a_heartbeat():
            assert time.monotonic() < deadline, "the run launched while the poller wound down got no heartbeat"
            await asyncio.sleep(0.1)
        runs.stop_local(run_id)
        assert (await second.collect())[-1][0] == "error"  # stopped
    finally:
        await runs.close()
