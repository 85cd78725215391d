"""LangGraph Server (`langgraph dev` on our langgraph.json) on real Postgres, driven with langgraph_sdk.

One server for the module, on a fresh database, with the offline model. Two users
with API keys from memory/api_keys. Proves: streamed runs through all nodes,
state and history read back from our Postgres saver, forking from an earlier
checkpoint, per-user isolation of threads and store, and that the memory a run
writes belongs to the authenticated caller whatever context the client sends.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import httpx
import psycopg
import pytest
from langgraph_sdk import get_client

from storage.api_keys import create_key, revoke_key
from memory.backend import open_memory
from core.namespaces import facts_ns, profile_ns
from storage.postgres import open_pool
from core.schemas import UserDocument
from graph.assembly import MEMORY_PHASE
from memory.user_memory import get_user_document, list_chats
from tests.support.langgraph_dev_server import running_dev_server

pytestmark = pytest.mark.slow  # a `langgraph dev` server

GRAPH = "memory_agent"
NODES = {"load_context", "retrieve", "reply", *MEMORY_PHASE}  # no tool call in these turns
RUN_TIMEOUT = 120  # seconds; an offline turn takes about one second


@pytest.fixture(scope="module")
def server_db(new_database) -> str:
    return new_database("lgserver")


@pytest.fixture(scope="module")
async def api_keys(server_db) -> dict[str, str]:
    """Two users and their bearer keys, created the way `memory-agent keys create` does."""
    pool = await open_pool(server_db, max_size=2)
    try:
        users = (f"alice{uuid.uuid4().hex[:6]}", f"bob{uuid.uuid4().hex[:6]}")
        return {user: await create_key(pool, user, label="test") for user in users}
    finally:
        await pool.close()


@pytest.fixture(scope="module")
def dev_server(server_db, api_keys, tmp_path_factory):
    with running_dev_server(server_db, tmp_path_factory.mktemp("langgraph-dev"), timeout=240) as server:
        print(f"\nlanggraph dev answered /ok after {server.startup_seconds:.1f}s")
        yield server


@pytest.fixture(scope="module")
async def memory(server_db, minilm, dev_server):
    """The same database seen through our own backend, to check what the server wrote."""
    async with open_memory(server_db, minilm) as backend:
        yield backend


def client_for(server, key: str | None):
    headers = {"Authorization": f"Bearer {key}"} if key else None
    return get_client(url=server.url, headers=headers, timeout=httpx.Timeout(RUN_TIMEOUT, connect=10))


def human(text: str, message_id: str | None = None) -> dict:
    message = {"type": "human", "content": text}
    if message_id:
        message["id"] = message_id
    return message


def texts(state: dict) -> list[str]:
    return [m["content"] for m in state["values"]["messages"]]


async def stream_turn(client, thread_id: str, payload: dict | None, **kwargs) -> tuple[str, set[str]]:
    """Run one turn streaming messages and updates; returns the streamed reply and the nodes that updated."""
    reply_tokens: list[str] = []
    updated: set[str] = set()
    async for part in client.runs.stream(
        thread_id, GRAPH, input=payload, stream_mode=["messages-tuple", "updates"], **kwargs
    ):
        assert part.event != "error", part.data
        if part.event == "messages":
            chunk, meta = part.data
            if meta.get("langgraph_node") == "reply" and chunk.get("content"):
                reply_tokens.append(chunk["content"])
        elif part.event == "updates":
            updated.update(part.data)
    return "".join(reply_tokens), updated


async def test_a_streamed_run_is_checkpointed_in_postgres_and_a_fork_with_an_edited_message_replaces_the_old_branch(
    dev_server, api_keys, server_db
):
    (alice, alice_key), _ = api_keys.items()
    client = client_for(dev_server, alice_key)
    started = time.perf_counter()

    # 1) a thread, owned by the caller
    thread = await client.threads.create()
    thread_id = thread["thread_id"]
    assert thread["metadata"]["owner"] == alice

    # 2) a streamed turn: reply tokens one by one, an update from every node
    reply, updated = await stream_turn(client, thread_id, {"messages": [human("My name is Dana.")]})
    assert reply.startswith("(offline model)")
    assert updated == NODES
    reply2, _ = await stream_turn(client, thread_id, {"messages": [human("I live in Haifa.")]})
    assert reply2.startswith("(offline model)")

    # 3) state and history come back from the saver
    state = await client.threads.get_state(thread_id)
    assert texts(state)[0::2] == ["My name is Dana.", "I live in Haifa."]
    assert texts(state)[-1] == reply2
    old_reply_id = state["values"]["messages"][-1]["id"]
    history = await client.threads.get_history(thread_id, limit=500)
    assert history[0]["checkpoint"]["checkpoint_id"] == state["checkpoint"]["checkpoint_id"]
    assert [h["metadata"]["source"] for h in history].count("input") == 2

    # 4) fork: edit the second message at the checkpoint before its turn ran, and re-run
    before_reply = next(h for h in history if h["next"] == ["load_context"] and texts(h)[-1] == "I live in Haifa.")
    edited_id = before_reply["values"]["messages"][-1]["id"]
    fork = await client.threads.update_state(
        thread_id,
        {"messages": [human("I live in Lisbon.", edited_id)]},  # same id: replaces the message
        checkpoint_id=before_reply["checkpoint"]["checkpoint_id"],
    )
    reply3, updated = await stream_turn(client, thread_id, None)
    assert updated == NODES
    state = await client.threads.get_state(thread_id)
    assert texts(state)[0::2] == ["My name is Dana.", "I live in Lisbon."]
    assert texts(state)[-1] == reply3
    assert "I live in Haifa." not in texts(state)
    assert old_reply_id not in {m["id"] for m in state["values"]["messages"]}  # so is the old branch's reply
    assert state["parent_checkpoint"] is not None
    lineage = {h["checkpoint"]["checkpoint_id"] for h in await client.threads.get_history(thread_id, limit=500)}
    assert fork["checkpoint"]["checkpoint_id"] in lineage
    assert history[0]["checkpoint"]["checkpoint_id"] in lineage  # the old branch is kept, just not current

    # 5) every checkpoint the server reports is a row in our Postgres
    with psycopg.connect(server_db) as conn:
        rows = conn.execute(
            "SELECT checkpoint_id FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = ''", (thread_id,)
        ).fetchall()
    assert {r[0] for r in rows} == lineage
    print(f"\nfour turns, state, history and fork over HTTP in {time.perf_counter() - started:.1f}s")

    # Saver, store and key checks shared one backend: it was opened (and logged) once.
    assert dev_server.log_path.read_text(errors="replace").count("memory-agent: checkpoints and memory in") == 1


async def test_another_users_key_can_neither_read_the_thread_nor_search_the_first_users_memory(dev_server, api_keys):
    (alice, alice_key), (bob, bob_key) = api_keys.items()
    alice_client, bob_client = client_for(dev_server, alice_key), client_for(dev_server, bob_key)
    thread_id = (await alice_client.threads.create())["thread_id"]
    await alice_client.runs.wait(thread_id, GRAPH, input={"messages": [human("I have a dog named Rex.")]})
    assert await alice_client.store.search_items(facts_ns(alice)), "alice's own memory is readable by her"

    for read in (bob_client.threads.get, bob_client.threads.get_state, bob_client.threads.get_history):
        with pytest.raises(httpx.HTTPStatusError) as denied:
            await read(thread_id)
        assert denied.value.response.status_code in (403, 404)
    with pytest.raises(httpx.HTTPStatusError) as denied:
        await bob_client.runs.wait(thread_id, GRAPH, input={"messages": [human("What is my dog called?")]})
    assert denied.value.response.status_code in (403, 404)
    with pytest.raises(httpx.HTTPStatusError) as denied:
        await bob_client.threads.update_state(thread_id, {"messages": [human("I have no dog.")]})
    assert denied.value.response.status_code in (403, 404)
    with pytest.raises(httpx.HTTPStatusError) as denied:
        await bob_client.threads.delete(thread_id)
    assert denied.value.response.status_code in (403, 404)
    assert texts(await alice_client.threads.get_state(thread_id))[0] == "I have a dog named Rex."
    assert thread_id not in {t["thread_id"] for t in await bob_client.threads.search(limit=100)}

    with pytest.raises(httpx.HTTPStatusError) as denied:
        await bob_client.store.search_items(facts_ns(alice))
    assert denied.value.response.status_code == 403
    with pytest.raises(httpx.HTTPStatusError) as denied:
        await bob_client.store.get_item(profile_ns(alice), "profile")
    assert denied.value.response.status_code == 403
    # Listing "everything" is narrowed to bob's own namespaces.
    listed = await bob_client.store.list_namespaces()
    assert all(tuple(ns[:2]) == ("users", bob) for ns in listed["namespaces"])


async def test_a_run_writes_memory_under_the_authenticated_user_whatever_user_id_the_client_puts_in_context(
    dev_server, api_keys, memory
):
    (alice, alice_key), _ = api_keys.items()
    client = client_for(dev_server, alice_key)
    thread_id = (await client.threads.create())["thread_id"]
    reply, _ = await stream_turn(
        client, thread_id, {"messages": [human("My name is Dana and I work as a nurse.")]}, context={"user_id": "someone-else"}
    )
    assert reply.startswith("(offline model)")

    # The older way to pass settings, config.configurable, is overridden the same way.
    await client.runs.wait(
        thread_id, GRAPH, input={"messages": [human("I live in Porto.")]}, config={"configurable": {"user_id": "someone-else"}}
    )

    doc = await get_user_document(memory.store, alice)
    assert (doc.profile.name, doc.profile.role, doc.profile.location) == ("Dana", "nurse", "Porto")
    assert thread_id in {c.thread_id for c in await list_chats(memory.store, alice)}
    assert await memory.store.alist_namespaces(prefix=("users", "someone-else")) == []


async def test_a_stateless_run_teaches_memory_but_leaves_no_chat_record_or_index_rows_for_the_thread_the_server_deletes(
    dev_server, api_keys, memory
):
    """POST /runs/wait without a thread runs on a temporary thread that the server deletes when the run
    ends. Its chat record stayed: every list, chat search and related-chats section offered a chat
    that could not be opened, and the index kept what was said filed under a thread that was gone."""
    (alice, alice_key), _ = api_keys.items()
    client = client_for(dev_server, alice_key)
    chats_before = {c.thread_id for c in await list_chats(memory.store, alice)}
    await client.runs.wait(None, GRAPH, input={"messages": [human("I live in Stavanger and I like Quillwort tea.")]})
    doc = await get_user_document(memory.store, alice)
    assert doc.profile.location == "Stavanger"  # what it taught is memory, as any run's
    assert {c.thread_id for c in await list_chats(memory.store, alice)} == chats_before
    async with memory.pool.connection() as conn:
        rows = await (await conn.execute("SELECT count(*) AS n FROM memory_agent_episodes WHERE content LIKE %s", ("%Quillwort%",))).fetchone()
    assert rows["n"] == 0
    # A stateless run that keeps its thread (on_completion="keep") is a chat like any other.
    kept = await client.runs.create(None, GRAPH, input={"messages": [human("I like Quillwort biscuits too.")]}, on_completion="keep")
    await client.runs.join(kept["thread_id"], kept["run_id"])
    assert kept["thread_id"] in {c.thread_id for c in await list_chats(memory.store, alice)}


async def test_a_wrong_key_is_refused_while_no_key_means_the_studio_user_in_dev_mode(dev_server, api_keys):
    with pytest.raises(httpx.HTTPStatusError) as refused:
        await client_for(dev_server, "ma_00000000_not-a-real-key").threads.search()
    assert refused.value.response.status_code == 401
    with pytest.raises(httpx.HTTPStatusError) as refused:
        await get_client(url=dev_server.url, headers={"Authorization": "Basic abc"}).threads.search()
    assert refused.value.response.status_code == 401

    anonymous = client_for(dev_server, None)
    thread = await anonymous.threads.create()
    assert thread["metadata"]["owner"] == "studio"
    (alice, alice_key), _ = api_keys.items()
    with pytest.raises(httpx.HTTPStatusError) as denied:
        await client_for(dev_server, alice_key).threads.get(thread["thread_id"])
    assert denied.value.response.status_code in (403, 404)


async def test_studio_acts_as_its_own_user_so_a_persona_tried_there_leaves_the_local_users_profile_alone(dev_server, memory):
    # The CLI's and the web page's user, with a profile of their own.
    local_before = UserDocument.model_validate({"profile": {"name": "Lee", "location": "Oslo"}})
    await memory.store.aput(profile_ns("local"), "profile", local_before.model_dump(mode="json"), index=False)
    # Studio reaches `langgraph dev` with the LangSmith auth scheme, which the dev server does not verify.
    studio = get_client(url=dev_server.url, headers={"x-auth-scheme": "langsmith"}, timeout=httpx.Timeout(RUN_TIMEOUT, connect=10))
    thread = await studio.threads.create()
    assert thread["metadata"]["owner"] == "studio"
    assert await studio.threads.get(thread["thread_id"])
    await studio.runs.wait(
        thread["thread_id"], GRAPH, input={"messages": [human("My name is Zorro and I live in Quito.")]},
        context={"user_id": "local"},  # what a client sends does not choose the user
    )

    studio_doc = await get_user_document(memory.store, "studio")
    assert (studio_doc.profile.name, studio_doc.profile.location) == ("Zorro", "Quito")
    assert thread["thread_id"] in {c.thread_id for c in await list_chats(memory.store, "studio")}
    assert await get_user_document(memory.store, "local") == local_before
    assert thread["thread_id"] not in {c.thread_id for c in await list_chats(memory.store, "local")}


async def test_without_a_key_a_run_acts_as_the_user_its_configurable_user_id_names_as_in_the_langgraph_template(dev_server, api_keys, memory):
    dana = f"dana-{uuid.uuid4().hex[:8]}"
    for client in (client_for(dev_server, None), get_client(url=dev_server.url, headers={"x-auth-scheme": "langsmith"})):
        thread = await client.threads.create()  # made as the Studio user, before any user is named
        await client.runs.wait(
            thread["thread_id"], GRAPH, input={"messages": [human("My name is Dana and I live in Haifa.")]},
            config={"configurable": {"user_id": dana}},
        )
        await client.runs.wait(thread["thread_id"], GRAPH, input={"messages": [human("I work as a nurse.")]}, config={"configurable": {"user_id": dana}})
        # The chat is Dana's now, and the caller still reads it back (as Studio shows a thread's state).
        assert "I work as a nurse." in texts(await client.threads.get_state(thread["thread_id"]))
        assert thread["thread_id"] in {c.thread_id for c in await list_chats(memory.store, dana)}
        with pytest.raises(httpx.HTTPStatusError) as taken:  # a run naming nobody is the Studio user's, not Dana's
            await client.runs.wait(thread["thread_id"], GRAPH, input={"messages": [human("Who am I?")]})
        assert taken.value.response.status_code == 409 and "configurable.user_id" in taken.value.response.text

    doc = await get_user_document(memory.store, dana)
    assert (doc.profile.name, doc.profile.location, doc.profile.role) == ("Dana", "Haifa", "nurse")
    assert "Dana" not in (await get_user_document(memory.store, "studio")).model_dump_json()

    # The newer template's way, context.user_id, too.
    noa = f"noa-{uuid.uuid4().hex[:8]}"
    keyless = client_for(dev_server, None)
    await keyless.runs.wait(None, GRAPH, input={"messages": [human("My name is Noa.")]}, context={"user_id": noa})
    assert (await get_user_document(memory.store, noa)).profile.name == "Noa"

    # A user with an API key is acted as only with the key.
    (alice, _), _ = api_keys.items()
    thread = await keyless.threads.create()
    with pytest.raises(httpx.HTTPStatusError) as refused:
        await keyless.runs.wait(thread["thread_id"], GRAPH, input={"messages": [human("I live in Mordor.")]}, config={"configurable": {"user_id": alice}})
    assert refused.value.response.status_code == 403
    assert "Mordor" not in (await get_user_document(memory.store, alice)).model_dump_json()

    # Nor one whose key was revoked (leaked, say): revoking it let any key-less caller act as them.
    carol = f"carol-{uuid.uuid4().hex[:8]}"
    await revoke_key(memory.pool, await create_key(memory.pool, carol))
    with pytest.raises(httpx.HTTPStatusError) as refused:
        await keyless.runs.wait(None, GRAPH, input={"messages": [human("I live in Mordor.")]}, config={"configurable": {"user_id": carol}})
    assert refused.value.response.status_code == 403 and "API key" in refused.value.response.text
    assert "Mordor" not in (await get_user_document(memory.store, carol)).model_dump_json()


@pytest.fixture(scope="module")
def strict_server(server_db, tmp_path_factory):
    with running_dev_server(server_db, tmp_path_factory.mktemp("langgraph-strict"), extra_env={"MEMORY_AGENT_AUTH": "required"}, timeout=240) as server:
        yield server


async def test_with_auth_required_neither_a_missing_key_nor_studio_gets_in_but_a_valid_key_does(strict_server, api_keys):
    with pytest.raises(httpx.HTTPStatusError) as refused:
        await get_client(url=strict_server.url).threads.search()
    assert refused.value.response.status_code == 401
    with pytest.raises(httpx.HTTPStatusError) as refused:
        await get_client(url=strict_server.url, headers={"x-auth-scheme": "langsmith"}).threads.search()
    assert refused.value.response.status_code == 403

    (alice, alice_key), _ = api_keys.items()
    thread = await client_for(strict_server, alice_key).threads.create()
    assert thread["metadata"]["owner"] == alice


async def test_forgetting_a_named_user_also_drops_the_studio_thread_handed_to_them(dev_server, memory):
    from memory.chat_admin import forget_user_everywhere

    eve = f"eve-{uuid.uuid4().hex[:8]}"
    keyless = client_for(dev_server, None)
    thread_id = (await keyless.threads.create())["thread_id"]
    await keyless.runs.wait(thread_id, GRAPH, input={"messages": [human("My vault code is 5521.")]}, config={"configurable": {"user_id": eve}})
    assert "5521" in str((await keyless.threads.get(thread_id))["values"])

    await forget_user_everywhere(memory, eve)
    for _ in range(100):  # the server drops the record (Studio's user's) when Postgres announces the release
        if thread_id not in {t["thread_id"] for t in await keyless.threads.search(limit=100)}:
            break
        await asyncio.sleep(0.1)
    with pytest.raises(httpx.HTTPStatusError) as gone:
        await keyless.threads.get(thread_id)
    assert gone.value.response.status_code == 404


async def test_with_auth_required_the_key_decides_the_user_whatever_configurable_user_id_says(strict_server, api_keys, memory):
    (alice, alice_key), (bob, _) = api_keys.items()
    client = client_for(strict_server, alice_key)
    thread = await client.threads.create()
    await client.runs.wait(
        thread["thread_id"], GRAPH, input={"messages": [human("I live in Lima.")]}, config={"configurable": {"user_id": bob}}
    )
    assert (await get_user_document(memory.store, alice)).profile.location == "Lima"
    assert "Lima" not in (await get_user_document(memory.store, bob)).model_dump_json()


async def test_a_client_cannot_lift_the_servers_message_size_or_tool_limits(dev_server, api_keys, memory):
    (alice, alice_key), _ = api_keys.items()
    client = client_for(dev_server, alice_key)
    thread_id = (await client.threads.create())["thread_id"]
    too_long = "word " * 10_000  # 50,000 characters: over the server's 20,000
    with pytest.raises(httpx.HTTPStatusError) as refused:
        await client.runs.wait(
            thread_id, GRAPH, input={"messages": [human(too_long)]},
            context={"max_message_chars": 1_000_000_000, "max_tool_steps": 1000, "rag_token_budget": 10**9},
        )
    # Refused before the run wrote its input (load_context refused it too, after it was saved among the thread's writes).
    assert refused.value.response.status_code == 413 and "50,000 characters, the limit is 20,000" in refused.value.response.text
    state = await client.threads.get_state(thread_id)
    assert state["values"] == {}  # nothing of the run was written
    async with memory.pool.connection() as conn:
        kept = await (await conn.execute("SELECT count(*) AS n FROM checkpoint_writes WHERE thread_id = %s", (thread_id,))).fetchone()
    assert kept["n"] == 0


async def test_without_keys_only_studio_and_pages_on_this_machine_may_call(dev_server):
    anonymous = dev_server.url + "/threads/search"
    for origin in ("https://evil.example", "http://foreign.test:8000", "null"):
        refused = httpx.post(anonymous, json={}, headers={"Origin": origin}, timeout=30)
        assert refused.status_code == 403, (origin, refused.text)
        assert "access-control-allow-origin" not in refused.headers
    for origin in ("https://smith.langchain.com", "http://localhost:3000", "http://127.0.0.1:8123"):
        assert httpx.post(anonymous, json={}, headers={"Origin": origin}, timeout=30).status_code == 200, origin
    assert httpx.post(anonymous, json={}, timeout=30).status_code == 200  # no browser, no Origin: the CLI and SDK


@pytest.mark.browser
async def test_a_page_of_another_site_cannot_read_or_write_the_local_users_memory_in_chromium(dev_server, memory, tmp_path):
    """As a browser really does it: a page on foreign.test (resolved to this machine) calls the dev server."""
    import http.server
    import threading

    from playwright.async_api import async_playwright

    page_dir = tmp_path / "site"
    page_dir.mkdir()
    (page_dir / "index.html").write_text("<!doctype html><title>foreign</title>")
    handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(*a, directory=str(page_dir), **k)  # noqa: E731
    site = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=site.serve_forever, daemon=True).start()
    port = site.server_address[1]
    script = """async (api) => {
        const out = {};
        try { const r = await fetch(api + "/store/items?namespace=users.local.profile&key=profile"); out.read = r.status; }
        catch (e) { out.read = "blocked"; }
        try {
            const r = await fetch(api + "/store/items", {method: "PUT", headers: {"Content-Type": "application/json"},
                body: JSON.stringify({namespace: ["users", "local", "facts"], key: "planted", value: {id: "planted", text: "Planted by a foreign page"}})});
            out.write = r.status;
        } catch (e) { out.write = "blocked"; }
        try {  // a "simple" request: no preflight; only the server itself can refuse it
            const r = await fetch(api + "/threads", {method: "POST", mode: "no-cors", headers: {"Content-Type": "text/plain"}, body: "{}"});
            out.simple = r.type;
        } catch (e) { out.simple = "blocked"; }
        return out;
    }"""
    try:
        async with async_playwright() as p:
            browser = await p.chromium.launch(
                executable_path="/usr/bin/chromium",
                args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                      "--disable-component-update", "--no-first-run", "--host-resolver-rules=MAP foreign.test 127.0.0.1"],
            )
            page = await browser.new_page()
            threads_before = len(await client_for(dev_server, None).threads.search(limit=1000))
            await page.goto(f"http://foreign.test:{port}/index.html")
            result = await page.evaluate(script, dev_server.url)
            await browser.close()
    finally:
        site.shutdown()
    assert result["read"] == "blocked" and result["write"] == "blocked", result
    assert await memory.store.aget(("users", "local", "facts"), "planted") is None
    assert len(await client_for(dev_server, None).threads.search(limit=1000)) == threads_before


# --------------------------------------------------------------------------- issue 19: holes an outside run found
def port_of(server) -> str:
    return server.url.rsplit(":", 1)[1]


async def test_without_required_auth_only_loopback_host_names_are_served_so_dns_rebinding_reads_and_writes_nothing(dev_server, memory):
    port = port_of(dev_server)
    profile = f"{dev_server.url}/store/items?namespace=users.studio.profile&key=profile"
    # A page of attacker.example, its name rebound to 127.0.0.1: the browser sends the attacker's Host.
    read = httpx.get(profile, headers={"Host": f"attacker.example:{port}"}, timeout=30)
    assert read.status_code == 421, read.text
    turn = httpx.post(
        f"{dev_server.url}/runs/wait",
        json={"assistant_id": GRAPH, "input": {"messages": [human("I live in Rebindville.")]}},
        headers={"Host": f"attacker.example:{port}", "Origin": f"http://attacker.example:{port}", "x-auth-scheme": "langsmith"},
        timeout=RUN_TIMEOUT,
    )
    assert turn.status_code == 421, turn.text
    listed = httpx.post(
        f"{dev_server.url}/threads/search", json={},
        headers={"Host": f"attacker.example:{port}", "Origin": f"http://attacker.example:{port}", "x-auth-scheme": "langsmith"}, timeout=30,
    )
    assert listed.status_code == 421, listed.text
    # Studio's scheme from a foreign page whose Host is loopback: its Origin is refused.
    foreign = httpx.post(f"{dev_server.url}/threads/search", json={}, headers={"Origin": "https://evil.example", "x-auth-scheme": "langsmith"}, timeout=30)
    assert foreign.status_code == 403, foreign.text
    studio_doc = await get_user_document(memory.store, "studio")
    assert "Rebindville" not in studio_doc.model_dump_json()
    # This machine's names, with any port, are served (Studio's own origin too).
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "localhost"):
        assert httpx.get(profile, headers={"Host": host}, timeout=30).status_code in (200, 404), host
    studio = httpx.post(f"{dev_server.url}/threads/search", json={}, headers={"Origin": "https://smith.langchain.com", "x-auth-scheme": "langsmith"}, timeout=30)
    assert studio.status_code == 200, studio.text


async def test_with_auth_required_studios_scheme_on_mcp_is_refused_not_a_500(strict_server):
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"x-auth-scheme": "langsmith", "Accept": "application/json, text/event-stream"}
    response = httpx.post(f"{strict_server.url}/mcp", json=body, headers=headers, timeout=30)
    assert response.status_code in (401, 403), (response.status_code, response.text)
    # Required auth serves any Host name: keys, not the address, decide.
    assert httpx.post(f"{strict_server.url}/threads/search", json={}, headers={"Host": "lan-name:1"}, timeout=30).status_code == 401


async def test_a_run_cannot_step_around_the_message_limit_with_a_command_that_goes_past_load_context(dev_server, api_keys):
    (alice, alice_key), _ = api_keys.items()
    client = client_for(dev_server, alice_key)
    thread_id = (await client.threads.create())["thread_id"]
    huge = "x" * 150_000  # the limit is 20,000
    for command in ({"goto": "retrieve", "update": {"messages": [human(huge)]}}, {"update": {"messages": [human(huge)]}}, {"goto": "reply"}):
        with pytest.raises(httpx.HTTPStatusError) as refused:
            await client.runs.wait(thread_id, GRAPH, command=command)
        assert refused.value.response.status_code == 422, command
        assert "resume" in refused.value.response.text
    state = await client.threads.get_state(thread_id)
    assert huge not in str(state["values"])


async def test_the_server_decides_which_models_a_client_may_pick(dev_server, api_keys):
    (alice, alice_key), _ = api_keys.items()
    client = client_for(dev_server, alice_key)
    thread_id = (await client.threads.create())["thread_id"]
    for model in ("offline-slow:99999999999", "offline-slow:200", "openai:gpt-4.1"):
        with pytest.raises(httpx.HTTPStatusError) as refused:
            await client.runs.wait(thread_id, GRAPH, input={"messages": [human("hello")]}, context={"model": model})
        assert refused.value.response.status_code == 403, model
        assert "not offered by this server" in refused.value.response.text and "offline" in refused.value.response.text
        with pytest.raises(httpx.HTTPStatusError) as refused:
            await client.assistants.create(GRAPH, context={"model": model})
        assert refused.value.response.status_code == 403, model
    done = await client.runs.wait(thread_id, GRAPH, input={"messages": [human("hello")]}, context={"model": "offline"})
    assert done["messages"][-1]["content"].startswith("(offline model)")


async def test_forget_me_on_serve_also_removes_the_running_langgraph_servers_thread_records(dev_server, server_db):
    from tests.support.http_server import running_server

    user = f"carol{uuid.uuid4().hex[:6]}"
    pool = await open_pool(server_db, max_size=2)
    try:
        key = await create_key(pool, user, label="test")
        studio = client_for(dev_server, key)
        thread_id = (await studio.threads.create())["thread_id"]
        await studio.runs.wait(thread_id, GRAPH, input={"messages": [human("My vault code is 4417.")]})
        assert "4417" in str((await studio.threads.get(thread_id))["values"])

        with running_server(server_db, workers=1) as serve, serve.client(key) as api:
            assert api.delete("/me").status_code == 200

        again = client_for(dev_server, await create_key(pool, user, label="test again"))
        for _ in range(100):  # the server drops its records when Postgres announces the release
            listed = await again.threads.search(limit=100)
            if not listed:
                break
            await asyncio.sleep(0.1)
        assert listed == [], [t["values"] for t in listed]
        with pytest.raises(httpx.HTTPStatusError) as gone:
            await again.threads.get(thread_id)
        assert gone.value.response.status_code == 404
    finally:
        await pool.close()
