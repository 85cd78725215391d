"""A reply is a reply: markup stripped (stored and streamed), echoes and repeats detected, asked
again once with a nudge and then replaced by a note, with a scripted model that echoes."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from core.messages import no_answer_note, without_unanswered
from llm.reply_checks import NUDGES, Said, echo_kind, echo_targets, no_answer_text, strip_markup, unwrap_json_reply, without_markup
from llm.text_tool_calls import CallTextFilter, answer_again
from prompts.reply_prompt import build_prompt
from tests.support.scripted_model import ScriptedChatModel

DANA = "Hi! My name is Dana, I live in Haifa and I work as a nurse."


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("</tool_response>\n" + DANA, DANA),  # what the 0.5B sent first
        ("<|im_start|>assistant\nHello Dana!", "Hello Dana!"),
        ("Hello Dana!<|im_end|>\n<|im_start|>user\nWhat do you know?", "Hello Dana!"),
        ("Noted.<|endoftext|>", "Noted."),
        ("<tool_response>\n{\"facts\": []}\n</tool_response>\nNothing stored yet.", "Nothing stored yet."),
        ("Done.</tool_call>", "Done."),
        ("Use a < b and <b>bold</b> as you like.", "Use a < b and <b>bold</b> as you like."),
    ],
)
def test_template_and_tool_markup_is_taken_out_of_a_reply(raw, clean):
    assert without_markup(AIMessage(raw)).text == clean


def streamed(text: str, size: int) -> str:
    f = CallTextFilter()
    return "".join(f.feed("m1", text[i : i + size]) for i in range(0, len(text), size)) + f.finish()


@pytest.mark.parametrize("size", [1, 2, 3, 5, 1000])
@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("</tool_response>\nHello Dana!", "Hello Dana!"),
        ("<|im_start|>assistant\nHello Dana!<|im_end|>\n<|im_start|>user\nmore", "Hello Dana!"),
        ("Noted. <tool_response>{\"x\": 1}</tool_response> Anything else?", "Noted.  Anything else?"),
        ("Use a < b and <b>bold</b>.", "Use a < b and <b>bold</b>."),
        ("Ends with a <", "Ends with a <"),
    ],
)
def test_markup_never_reaches_the_token_stream_whatever_the_chunking(raw, shown, size):
    assert streamed(raw, size) == shown
    assert "<|" not in streamed(raw, size) and "tool_response" not in streamed(raw, size)


def test_the_stream_and_the_stored_reply_agree_on_what_markup_leaves():
    raw = "</tool_response>\nHello Dana!<|im_end|>junk"
    assert streamed(raw, 3) == without_markup(AIMessage(raw)).text == strip_markup(raw)[0].strip()


@pytest.mark.parametrize(
    ("reply", "user", "previous", "previous_user", "kind"),
    [
        (DANA, DANA, "", "", "echo"),
        ("hi my name is dana, i live in haifa and i work as a nurse", DANA, "", "", "echo"),
        ("Hi! My name is Dana, I live in Haifa and I work as a nurse!!", DANA, "", "", "echo"),
        (DANA, "I prefer short answers.", DANA, DANA, "echo"),  # Dana's turn 2 on the 0.5B: her first line
        ("Hello Dana, I can help with reminders, notes and questions about your day.", "I prefer short answers.", "Hello Dana, I can help with reminders, notes and questions about your day.", DANA, "repeat"),
        ("Hello Dana! Nice to meet you, a nurse in Haifa.", DANA, "", "", None),
        ("You're welcome!", "Thanks!", "You're welcome!", "Thank you!", None),  # too short to mean much
        ("Got it!", "And the roses?", "Got it!", "The tomatoes?", None),  # a bare acknowledgement
        ("I'm sorry, but I can't assist with that.", "What do you know about me?", "I'm sorry, but I can't assist with that.", "Remind me.", "repeat"),
        # The 0.5B, greedy: the same greeting to another message, and its own previous reply cut short.
        ("Hello Dana! How can I assist you today?", "I prefer short answers.", "Hello Dana! How can I assist you today?", DANA, "repeat"),
        ("Hi Dana! I live in Haifa and work as", "I prefer short answers.", "Hi Dana! I live in Haifa and work as a nurse.", DANA, "repeat"),
        ("Your passport task is due in December.", "When is it due?", "Your passport task is due in December.", "When is it due?", None),
        ("", DANA, "", "", None),
    ],
)
def test_what_counts_as_an_echo_or_a_repeat(reply, user, previous, previous_user, kind):
    earlier = (previous_user,) if previous_user else ()
    assert echo_kind(reply, Said(user, earlier, previous, previous_user)) == kind


def prompt_after(history: list, words: str) -> list:
    return build_prompt(persona_text="You help.", loaded_context={"profile": {"name": "Dana"}}, summary_text="", knowledge=[], recent=history, current=HumanMessage(words)).messages


def test_the_targets_are_the_users_own_words_not_the_memory_sections_and_the_previous_reply():
    messages = prompt_after([HumanMessage(DANA), AIMessage(DANA)], "I prefer short answers.")
    assert echo_targets(messages) == Said("I prefer short answers.", (DANA,), DANA, DANA)


def echoing_model(*answers: str) -> ScriptedChatModel:
    """A scripted model that answers in turn with ``answers`` (the last one again after that)."""
    said = list(answers)
    return ScriptedChatModel(responder=lambda kind, messages: said.pop(0) if len(said) > 1 else said[0])


async def test_an_echo_is_asked_again_once_with_a_nudge_and_a_real_answer_is_kept():
    model = echoing_model("Hello Dana, nice to meet you.")
    messages = prompt_after([], DANA)
    answer = await answer_again(model, messages, AIMessage(DANA), "echo")
    assert answer.text == "Hello Dana, nice to meet you."
    (_, asked), = model.calls
    assert isinstance(asked[0], SystemMessage) and NUDGES["echo"] in asked[0].text


@pytest.mark.parametrize("kind", ["echo", "repeat"])
async def test_a_second_echo_or_repeat_becomes_a_clear_note(kind):
    previous = "Hello Dana, I can help with reminders, notes and questions about your day."
    history = [HumanMessage(DANA), AIMessage(previous)]
    words = DANA if kind == "echo" else "I prefer short answers."
    model = echoing_model(DANA if kind == "echo" else previous)
    answer = await answer_again(model, prompt_after(history, words), AIMessage(DANA), kind)
    assert answer.text == no_answer_text(kind, words) and len(model.calls) == 1
    assert answer.text.startswith("(No answer to “") and ("repeated your message" if kind == "echo" else "previous reply") in answer.text


def test_two_notes_in_a_row_never_read_the_same():
    """The 0.5B's run of 26 Nov: two identical notes in a row were themselves a repeated reply."""
    first, second = no_answer_text("repeat", DANA), no_answer_text("repeat", "I prefer short answers.")
    assert first != second and "“I prefer short answers.”" in second
    assert no_answer_text("echo", "word " * 100).count("…") == 1  # a long message is quoted in part


@pytest.mark.parametrize(
    ("raw", "reply"),
    [
        ('{"response": "Hi Dana! I live in Haifa and work as', "Hi Dana! I live in Haifa and work as"),  # cut off by the token cap
        ('{"answer": "Short answers it is: \\"noted\\"."}', 'Short answers it is: "noted".'),
        ('{"name": "Dana"}', '{"name": "Dana"}'),  # any other JSON is left as it is
        ('Here is one: {"response": "x"}', 'Here is one: {"response": "x"}'),
    ],
)
def test_a_reply_wrapped_in_json_is_unwrapped_in_the_stored_reply_and_the_stream(raw, reply):
    assert unwrap_json_reply(raw) == reply
    assert without_markup(AIMessage(raw)).text == reply
    stream = CallTextFilter()
    shown = "".join(stream.feed("m1", raw[i : i + 5]) for i in range(0, len(raw), 5)) + stream.finish()
    assert shown == reply


async def test_markup_around_the_second_answer_is_stripped_too():
    model = echoing_model("</tool_response>Hello Dana.<|im_end|>")
    answer = await answer_again(model, prompt_after([], DANA), AIMessage(DANA), "echo")
    assert answer.text == "Hello Dana."


@pytest.mark.parametrize("size", [1, 4, 1000])
def test_an_echo_is_held_out_of_the_stream_and_a_real_reply_streams_as_it_comes(size):
    f = CallTextFilter()
    f.expect(Said(DANA, (), "", ""))

    def stream(message_id: str, text: str) -> str:
        return "".join(f.feed(message_id, text[i : i + size]) for i in range(0, len(text), size))

    shown = stream("echo", "</tool_response>\n" + DANA)
    assert shown == ""  # held while it may be an echo
    shown += stream("again", "Hi Dana, a nurse in Haifa!")  # the nudged answer: a new message
    assert (shown + f.finish()).strip() == "Hi Dana, a nurse in Haifa!"  # the echo was dropped when its message ended


def test_a_reply_that_starts_like_the_users_message_is_shown_once_it_departs_from_it():
    f = CallTextFilter()
    f.expect(Said("Hi there", (), "", ""))
    assert f.feed("m", "Hi ") == "" and f.feed("m", "Dana, welcome back.") == "Hi Dana, welcome back."
    assert f.finish() == ""


# The 0.5B's answers to Dana's first two lines (29-30 Nov 2026): the second is the first with three
# words left out, which echo_kind finds a repeat; the stream had shown it from "you're" on.
FIRST_ANSWER = (
    "Hello Dana! I'm glad to hear that you're in Haifa and working as a nurse. It's great to have someone who can "
    "help you with your daily tasks and provide support when needed. What do you need assistance with today?"
)
NEAR_REPEAT = FIRST_ANSWER.replace("glad to hear that you're", "glad you're")


@pytest.mark.parametrize("size", [1, 3, 1000])
def test_a_near_repeat_of_the_previous_reply_is_held_out_of_the_stream_whole(size):
    said = Said("I prefer short answers.", (DANA,), FIRST_ANSWER, DANA)
    assert echo_kind(NEAR_REPEAT, said) == "repeat"
    f = CallTextFilter()
    f.expect(said)
    shown = "".join(f.feed("m", NEAR_REPEAT[i : i + size]) for i in range(0, len(NEAR_REPEAT), size))
    assert shown + f.finish() == ""


@pytest.mark.parametrize("size", [1, 1000])
def test_a_fresh_reply_after_a_long_previous_one_streams_within_its_first_words(size):
    f = CallTextFilter()
    f.expect(Said("I prefer short answers.", (DANA,), FIRST_ANSWER, DANA))
    reply = "Short answers it is, Dana: I will keep every reply to a sentence or two from now on."
    shown = "".join(f.feed("m", reply[i : i + size]) for i in range(0, len(reply), size))
    if size == 1:
        assert reply.startswith(shown) and len(shown.split()) >= len(reply.split()) - 6  # out after a few words
    assert shown + f.finish() == reply


def test_holding_a_long_repeat_costs_each_target_its_length_per_word_not_the_words_so_far_again(monkeypatch):
    """The hold ran the whole table again at every word, in the event loop that streams every
    user's replies: a 600-word repeat of a 600-word message took 31.7 s."""
    import llm.reply_checks as checks

    cells = 0
    add = checks._Following.add

    def counted(self, word):
        nonlocal cells
        cells += len(self.target)
        add(self, word)

    monkeypatch.setattr(checks._Following, "add", counted)
    user = " ".join(f"w{i}" for i in range(50))
    previous = " ".join(f"v{i}" for i in range(300))
    f = CallTextFilter()
    f.expect(Said(user, (), previous, ""))
    shown = "".join(f.feed("m", word + " ") for word in previous.split())
    assert shown == "" and f.finish() == ""  # the repeat was held whole, and dropped
    assert cells <= 300 * (50 + 300)  # each word: one row of each table still open


def test_a_note_and_the_message_it_stands_in_for_leave_the_models_view_and_nothing_else_does():
    # With Dana's unanswered line left in view, the real 0.5B gave no usable reply in the turns after it.
    note = no_answer_note(no_answer_text("echo", DANA), id="n1")
    call = AIMessage("", tool_calls=[{"name": "recall_context", "args": {}, "id": "c1"}])
    history = [HumanMessage("Hello"), AIMessage("Hi!"), HumanMessage(DANA), call, ToolMessage("nothing", tool_call_id="c1"), note,
               HumanMessage("I prefer short answers."), AIMessage("Short it is.")]
    assert [m.text for m in without_unanswered(history)] == ["Hello", "Hi!", "I prefer short answers.", "Short it is."]
    # A note whose message was folded into the summary goes alone; the answered turn before it stays.
    assert [m.text for m in without_unanswered([HumanMessage("Hello"), AIMessage("Hi!"), note])] == ["Hello", "Hi!"]


def test_a_stopped_reply_carries_the_time_it_was_stopped_like_every_reply():
    from core.messages import is_stopped, sent_at, stopped_reply

    partial = stopped_reply("The best time to visit Lisbon is", "r1")
    assert is_stopped(partial) and sent_at(partial) is not None
