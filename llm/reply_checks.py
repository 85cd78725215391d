"""What a reply must not be: template or tool markup, an echo of the user's message, a repeat of
the previous reply.

Small local models (Qwen2.5 0.5B behind llama-cpp-python) were seen answering with a raw
``</tool_response>`` and then the user's first message, word for word, turn after turn. The reply
node (the one place a reply is finalized) strips the markup, then asks once more with a nudge
when what is left only echoes or repeats (``llm.text_tool_calls.answer_again``), and puts a clear note in its
place when the second answer does the same. :class:`MarkupFilter` keeps the same markup out of
the token stream, and :class:`EchoHold` an echo there.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from core.stopwords import FILLER, STOPWORDS
from core.words import word_runs, words_with_apostrophe
from prompts.reply_prompt import user_words

__all__ = [
    "EchoHold",
    "MarkupFilter",
    "Said",
    "echo_kind",
    "echo_targets",
    "no_answer_text",
    "strip_markup",
    "unwrap_json_reply",
    "without_markup",
]

# Chat-template special tokens (<|im_start|>, <|im_end|>, <|endoftext|>, <|eot_id|> …) and the tags
# Qwen's template wraps tool traffic in. None is ever meant for the user.
_SPECIAL = r"<\|[A-Za-z0-9_]{1,30}\|>"
_TAGS = r"</?(?:tool_response|tool_call|tools|function_call|tool_result|tool_results|function_results)>"
# A turn ends at these: whatever follows is the model writing the next turn (often the user's).
_END_OF_TURN = re.compile(r"<\|(?:im_end|im_start|endoftext|eot_id|end|eom_id)\|>")
# A tool result the model made up: the block goes whole.
_MADE_UP_RESULT = re.compile(r"<tool_response>.*?(?:</tool_response>|$)", re.S)
_LEADING = re.compile(rf"^\s*(?:(?:<\|im_start\|>|<\|start_header_id\|>)\s*assistant\b(?:<\|end_header_id\|>)?\s*|{_SPECIAL}\s*|{_TAGS}\s*)+")
_ANY = re.compile(rf"{_SPECIAL}|{_TAGS}")


def strip_markup(text: str, *, at_start: bool = True) -> tuple[str, bool]:
    """``text`` without template and tool markup, and whether a turn-ending token cut it.

    A leading ``<|im_start|>assistant`` header or stray tag is dropped; an end-of-turn token
    further on ends the reply there; a ``<tool_response>`` block goes whole; any other special
    token or tool tag is taken out. ``at_start``: the text opens the reply (a stream's later
    chunks are not)."""
    text = _MADE_UP_RESULT.sub("", text)
    if at_start:
        text = _LEADING.sub("", text)
    ended = False
    if (end := _END_OF_TURN.search(text)) is not None:
        text, ended = text[: end.start()], True
    return _ANY.sub("", text), ended


# A reply a small model wrapped in JSON, {"response": "…"} (the 1.5B and the 0.5B both did, once
# cut off by the reply's token cap): the words inside are the reply. Any other JSON is left alone.
WRAPPER_KEYS = ("response", "answer", "reply", "message", "content", "text", "output")
_WRAPPED = re.compile(r'^\s*\{\s*"(?:' + "|".join(WRAPPER_KEYS) + r')"\s*:\s*"((?:[^"\\]|\\.)*)(?:"\s*\}?)?\s*$', re.S | re.I)


def unwrap_json_reply(text: str) -> str:
    """The words of a reply written as ``{"response": "…"}`` (closed or cut off), else ``text`` as it is."""
    m = _WRAPPED.match(text)
    if m is None:
        return text
    try:
        return json.loads(f'"{m.group(1)}"')
    except json.JSONDecodeError:
        return m.group(1)


def without_markup(message: AIMessage) -> AIMessage:
    """``message`` with its text content stripped of markup and of a JSON wrapper (a message with
    neither is returned as it is)."""
    if not isinstance(message.content, str) or not message.content:
        return message
    cleaned, _ = strip_markup(unwrap_json_reply(message.content))
    cleaned = cleaned.strip() if cleaned != message.content else cleaned
    return message if cleaned == message.content else message.model_copy(update={"content": cleaned})


# --------------------------------------------------------------------------- echoes and repeats
# Word sequences this alike (difflib's ratio) count as the same text: an echo with a word changed
# or a "!" added is still an echo; a reply that quotes the message and answers it is not.
SAME_TEXT_RATIO = 0.9
# A reply with fewer content words than this is never an echo ("Thanks!" back to "Thanks!")...
MIN_CONTENT_WORDS = 2
# ...and so is a repeat of the previous reply: only a bare acknowledgement ("Got it!", "You're welcome!")
# may be said twice. "Hello Dana! How can I assist you today?" to three different messages (the 0.5B,
# greedy), "I'm sorry, but I can't assist with that." twice, or "Hi Dana! I live in Haifa and work as"
# right after the same words with "a nurse." is not a reply (five words was the floor, and let them by).
MIN_REPEAT_WORDS = MIN_CONTENT_WORDS

_NO_ANSWER = {
    "echo": "the model only repeated your message back, twice",
    "repeat": "the model gave its previous reply again, twice",
    "unusable": "the model gave no usable reply, twice",
}
NOTE_QUOTE_CHARS = 60
NUDGES = {
    "echo": "Your last answer only repeated the user's message back. Do not repeat it: answer it, in your own words.",
    "repeat": "Your last answer repeated your previous reply word for word. Do not repeat it: answer the user's newest message.",
}


def no_answer_text(kind: Literal["echo", "repeat", "unusable"], user_text: str) -> str:
    """The note in place of a second echo, repeat, or empty or call-shaped answer. It quotes the message it stands in for, so
    two notes in a row never read the same: one note after another, word for word, looks like a
    stuck chat (and is what a repeat is)."""
    said = " ".join(user_text.split())
    quoted = said if len(said) <= NOTE_QUOTE_CHARS else said[: NOTE_QUOTE_CHARS - 1].rstrip() + "…"
    return f"(No answer to “{quoted}”: {_NO_ANSWER[kind]}. Please ask again, perhaps in other words.)"


def _words(text: str) -> list[str]:
    return word_runs(unicodedata.normalize("NFKC", text).casefold())


def same_text(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` say the same words (case, punctuation and spacing aside), near enough."""
    wa, wb = _words(a), _words(b)
    if not wa or not wb:
        return False
    return wa == wb or SequenceMatcher(None, wa, wb, autojunk=False).ratio() >= SAME_TEXT_RATIO


def _content_count(text: str) -> int:
    words = words_with_apostrophe(unicodedata.normalize("NFKC", text).replace("’", "'").casefold())
    return sum(1 for w in words if w not in STOPWORDS and w not in FILLER)


@dataclass
class Said:
    """What a reply is checked against: the user's newest words, their earlier messages in view, the
    reply before the newest message and the user message that reply answered."""

    user_text: str = ""
    earlier_user_texts: tuple[str, ...] = ()
    previous_reply: str = ""
    previous_user_text: str = ""


def echo_kind(reply: str, said: Said) -> Literal["echo", "repeat"] | None:
    """"echo" when ``reply`` only repeats something the user said (their newest message, or an
    earlier one: the 0.5B answered Dana's second line with her first), "repeat" when it repeats the
    previous reply (unless the user asked the same thing again), else None. A reply too short to
    mean much is neither, and a short acknowledgement may repeat: "Thanks!" twice may well be
    answered "You're welcome!" twice."""
    content = _content_count(reply)
    if content < MIN_CONTENT_WORDS:
        return None
    if any(same_text(reply, t) for t in (said.user_text, *said.earlier_user_texts)):
        return "echo"
    if content < MIN_REPEAT_WORDS or not said.previous_reply:
        return None
    if same_text(reply, said.previous_reply) and not same_text(said.user_text, said.previous_user_text):
        return "repeat"
    return None


def echo_targets(messages: list[BaseMessage]) -> Said:
    """What a reply to ``messages`` (a conversation whose last human message is the current one,
    maybe followed by this turn's tool steps) is checked against."""
    humans = [i for i, m in enumerate(messages) if isinstance(m, HumanMessage)]
    if not humans:
        return Said()
    current = humans[-1]
    previous_reply = next((m.text for m in reversed(messages[:current]) if isinstance(m, AIMessage) and m.text.strip() and not m.tool_calls), "")
    earlier = tuple(user_words(messages[i]) for i in humans[:-1])
    return Said(user_words(messages[current]), earlier, previous_reply, earlier[-1] if earlier else "")


# --------------------------------------------------------------------------- streaming
# The tail of a chunk that may be the start of markup still arriving: held until it is decided.
_LEADERS = ("<|im_start|>assistant", "<|start_header_id|>assistant<|end_header_id|>")
_PARTIAL = re.compile(r"<(?:\|[A-Za-z0-9_]{0,30}\|?|/?[a-z_]{0,20})$")


class MarkupFilter:
    """Streamed text of one message with the markup :func:`strip_markup` removes taken out:
    a possible token's start is held until it is complete, a ``<tool_response>`` block until it
    closes, and nothing after an end-of-turn token is shown."""

    def __init__(self) -> None:
        self._held = ""
        self._ended = False
        self._started = False  # some text was shown already
        self._dropped_lead = False  # markup before any text was dropped

    def feed(self, text: str) -> str:
        if self._ended:
            return ""
        self._held += text
        held = self._held
        if not self._started and held.strip() and any(leader.startswith(held.lstrip()) for leader in _LEADERS):
            return ""  # a role header arriving token by token ("<|im_start|>", "assistant")
        cut = len(held)
        if (opened := held.rfind("<tool_response>")) >= 0 and "</tool_response>" not in held[opened:]:
            cut = opened  # a made-up tool result still arriving
        elif (partial := _PARTIAL.search(held)) is not None:
            cut = partial.start()
        return self._show(held[:cut], held[cut:])

    def finish(self) -> str:
        """The end of the message: what is still held, stripped."""
        out = "" if self._ended else self._show(self._held, "")
        self._held, self._ended, self._started, self._dropped_lead = "", False, False, False
        return out

    def _show(self, ready: str, rest: str) -> str:
        cleaned, ended = strip_markup(ready, at_start=not self._started)
        if not self._started:
            self._dropped_lead = self._dropped_lead or cleaned != ready
            if self._dropped_lead:
                cleaned = cleaned.lstrip()  # what a dropped leading tag leaves (the stored reply is stripped too)
        self._held = "" if ended else rest
        self._ended = ended
        self._started = self._started or bool(cleaned)
        return cleaned


# Past this many words a reply is held only while at least this share of them follows a target in
# order: a fresh reply shares many small words with a long previous reply, and holding it until the
# bound in _Following.may_end_same rules a repeat out would show nothing for seconds; a near-repeat keeps
# nearly all its words in order.
HOLD_SHARES = ((3, 0.5), (8, 0.8))


class EchoHold:
    """Streamed text of one message held while it may still be an echo or a repeat of ``said``
    (while :func:`same_text` could still hold between the finished reply and one of the texts it is
    checked against), so an echo the reply node will replace is never shown; released as soon as it
    cannot be one, or at the message's end unless :func:`echo_kind` finds it an echo or a repeat."""

    def __init__(self) -> None:
        self.said: Said | None = None
        self._held = ""
        self._holding = False
        self._follows: list[_Following] | None = None  # per text checked against, made at the first word
        self._seen = 0  # complete words of the held text already followed

    def expect(self, said: Said | None) -> None:
        """What the coming reply is checked against (None: nothing is held)."""
        self.said = said
        self._holding = said is not None
        self._follows, self._seen = None, 0

    def feed(self, text: str) -> str:
        if not self._holding:
            return text
        self._held += text
        if self._could_be_echo(self._held):
            return ""
        out, self._held, self._holding = self._held, "", False
        return out

    def finish(self) -> str:
        held, self._held = self._held, ""
        self._holding = self.said is not None
        self._follows, self._seen = None, 0
        if held and self.said is not None and echo_kind(held, self.said) is not None:
            return ""
        return held

    def _could_be_echo(self, text: str) -> bool:
        said = self.said
        assert said is not None
        words = _words(text)
        # A word still arriving is not counted yet: it may still match.
        complete = words if text[-1:].isspace() or not text[-1:].isalnum() else words[:-1]
        if not complete:
            return True
        if self._follows is None:
            targets = (said.user_text, *said.earlier_user_texts, said.previous_reply)
            self._follows = [_Following(w) for w in (_words(t) for t in targets) if w]
        # Each new word extends each target's table by one row: a word costs the targets' length,
        # not (words so far) × that, in the event loop that streams every user's replies.
        for word in complete[self._seen :]:
            for follow in self._follows:
                follow.add(word)
        self._seen = len(complete)
        self._follows = [f for f in self._follows if f.may_end_same(len(complete))]
        return bool(self._follows)


class _Following:
    """How a reply's words so far follow one target text: the longest common subsequence of them
    and each prefix of the target (one row of the usual table, extended a word at a time)."""

    def __init__(self, target: list[str]) -> None:
        self.target = target
        self.row = [0] * (len(target) + 1)

    def add(self, word: str) -> None:
        row, diagonal = self.row, 0
        for j, other in enumerate(self.target, 1):
            above = row[j]
            row[j] = diagonal + 1 if word == other else max(above, row[j - 1])
            diagonal = above

    def may_end_same(self, begun: int) -> bool:
        """Whether a reply that began with ``begun`` words followed so may still be :func:`same_text`
        as the target once finished. With ``u`` of its words outside their longest common
        subsequence (difflib's ratio counts no more matches), no ending gives a ratio above
        2L / (2L + u) (L the target's length), and ``u`` never shrinks. A reply whose words mostly do
        not follow the target is let go too (:data:`HOLD_SHARES`): should the reply node still
        replace it, the stream says so."""
        matched, length = self.row[-1], len(self.target)
        if 2 * length < SAME_TEXT_RATIO * (2 * length + begun - matched):
            return False
        return all(begun <= words or matched >= share * begun for words, share in HOLD_SHARES)
