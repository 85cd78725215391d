"""Stop keeps the partial reply, regenerate, rename: the chat controls of the API, on a live
server (`memory-agent serve`, 2 workers) and the embedded Postgres.

The rule under test for a stopped turn: the user's message and the reply as far as it
streamed stay in the chat, the reply marked ``stopped``; memory (profile, preferences,
facts, tasks) learns nothing from it; regenerating the reply makes a complete turn,
which memory learns from.
"""

from __future__ import annotations

import pytest

from tests.support.http_server import MARKDOWN_REPLY, BackgroundStream, HttpError, final, live_server_fixture, new_account, new_chat, reply_text, say, stream

pytestmark = pytest.mark.slow  # a `memory-agent serve` subprocess with workers


server = live_server_fixture("controls")


@pytest.fixture
async def key(server):
    return (await new_account(server))[1]


@pytest.fixture
def client(server, key):
    with server.client(key) as c:
        yield c


def messages_of(client, chat_id: str) -> list[dict]:
    return client.get(f"/chats/{chat_id}").json()["messages"]


def stop_mid_stream(server, key: str, chat_id: str, text: str, method: str = "POST", path: str | None = None) -> list:
    running = BackgroundStream(server, key, method, path or f"/chats/{chat_id}/messages", {"text": text} if text else {})
    running.wait_for_tokens()
    with server.client(key) as c:
        stopped = c.post(f"/chats/{chat_id}/stop").json()
    assert stopped["stopped"] is True and stopped["status"] == "stopped", stopped
    assert "kept" in stopped["message"]
    return running.join()


# --------------------------------------------------------------------------- stop
def test_stop_keeps_the_message_and_the_partial_reply_marked_stopped_and_memory_learns_nothing(server, key, client):
    chat_id = new_chat(client)
    say(client, chat_id, "My name is Dana")
    text = "[slow] [markdown] I live in Rome and I have a cat named Tom"  # a long reply (~15 s), stopped mid-stream
    events = stop_mid_stream(server, key, chat_id, text)

    streamed = reply_text(events)
    end = final(events)
    assert end.name == "error" and end.data["code"] == "stopped"
    assert end.data["reply"] == streamed and streamed and MARKDOWN_REPLY.startswith(streamed)
    assert "text" not in end.data  # nothing to give back: the message stays in the chat
    assert not any(e.name in ("done", "memory") for e in events)

    detail = client.get(f"/chats/{chat_id}").json()
    assert detail["running"] is False
    user_msg, reply = detail["messages"][-2:]
    assert (user_msg["role"], user_msg["content"], user_msg["id"]) == ("user", text, end.data["user_message_id"])
    assert (reply["role"], reply["content"], reply["id"]) == ("assistant", streamed, end.data["message_id"])
    assert reply["stopped"] is True and user_msg["stopped"] is False
    assert not any(m["stopped"] for m in detail["messages"][:-1])
    assert client.get("/chats").json()["chats"][0]["message_count"] == 4  # the chat's record counts the kept turn

    # Memory learned nothing from the stopped turn: no location, no cat.
    assert client.get("/memory/profile").json()["location"] is None
    assert [f["text"] for f in client.get("/memory/facts").json()["facts"]] == []

    # The chat goes on at once, and the model's next turn is a normal one that memory learns from.
    done = final(say(client, chat_id, "I live in Paris"))
    assert done.name == "done"
    assert client.get("/memory/profile").json()["location"] == "Paris"
    assert not any("Tom" in f["text"] for f in client.get("/memory/facts").json()["facts"])  # still no cat


def test_a_stopped_first_message_titles_the_chat_stays_and_can_be_regenerated_or_edited(server, key, client):
    chat_id = new_chat(client)
    events = stop_mid_stream(server, key, chat_id, "[slow] Plan a week of dinners for two people")
    chat = client.get(f"/chats/{chat_id}").json()
    assert [m["role"] for m in chat["messages"]] == ["user", "assistant"]
    assert chat["chat"]["title"] not in ("", "New chat")  # titled from its first exchange, stopped or not

    # The chat's first turn has a "before" to fork from: regenerate, then edit it.
    done = final(stream(client, "POST", f"/chats/{chat_id}/messages/{final(events).data['message_id']}/regenerate", {}))
    assert done.name == "done"
    messages = messages_of(client, chat_id)
    assert [(m["role"], m["stopped"]) for m in messages] == [("user", False), ("assistant", False)]
    assert final(stream(client, "PUT", f"/chats/{chat_id}/messages/{messages[0]['id']}", {"text": "I live in Haifa"})).name == "done"
    assert [m["content"] for m in messages_of(client, chat_id)][:1] == ["I live in Haifa"]
    assert len(messages_of(client, chat_id)) == 2


def test_stopping_an_edit_keeps_the_edited_branch(server, key, client):
    chat_id = new_chat(client)
    say(client, chat_id, "My name is Dana")
    say(client, chat_id, "I live in Rome")
    rome = messages_of(client, chat_id)[2]
    edit = "[slow] [markdown] I live in Haifa"  # a long reply, stopped mid-stream
    events = stop_mid_stream(server, key, chat_id, edit, method="PUT", path=f"/chats/{chat_id}/messages/{rome['id']}")
    messages = messages_of(client, chat_id)
    assert [m["content"] for m in messages[:3]] == ["My name is Dana", messages[1]["content"], edit]
    assert len(messages) == 4 and messages[3]["stopped"] is True and messages[3]["content"] == reply_text(events)
    assert client.get("/memory/profile").json()["location"] == "Rome"  # learned before; the stopped edit taught nothing


# --------------------------------------------------------------------------- regenerate
def test_regenerating_a_stopped_reply_completes_the_turn_and_memory_learns_from_it(server, key, client):
    chat_id = new_chat(client)
    say(client, chat_id, "My name is Dana")
    events = stop_mid_stream(server, key, chat_id, "[slow] [markdown] I have a cat named Tom")  # unlike the last reply: not held
    stopped_id, question_id = final(events).data["message_id"], final(events).data["user_message_id"]
    before = messages_of(client, chat_id)

    done = final(stream(client, "POST", f"/chats/{chat_id}/messages/{stopped_id}/regenerate", {}))
    assert done.name == "done"
    after = messages_of(client, chat_id)
    assert [m["id"] for m in after[:3]] == [m["id"] for m in before[:3]]  # the same question (same id) …
    assert after[2]["id"] == question_id == done.data["user_message_id"]
    assert after[3]["id"] == done.data["message_id"] != stopped_id  # … with a new, complete reply
    assert after[3]["stopped"] is False and len(after) == 4
    assert [f["text"] for f in client.get("/memory/facts").json()["facts"]] == ["Has a cat named Tom"]


def test_stopping_an_approved_confirmation_takes_its_task_back_and_a_decline_then_adds_none(server, key, client):
    """The stopped /resume is taken back whole: the task its tool already added goes with it."""
    chat_id = new_chat(client)
    garage = lambda: [t for t in client.get("/memory/tasks").json()["tasks"] if "garage" in t["description"].lower()]  # noqa: E731
    asked = stream(client, "POST", f"/chats/{chat_id}/messages", {"text": "[task] [slow] repaint the garage door with blue paint"})
    assert final(asked).name == "interrupt" and garage() == []

    resumed = BackgroundStream(server, key, "POST", f"/chats/{chat_id}/resume", {"approved": True})
    resumed.wait_for_tokens()  # the reply after the tool's result: the task is written by now
    stopped = client.post(f"/chats/{chat_id}/stop").json()
    assert stopped["stopped"] is True and "as it was before" in stopped["message"], stopped
    assert final(resumed.join()).data["code"] == "stopped"
    assert len(client.get(f"/chats/{chat_id}").json()["pending_interrupts"]) == 1  # asked again
    assert garage() == []  # and memory is as it was before too

    assert final(stream(client, "POST", f"/chats/{chat_id}/resume", {"approved": False})).name == "done"
    assert garage() == []


def test_regenerating_an_earlier_reply_drops_the_later_messages(client):
    chat_id = new_chat(client)
    say(client, chat_id, "My name is Dana")
    say(client, chat_id, "I live in Rome")
    first_reply = messages_of(client, chat_id)[1]
    done = final(stream(client, "POST", f"/chats/{chat_id}/messages/{first_reply['id']}/regenerate", {}))
    assert done.name == "done"
    messages = messages_of(client, chat_id)
    assert [m["content"] for m in messages][:1] == ["My name is Dana"] and len(messages) == 2
    assert messages[1]["id"] == done.data["message_id"] != first_reply["id"]


def test_regenerating_a_reply_whose_checkpoint_a_deletion_pruned_says_it_cannot_be_regenerated(client):
    """It said "it cannot be edited" to a regenerate: the deletion of a later message prunes the history."""
    chat_id = new_chat(client)
    say(client, chat_id, "My name is Dana")
    say(client, chat_id, "I live in Rome")
    first_reply, later = messages_of(client, chat_id)[1], messages_of(client, chat_id)[2]
    assert client.delete(f"/chats/{chat_id}/messages/{later['id']}").status_code == 200
    with pytest.raises(HttpError) as refused:
        stream(client, "POST", f"/chats/{chat_id}/messages/{first_reply['id']}/regenerate", {})
    assert refused.value.status == 409 and refused.value.body["error"]["code"] == "history_unavailable"
    assert refused.value.body["error"]["message"].endswith("no point to regenerate this reply from.")


def test_regenerate_refuses_what_is_not_an_assistant_reply(client):
    chat_id = new_chat(client)
    say(client, chat_id, "My name is Dana")
    question = messages_of(client, chat_id)[0]
    for message_id, expected in ((question["id"], 422), ("no-such-message", 404)):
        with pytest.raises(HttpError) as refused:
            stream(client, "POST", f"/chats/{chat_id}/messages/{message_id}/regenerate", {})
        assert refused.value.status == expected
        assert refused.value.body["error"]["message"]
    assert client.get(f"/chats/{chat_id}").json()["running"] is False  # the claim was released


def test_regenerate_while_a_reply_runs_is_409(server, key, client):
    chat_id = new_chat(client)
    say(client, chat_id, "My name is Dana")
    reply_id = messages_of(client, chat_id)[1]["id"]
    # (A long reply, stopped below: a short one may end before the regenerate is refused.)
    running = BackgroundStream(server, key, "POST", f"/chats/{chat_id}/messages", {"text": "[slow] [markdown] a long story please"})
    running.wait_for_tokens()
    with pytest.raises(HttpError) as busy:
        stream(client, "POST", f"/chats/{chat_id}/messages/{reply_id}/regenerate", {})
    assert busy.value.status == 409 and busy.value.body["error"]["code"] == "reply_in_progress"
    client.post(f"/chats/{chat_id}/stop")
    running.join()


# --------------------------------------------------------------------------- rename
def test_a_renamed_chat_keeps_its_title_when_the_summary_would_retitle_it(client):
    chat_id = new_chat(client)
    say(client, chat_id, "My name is Dana")
    renamed = client.patch(f"/chats/{chat_id}", json={"title": "  Dana's notes  "})
    assert renamed.status_code == 200
    assert (renamed.json()["title"], renamed.json()["title_set_by_user"]) == ("Dana's notes", True)
    # Enough turns for summary folds (window 30): the model would title the chat from its summary.
    for i in range(16):
        say(client, chat_id, f"I am planning a trip to Japan, day {i}: Tokyo, Kyoto and Osaka")
    detail = client.get(f"/chats/{chat_id}").json()
    assert detail["model_view"]["summary_folds"] >= 1
    assert detail["chat"]["title"] == "Dana's notes"
    assert client.get("/chats").json()["chats"][0]["title"] == "Dana's notes"

    # null hands titling back: the next summary titles the chat again.
    back = client.patch(f"/chats/{chat_id}", json={"title": None}).json()
    assert back["title"] == "Dana's notes" and back["title_set_by_user"] is False
    for i in range(16):
        say(client, chat_id, f"Now about my garden, week {i}: tomatoes, basil and peppers")
    assert client.get(f"/chats/{chat_id}").json()["chat"]["title"] != "Dana's notes"


def test_a_title_given_at_creation_is_the_users_title(client):
    chat = client.post("/chats", json={"title": "Taxes 2025", "messages": ["My name is Dana"]}).json()["chat"]
    assert (chat["title"], chat["title_set_by_user"]) == ("Taxes 2025", True)
    untitled = client.post("/chats", json={"messages": ["My name is Dana"]}).json()["chat"]
    assert untitled["title_set_by_user"] is False and untitled["title"] not in ("", "New chat")  # the agent's title


def test_bad_renames_are_refused_clearly(server, client):
    chat_id = new_chat(client)
    for body in ({"title": "   "}, {"title": "x" * 201}, {}, {"title": "ok", "colour": "blue"}):
        response = client.patch(f"/chats/{chat_id}", json=body)
        assert response.status_code == 422, body
        assert response.json()["error"]["code"] == "invalid_request"
    assert client.patch("/chats/00000000-0000-0000-0000-000000000000", json={"title": "x"}).status_code == 404
    with server.client() as anonymous:
        assert anonymous.patch(f"/chats/{chat_id}", json={"title": "x"}).status_code == 401
    assert client.get(f"/chats/{chat_id}").json()["chat"]["title"] == "New chat"


# --------------------------------------------------------------------------- running
def test_a_dead_workers_run_does_not_show_as_running_once_a_new_message_would_be_taken(server, key, client):
    import psycopg

    from storage.chat_runs import STALE_AFTER_SECONDS

    chat_id = new_chat(client)
    say(client, chat_id, "My name is Dana")
    user = client.get("/me").json()["user_id"]
    insert = (
        "INSERT INTO memory_agent_runs (run_id, thread_id, user_id, kind, status, worker, heartbeat_at) "
        "VALUES (gen_random_uuid(), %s, %s, 'message', 'running', 'elsewhere:1', now() - make_interval(secs => %s))"
    )
    with psycopg.connect(server.database_url, autocommit=True) as conn:
        conn.execute(insert, (chat_id, user, 1))  # its worker answers
        assert client.get(f"/chats/{chat_id}").json()["running"] is True
        conn.execute("UPDATE memory_agent_runs SET heartbeat_at = now() - make_interval(secs => %s) WHERE thread_id = %s AND status = 'running'",
                     (STALE_AFTER_SECONDS + 1, chat_id))  # its worker died
    assert client.get(f"/chats/{chat_id}").json()["running"] is False
    assert final(say(client, chat_id, "I live in Paris")).name == "done"  # and indeed a message is taken
