"""How a dataset conversation becomes the chat messages the agent would have seen.

The agent's history is user (human) and assistant (ai) messages, so every
conversation is mapped onto those two roles:

* ``user`` / ``assistant`` speakers (our builtin set) keep their roles;
* otherwise the *human speaker* (by default the first speaker, LoCoMo's
  speaker A) becomes ``human`` and every other speaker ``ai``.
* Named speakers (LoCoMo "Caroline", DialogSum "#Person1#") keep their name as
  a ``Name: `` prefix: the fold renders roles as ``[user]``/``[assistant]``,
  and without the name a summary could never answer "What did Caroline do?".
* The first message of each dated session starts with
  ``[session 3, 1:56 pm on 8 May, 2023]`` so temporal questions are answerable;
  later messages of the session carry no date (as in a real chat).

Message ids are deterministic (``<conversation>-<turn id>``), so the
compaction cursor (``summarized_through``) points at stable ids.
"""

from __future__ import annotations

import re

from dataclasses import dataclass

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from evals.datasets.schema import Conversation, Session, Turn

__all__ = ["ReplayTurn", "human_speaker", "replay_turns", "session_header", "subject_name", "to_messages"]

ROLE_SPEAKERS = {"user": "human", "assistant": "ai"}


@dataclass(frozen=True)
class ReplayTurn:
    """One dataset turn as a chat message, with where it came from."""

    message: BaseMessage
    session: int
    turn_id: str | None
    speaker: str

    @property
    def is_human(self) -> bool:
        return isinstance(self.message, HumanMessage)


def human_speaker(conversation: Conversation, override: str | None = None) -> str:
    """The speaker whose turns become user messages (``override`` when given)."""
    speakers = conversation.speakers
    if override is not None:
        if override not in speakers:
            raise ValueError(f"conversation {conversation.id!r} has no speaker {override!r}; speakers: {speakers}")
        return override
    if "user" in speakers:
        return "user"
    return speakers[0] if speakers else "user"


def session_header(session: Session) -> str:
    return f"[session {session.index}, {session.date}]" if session.date else f"[session {session.index}]"


def _named(speaker: str) -> bool:
    return speaker not in ROLE_SPEAKERS


def _text(session: Session, turn: Turn, first_of_session: bool) -> str:
    text = f"{turn.speaker}: {turn.text}" if _named(turn.speaker) else turn.text
    if first_of_session and session.date:
        text = f"{session_header(session)} {text}"
    return text


def replay_turns(conversation: Conversation, human: str | None = None) -> list[ReplayTurn]:
    """Every turn in order as a ``ReplayTurn`` (see the module docstring for the mapping)."""
    who = human_speaker(conversation, human)
    out: list[ReplayTurn] = []
    n = 0
    for session in conversation.sessions:
        for i, turn in enumerate(session.turns):
            n += 1
            msg_id = f"{conversation.id}-{turn.turn_id or n}"
            text = _text(session, turn, i == 0)
            is_human = turn.speaker == who if who not in ROLE_SPEAKERS else ROLE_SPEAKERS.get(turn.speaker) == "human"
            message: BaseMessage = HumanMessage(text, id=msg_id) if is_human else AIMessage(text, id=msg_id)
            out.append(ReplayTurn(message=message, session=session.index, turn_id=turn.turn_id, speaker=turn.speaker))
    return out


def to_messages(conversation: Conversation, human: str | None = None) -> list[BaseMessage]:
    return [t.message for t in replay_turns(conversation, human)]


_FIRST_PERSON = re.compile(r"^(?:I|I'm|I've|I'd|My|Me)\b")


def subject_name(conversation: Conversation, speaker: str) -> str | None:
    """The name facts about ``speaker`` use ("Caroline"; builtin "user" → its ``user_name``'s first name;
    "I" when most speak in the first person and none names the speaker, as MSC's personas do: "I own a
    Jeep." is matched against "I owns a jeep", not "bot_0 owns a jeep", which MiniLM scores 0.3 lower)."""
    facts = [f.text.strip() for f in conversation.facts_for(speaker=speaker)]
    if facts and not any(speaker.casefold() in f.casefold() for f in facts) and 2 * sum(bool(_FIRST_PERSON.match(f)) for f in facts) > len(facts):
        return "I"
    if _named(speaker):
        return speaker
    full = str(conversation.metadata.get("user_name") or "").strip()
    return full.split()[0] if full else None
