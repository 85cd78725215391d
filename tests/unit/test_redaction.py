"""The redactor: what a forget hides, clause by clause, and what it leaves."""

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from core.redaction import MARK, Redactor, deleted_hashes, deleted_stems, distinctive_stems, term_hashes


def redactor(*forgotten: str, owner: str = "u") -> Redactor:
    return Redactor(owner, frozenset(term_hashes(owner, forgotten)))


def test_a_forgotten_item_hides_its_distinctive_words_not_its_kind():
    assert distinctive_stems("Works as a nurse") == {"nurs"}
    assert distinctive_stems("Has a parrot named Biscuit") == {"parrot", "biscuit"}
    assert distinctive_stems("forget that I work as a nurse") == {"nurs"}


def test_only_the_clause_that_carries_a_forgotten_word_goes():
    r = redactor("Works as a nurse")
    assert r.text("My name is Rosa, I live in Coimbra and I work as a nurse. I like tea.") == (
        f"My name is Rosa, I live in Coimbra {MARK}. I like tea."
    )
    assert r.text("Nursing shifts are long") == MARK  # the stem, not the spelling
    assert r.text("I like tea") == "I like tea"


def test_hashes_are_salted_with_the_owner():
    assert not Redactor("other", redactor("nurse").hashes).carries("nurse")


def test_messages_tool_calls_and_json_values_are_redacted_but_the_kept_message():
    r = redactor("nurse")
    call = AIMessage("", tool_calls=[{"name": "forget_memory", "args": {"what": "that I am a nurse"}, "id": "c1"}])
    asked = HumanMessage("forget that I am a nurse", id="now")
    out = r.messages_of([HumanMessage("I am a nurse", id="old"), call, asked], keep="now")
    assert out[0].content == MARK and "nurse" not in str(out[1].tool_calls) and out[2] is asked
    loaded = {"facts": [{"id": "1", "text": "Works as a nurse"}, {"id": "2", "text": "Lives in Coimbra"}], "profile": {"role": "nurse"}}
    assert r.value(loaded) == {"facts": [{"id": "2", "text": "Lives in Coimbra"}], "profile": {"role": MARK}}


def test_a_hidden_message_is_hidden_whole_in_its_chat_only():
    r = Redactor("u", frozenset(), frozenset({("t1", "m1")}))
    assert r.said("t1", "m1", "anything at all") == MARK
    assert r.said("t2", "m1", "anything at all") == "anything at all"


def test_a_dated_task_forgets_its_words_not_its_date_and_times_are_never_redacted():
    """A task's text carries its date ("… on Fri 27 Nov 2026"): forgetting it once hid every 2026 in
    the prompt and broke the excerpts' times (found by the forget cases after the dates change)."""
    assert distinctive_stems("Call the dentist on Fri 27 Nov 2026") == {"dentist"}
    r = redactor("Call the dentist on Fri 27 Nov 2026")
    line = {"text": "see you in 2026", "sent_at": "2026-11-26T12:56:48+00:00"}
    assert r.value(line) == line


def test_a_deleted_messages_words_are_hidden_in_what_the_agent_said_not_in_the_users_own_messages():
    """Deleting "My passport number is K4477123" hides its words in every reply that quoted it (and in
    tool results, and the assistant's lines of an excerpt), not in the user's other messages."""
    assert deleted_stems("My passport number is K4477123 and it expires soon") >= {"passport", "k4477123"}
    assert deleted_stems("Yes!") == set()  # a deletion's everyday words are not the thing
    r = Redactor("u", reply_hashes=frozenset(deleted_hashes("u", "I love pizza")))
    assert r and not r.carries("pizza on Friday?") and r.carries("pizza on Friday?", reply=True)
    assert r.said("t", "m", "You love pizza. See you Friday.", reply=True) == f"{MARK}. See you Friday."
    asked, quoted = HumanMessage("pizza on Friday?", id="a"), AIMessage("You said you love pizza", id="b")
    out = r.messages_of([asked, quoted, ToolMessage("found: I love pizza", tool_call_id="c")])
    assert out[0] is asked and out[1].content == MARK and out[2].content == f"found {MARK}"
    excerpt = {"thread_id": "t", "lines": [{"message_id": "a", "role": "user", "text": "pizza on Friday?"},
                                           {"message_id": "b", "role": "assistant", "text": "You love pizza"}]}
    assert r.value({"excerpts": [excerpt]}) == {"excerpts": [{**excerpt, "lines": excerpt["lines"][:1]}]}
    mine = {"facts": [{"id": "1", "text": "Plans pizza on Friday"}], "profile": {"role": "pizza chef"}}  # a profile's role is a job
    assert r.value(mine) == mine
    both = Redactor("u", frozenset(term_hashes("u", ["nurse"])), reply_hashes=r.reply_hashes)
    assert both.text("I am a nurse, I love pizza") == f"I love pizza {MARK}" and both.text("I am a nurse, I love pizza", reply=True) == MARK
