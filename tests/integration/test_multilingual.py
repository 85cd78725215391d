"""Hebrew and Italian survive every hop: the HTTP client, extraction, Postgres, search, the summary and the next prompt."""

from __future__ import annotations

import unicodedata
import uuid

import pytest
from langchain_core.messages import HumanMessage

import prompts
from prompts.reply_prompt import user_words
from graph.assembly import compile_graph
from core.context import Context
from core.schemas import SummaryBoard
from memory.user_memory import get_chat, get_user_document, list_facts, search_chat_summaries, search_facts
from tests.support.graph_turns import chat_on, new_thread, stream_turn
from tests.support.openai_stub_server import StubRequest, openai_stub, openai_stub_server, stream_pieces, structured_answer  # noqa: F401
from tests.support.scripted_model import empty_extraction, registered_scripted_model

HEBREW_MESSAGE = "שלום! אני גר בחיפה, ויש לי כלב בשם רקס. אני אוהב את המילה שָׁלוֹם."
HEBREW_FACTS = ["גר בחיפה", "יש לו כלב בשם רקס"]
HEBREW_REPLY = "נעים מאוד! חיפה עיר יפה, ורקס נשמע כלב נהדר."
WITH_NIQQUD = "אוהב את המילה שָׁלוֹם"  # combining marks: must come back byte for byte

ITALIAN_MESSAGE = "Vivo a Roma, lavoro come infermiera e il mio cane si chiama Rex. Adoro il caffè."
ITALIAN_FACTS = ["Vive a Roma", "Lavora come infermiera", "Ha un cane di nome Rex", "È appassionata di caffè"]


def user_message_of(messages) -> str:
    return prompts.between(str(messages[-1].content), prompts.USER_MESSAGE_TAG)


@pytest.mark.slow
async def test_hebrew_round_trips_through_the_openai_client_extraction_store_and_next_prompt(backend, user_id, openai_stub):
    seen_user_messages: list[str] = []

    def answer(request: StubRequest):
        if request.kind == "extract":
            said = request.tagged(prompts.USER_MESSAGE_TAG)
            seen_user_messages.append(said)
            if said == HEBREW_MESSAGE:
                value = {**empty_extraction(), "new_facts": [{"text": t, "importance": "high"} for t in [*HEBREW_FACTS, WITH_NIQQUD]],
                         "profile_updates": {"location": "חיפה"}}
                return structured_answer(request, value)
            return structured_answer(request, empty_extraction())
        if request.kind == "reply":
            return HEBREW_REPLY
        return structured_answer(request, {"title": "היכרות"})

    openai_stub.reset(answer)
    graph = compile_graph(backend.checkpointer, backend.store)
    ctx = Context(user_id=user_id, model=f"openai:stub-{uuid.uuid4().hex[:8]}")
    config = new_thread()
    turn = await stream_turn(graph, HEBREW_MESSAGE, config, ctx)

    # Over HTTP and back: the user's text reached the model intact, the streamed reply is exact.
    assert user_words(openai_stub.requests_of("reply")[0].messages[-1]["content"]) == HEBREW_MESSAGE
    assert seen_user_messages == [HEBREW_MESSAGE]
    assert turn.tokens == stream_pieces(HEBREW_REPLY) and turn.streamed_reply == HEBREW_REPLY

    # Stored exactly (no normalization of the stored text, niqqud included).
    stored = {f.text for f in await list_facts(backend.store, user_id)}
    assert stored == {*HEBREW_FACTS, WITH_NIQQUD}
    niqqud = next(t for t in stored if "ש" in t and "ָ" in t)
    assert niqqud.encode("utf-8") == WITH_NIQQUD.encode("utf-8")
    assert (await get_user_document(backend.store, user_id)).profile.location == "חיפה"

    # Searchable in Hebrew: a question about where I live finds the Haifa fact first.
    (best, score), *_ = await search_facts(backend.store, user_id, "איפה אני גר? בחיפה", limit=3)
    assert best.text == "גר בחיפה" and score > 0.6

    # The next turn's prompt carries the Hebrew facts and profile as written.
    await stream_turn(graph, "מה אתה יודע עליי?", config, ctx)
    request = openai_stub.requests_of("reply")[-1].messages
    prompt = f'{request[0]["content"]}\n{request[-1]["content"]}'  # the system message and what the message brought
    for text in (*HEBREW_FACTS, "location: חיפה"):
        assert text in prompt


@pytest.fixture
def italian_model():
    def responder(kind, messages):
        if kind == "extract":
            if user_message_of(messages) == ITALIAN_MESSAGE:
                return {**empty_extraction(), "new_facts": [{"text": t} for t in ITALIAN_FACTS], "profile_updates": {"location": "Roma", "role": "infermiera"}}
            if user_message_of(messages).startswith("Ripeto"):
                # The same fact in decomposed Unicode (e + combining grave): still the same fact.
                return {**empty_extraction(), "new_facts": [{"text": unicodedata.normalize("NFD", ITALIAN_FACTS[3])}]}
            return empty_extraction()
        if kind == "fold":
            new = prompts.between(str(messages[-1].content), prompts.NEW_MESSAGES_TAG)
            return SummaryBoard(summary="L'utente vive a Roma e ama il caffè.", key_facts=["Vive a Roma"], entities=["Roma", "Rex"],
                                topics=["presentazioni"], pending_questions=[new.splitlines()[0][:60]]).model_dump()
        if kind == "title":
            return {"title": "Presentazioni a Roma"}
        return "Piacere di conoscerti!"

    with registered_scripted_model(responder) as scripted:
        yield scripted


@pytest.mark.slow
async def test_italian_round_trips_through_extraction_store_summary_and_next_prompt(backend, user_id, italian_model):
    name, model = italian_model
    graph, ctx, config = chat_on(backend, user_id, name, summary_window=4, tail_size=2)
    await graph.ainvoke({"messages": [HumanMessage(ITALIAN_MESSAGE)]}, config, context=ctx)

    stored = await list_facts(backend.store, user_id)
    assert [f.text for f in stored] == ITALIAN_FACTS  # accents kept, order of extraction kept
    doc = await get_user_document(backend.store, user_id)
    assert (doc.profile.location, doc.profile.role) == ("Roma", "infermiera")

    # Searchable in Italian.
    (best, _), *_ = await search_facts(backend.store, user_id, "il cane Rex", limit=2)
    assert best.text == "Ha un cane di nome Rex"

    # The same fact in another Unicode normalization is a duplicate, not a second fact.
    await graph.ainvoke({"messages": [HumanMessage("Ripeto: adoro il caffè.")]}, config, context=ctx)
    coffee = [f for f in await list_facts(backend.store, user_id) if "caff" in f.text]
    assert len(coffee) == 1 and coffee[0].text == ITALIAN_FACTS[3] and coffee[0].mentions == 2

    # Third turn: a fold runs (window 4) on the Italian transcript; the board and the next prompt are in Italian.
    await graph.ainvoke({"messages": [HumanMessage("Che tempo fa a Roma oggi?")]}, config, context=ctx)
    (fold,) = model.calls_of("fold")
    assert ITALIAN_MESSAGE in prompts.between(str(fold[-1].content), prompts.NEW_MESSAGES_TAG)
    await graph.ainvoke({"messages": [HumanMessage("E domani?")]}, config, context=ctx)
    prompt = "\n".join(m.text for m in model.calls_of("reply")[-1])
    assert "L'utente vive a Roma e ama il caffè." in prompt
    assert "- È appassionata di caffè" in prompt and "- Vive a Roma" in prompt

    # The chat is found by an Italian query on its summary.
    chat = await get_chat(backend.store, user_id, config["configurable"]["thread_id"])
    assert chat.title == "Presentazioni a Roma" and "caffè" in chat.summary_text
    hits = await search_chat_summaries(backend.store, user_id, "Roma caffè", limit=3)
    assert hits and hits[0][0].thread_id == config["configurable"]["thread_id"]
