"""The redactor: what a forget hides, clause by clause, and what it leaves."""

from langchain_core.messages import AIMessage, HumanMessage

from core.redaction import MARK, Redactor, distinctive_stems, term_hashes


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
