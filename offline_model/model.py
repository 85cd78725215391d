"""The built-in offline chat model: lets the product run with no API key and no network.

It is NOT an LLM and never pretends to be one. Every reply starts with
``(offline model)`` and only reflects what the prompt gives it:

* a chat reply restates the labelled sections of the prompt built by
  :func:`prompts.reply_prompt.build_prompt` (what the user said earlier that bears on the
  message, dated and named by its chat (:mod:`offline_model.recalled`), then profile,
  preferences, facts, tasks, related knowledge, summary) in a fixed, compact form;
* structured calls are answered by deterministic stand-ins: rule-based extraction
  (:mod:`offline_model.rule_extraction`), extractive summaries (:mod:`offline_model.extractive_summary`)
  and a title made of the summary's topic words;
* a plain call carrying a JSON request for one of those inputs (the text-mode path of
  :mod:`llm.structured`) gets that JSON as its content.

It never calls tools (``bind_tools`` returns the model itself). Same input, same output.
"""

from __future__ import annotations

import json
import zlib
import re
from typing import Any, AsyncIterator, Iterator, Sequence

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable, RunnableLambda
from pydantic import BaseModel

import prompts
from prompts.reply_prompt import (
    EPISODES_HEADER,
    KNOWLEDGE_HEADER,
    MEMORIES_HEADER,
    SUMMARY_HEADER,
    USER_CONTEXT_HEADER,
    parse_sections,
    user_words,
)
from offline_model.extractive_summary import (
    OFFLINE_REPLY_PREFIX,
    compress_extractively,
    extract_topics,
    fold_extractively,
    split_sentences,
)
from offline_model.recalled import quotes_for, render_quotes
from offline_model.rule_extraction import extract_with_rules
from core.schemas import ChatTitle, ExtractionResult, SummaryBoard, normalize_text
from core.tokens import count_tokens
from core.text_validation import NAME_CHARS, shortened

__all__ = ["OfflineChatModel", "offline_reply", "offline_structured", "title_from_summary"]

MAX_REPLY_CHARS = 600
MAX_ECHO_CHARS = 120
MAX_CHUNK_CHARS = 160
MAX_KNOWLEDGE_CHUNKS = 2
MAX_FACTS = 5
MAX_TASKS = 4
MAX_CHATS = 2
SUPPORTED_SCHEMAS: tuple[type[BaseModel], ...] = (SummaryBoard, ExtractionResult, ChatTitle)

_TAG_SCHEMAS: tuple[tuple[str, type[BaseModel]], ...] = (
    (prompts.PREVIOUS_SUMMARY_TAG, SummaryBoard),
    (prompts.USER_MESSAGE_TAG, ExtractionResult),
    (prompts.CHAT_SUMMARY_TAG, ChatTitle),
)


# --------------------------------------------------------------------------- small helpers
def _usage(messages: Sequence[BaseMessage], output: str) -> dict[str, int]:
    i = sum(count_tokens(m.text) for m in messages)
    o = count_tokens(output)
    return {"input_tokens": i, "output_tokens": o, "total_tokens": i + o}


def _clip(text: str, limit: int) -> str:
    """``text`` cut at a word boundary to at most ``limit`` characters (with an ellipsis when cut)."""
    text = re.sub(r"\s+", " ", text).strip()
    if len(text) <= limit:
        return text
    cut = text[: max(0, limit - 1)]
    if " " in cut:
        cut = cut[: cut.rfind(" ")]
    return cut.rstrip(" ,;:.") + "…"


def _join(items: Sequence[str]) -> str:
    return "; ".join(i.strip().rstrip(".") for i in items if i.strip())


def _pieces(text: str) -> list[str]:
    """Word-by-word pieces whose concatenation is ``text`` exactly."""
    pieces = re.findall(r"\s*\S+", text)
    tail = text[len("".join(pieces)) :]
    if tail:
        pieces.append(tail)
    return pieces or [text]


# --------------------------------------------------------------------------- the chat reply
def _user_context_blocks(text: str) -> dict[str, list[str]]:
    """The labelled blocks of render_user_context: Profile, Preferences, Facts, Open tasks, Related earlier chats."""
    blocks: dict[str, list[str]] = {}
    current: str | None = None
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("…("):
            continue
        if s.startswith("- "):
            if current:
                blocks.setdefault(current, []).append(s[2:].strip())
        elif s.endswith(":"):
            label = s[:-1].strip()
            current = "Facts" if label.startswith("Facts") else label
    return blocks


def _key_values(items: Sequence[str]) -> list[tuple[str, str]]:
    out = []
    for item in items:
        key, sep, value = item.partition(":")
        if sep and value.strip():
            out.append((key.strip(), value.strip()))
    return out


def _with_article(role: str) -> str:
    if not re.fullmatch(r"[a-z][a-z -]*", role) or role.split()[0] in ("a", "an", "the"):
        return role
    return ("an " if role[0] in "aeiou" else "a ") + role


# How the offline reply says a profile field back; any other field: "your <field> is <value>".
_PROFILE_PHRASES = {
    "name": "your name is {}",
    "location": "you live in {}",
    "native_language": "your native language is {}",
    "level": "your level is {}",
    "goals": "your goals: {}",
}


def _profile_phrases(items: Sequence[str]) -> list[str]:
    phrases = []
    for key, value in _key_values(items):
        if key == "role":
            phrases.append(f"you work as {_with_article(value)}")
        elif key in _PROFILE_PHRASES:
            phrases.append(_PROFILE_PHRASES[key].format(value))
        else:
            phrases.append(f"your {key.replace('_', ' ')} is {value}")
    return phrases


def _note_phrase(note: str) -> str:
    for prefix, verb in (("Prefers ", "you prefer "), ("Likes ", "you like "), ("Dislikes ", "you dislike "), ("Loves ", "you love ")):
        if note.startswith(prefix):
            return verb + note[len(prefix) :]
    return f"you noted: {note}"


def _preference_phrases(items: Sequence[str]) -> list[str]:
    phrases = []
    for key, value in _key_values(items):
        truthy = value.strip().lower() in ("true", "yes", "1")
        if key == "answer_length":
            phrases.append({"short": "you prefer short answers", "long": "you prefer detailed answers"}.get(value, f"you prefer {value}-length answers"))
        elif key == "prefers_bullets":
            phrases.append("you prefer bullet points" if truthy else "you prefer no bullet points")
        elif key == "code_examples":
            phrases.append("you like code examples" if truthy else "you prefer no code examples")
        elif key == "language":
            phrases.append(f"you prefer replies in {value}")
        elif key == "tone":
            phrases.append(f"you prefer a {value} tone")
        elif key == "other_notes":
            phrases.extend(_note_phrase(n.strip()) for n in re.split(r",\s+(?=[A-Z])", value) if n.strip())
        else:
            phrases.append(f"your {key.replace('_', ' ')}: {value}")
    return phrases


def _facts(items: Sequence[str], profile: dict[str, str]) -> list[str]:
    """Facts, minus the ones that only repeat the profile ("Lives in Haifa" when location is Haifa)."""
    repeats = set()
    if profile.get("location"):
        repeats.add(normalize_text(f"Lives in {profile['location']}"))
    if profile.get("role"):
        repeats.add(normalize_text(f"Works as {profile['role']}"))
        repeats.add(normalize_text(f"Works as {_with_article(profile['role'])}"))
    return [f for f in items if normalize_text(f) not in repeats][:MAX_FACTS]


_TASK_LINE = re.compile(r"^\[(?P<id>[^\]]*)\]\s*(?P<desc>.*?)\s*\((?P<status>[^,)]*)(?:,\s*due (?P<due>[^)]*))?\)\s*$")


def _tasks(items: Sequence[str]) -> list[str]:
    out = []
    for item in items[:MAX_TASKS]:
        m = _TASK_LINE.match(item)
        if m:
            out.append(m.group("desc") + (f" (due {m.group('due')})" if m.group("due") else ""))
        else:
            out.append(item)
    return out


def _chats(items: Sequence[str]) -> list[str]:
    out = []
    for item in items[:MAX_CHATS]:
        m = re.match(r'^"(?P<title>[^"]*)"', item)
        out.append(f'"{m.group("title")}"' if m else _clip(item, 60))
    return out


_CITATION = re.compile(r"^\[(?P<cite>[^\]]+)\]")


def _knowledge(text: str) -> list[str]:
    """``[source#chunk] first sentence…`` for the first chunks of the knowledge section."""
    out = []
    for entry in re.split(r"\n\s*\n", text.strip()):
        lines = [l for l in entry.strip().splitlines() if l.strip() and not l.strip().startswith("…(")]
        if not lines:
            continue
        m = _CITATION.match(lines[0].strip())
        cite = m.group("cite") if m else None
        body = " ".join(lines[1:] if m else lines).strip()
        if not body:
            continue
        first = split_sentences(body)[0] if split_sentences(body) else body
        snippet = _clip(first, MAX_CHUNK_CHARS)
        out.append(f"[{cite}] {snippet}" if cite else snippet)
        if len(out) >= MAX_KNOWLEDGE_CHUNKS:
            break
    return out


FORGET_REQUEST = re.compile(r"^\s*(?:please\s+|can you\s+|could you\s+)?(?:forget|erase|delete)\b\s*(?:about\s+)?(?P<what>.+)", re.I | re.S)


def forget_call(messages: Sequence[BaseMessage], tool_names: Sequence[str]) -> dict | None:
    """The forget tool's call when the user's message asks to forget something and nothing answered it yet."""
    if "forget_memory" not in tool_names:
        return None
    last = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=None)
    if last is None or any(isinstance(m, ToolMessage) for m in messages[last + 1 :]):
        return None
    match = FORGET_REQUEST.match(user_words(messages[last].text))
    if match is None:
        return None
    what = match.group("what").strip().rstrip(".!?")
    return {"name": "forget_memory", "args": {"what": what}, "id": f"call_forget_{zlib.crc32(what.encode()):08x}", "type": "tool_call"}


def offline_reply(messages: Sequence[BaseMessage]) -> str:
    """The offline model's chat reply: what the prompt's sections say, restated compactly."""
    last = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=None)
    results = [m for m in messages[last + 1 :] if isinstance(m, ToolMessage)] if last is not None else []
    if results:  # after its forget tool: say what the tool said (it names no forgotten word), not what it asks of a model
        return f"(offline model) {results[-1].text.replace(prompts.FORGET_DONE_NOTE, '').strip()}"
    sections = parse_sections(messages)
    current = user_words(next((m.text for m in reversed(messages) if isinstance(m, HumanMessage)), ""))

    blocks = _user_context_blocks(sections.get(USER_CONTEXT_HEADER, "") + "\n" + sections.get(MEMORIES_HEADER, ""))
    profile_items = blocks.get("Profile", [])
    profile = dict(_key_values(profile_items))
    about = _profile_phrases(profile_items) + _preference_phrases(blocks.get("Preferences", []))
    facts = _facts(blocks.get("Facts", []), profile)
    tasks = _tasks(blocks.get("Open tasks", []))
    chats = _chats(blocks.get("Related earlier chats", []))
    knowledge = _knowledge(sections.get(KNOWLEDGE_HEADER, ""))
    summary_lines = [l.strip() for l in sections.get(SUMMARY_HEADER, "").splitlines() if l.strip() and not l.strip().startswith("…(")]

    # What the user said in earlier conversations, when it bears on the message, comes first.
    quotes = quotes_for(sections.get(EPISODES_HEADER, ""), current)
    parts: list[str] = [render_quotes(quotes)] if quotes else []
    if about:
        parts.append(f"I know: {_join(about)}.")
    if facts:
        parts.append(f"Facts: {_join(facts)}.")
    if tasks:
        parts.append(f"Open tasks: {_join(tasks)}.")
    if not (about or facts or tasks or quotes):
        parts.append("I don't know anything about you yet.")
    if knowledge:
        parts.append("Related knowledge: " + " ".join(knowledge))
    if chats:
        parts.append(f"Related earlier chats: {_join(chats)}.")
    if summary_lines:
        parts.append("Summary so far: " + _clip(summary_lines[0], MAX_CHUNK_CHARS))
    if len(parts) == 1 and not (about or facts or tasks or quotes):
        parts.append(f'You said: "{_clip(current, MAX_ECHO_CHARS)}"')
    return _clip(f"{OFFLINE_REPLY_PREFIX} " + " ".join(parts), MAX_REPLY_CHARS)


# --------------------------------------------------------------------------- structured answers
def _json_loads(text: str | None) -> Any:
    try:
        return json.loads(text) if text else None
    except (ValueError, TypeError):
        return None


def _tagged_text(messages: Sequence[BaseMessage], tag: str) -> str | None:
    """The last human message carrying ``<tag>``."""
    for m in reversed(messages):
        if isinstance(m, HumanMessage) and prompts.between(m.text, tag) is not None:
            return m.text
    return None


def _fallback_transcript(messages: Sequence[BaseMessage]) -> list[str]:
    roles = {"human": "user", "ai": "assistant"}
    return [f"[{roles[m.type]}] {m.text.strip()}".replace("\n", " ") for m in messages if m.type in roles and m.text.strip()]


def _summary_board(messages: Sequence[BaseMessage]) -> SummaryBoard:
    body = _tagged_text(messages, prompts.PREVIOUS_SUMMARY_TAG)
    if body is None:
        return fold_extractively(SummaryBoard(), _fallback_transcript(messages))
    data = _json_loads(prompts.between(body, prompts.PREVIOUS_SUMMARY_TAG))
    try:
        previous = SummaryBoard.model_validate(data) if isinstance(data, dict) else SummaryBoard()
    except ValueError:
        previous = SummaryBoard()
    new = prompts.between(body, prompts.NEW_MESSAGES_TAG) or ""
    if new.strip():
        return fold_extractively(previous, new.splitlines())
    instructions = " ".join(m.text for m in messages if isinstance(m, SystemMessage))
    limit = re.search(r"under (\d+) tokens", instructions)
    return compress_extractively(previous, int(limit.group(1))) if limit else previous.model_copy(deep=True)


def _extraction(messages: Sequence[BaseMessage]) -> ExtractionResult:
    body = _tagged_text(messages, prompts.USER_MESSAGE_TAG)
    if body is None:
        current = next((m.text for m in reversed(messages) if isinstance(m, HumanMessage)), "")
        return extract_with_rules(current)
    stored = _json_loads(prompts.between(body, prompts.STORED_MEMORIES_TAG))
    return extract_with_rules(prompts.between(body, prompts.USER_MESSAGE_TAG) or "", stored if isinstance(stored, dict) else None)


_BOARD_LABEL = re.compile(r"^(Key facts|Entities|Topics|Action items|Pending questions):\s*", re.M)


def title_from_summary(summary_text: str) -> str:
    """A 1-4 word Title Case title from a rendered board: its topics, else words from its text, else its entities."""
    labelled: dict[str, list[str]] = {}
    for line in summary_text.splitlines():
        m = _BOARD_LABEL.match(line.strip())
        if m:
            labelled[m.group(1)] = [i.strip() for i in line.strip()[m.end() :].split(";") if i.strip()]
    topics = labelled.get("Topics", [])[:4]
    if len(topics) < 2:
        plain = _BOARD_LABEL.sub("", summary_text)
        topics = extract_topics([plain], topics, limit=4)
    words = [t.strip() for t in topics if t.strip()]
    # Topic words that together spell a multiword entity ("rambam", "hospital") become that entity.
    for entity in labelled.get("Entities", []):
        parts = entity.lower().split()
        if len(parts) > 1 and all(p in words for p in parts):
            at = min(words.index(p) for p in parts)
            words = [w for w in words if w not in parts]
            words.insert(at, entity)
    words = words[:3] or labelled.get("Entities", [])[:3]
    if not words:
        return "New chat"
    title = ", ".join(w[:1].upper() + w[1:] for w in words)
    # A topic may be one long "word" (a pasted token): the title stays one ChatTitle accepts.
    return shortened(title, NAME_CHARS)


def _title(messages: Sequence[BaseMessage]) -> ChatTitle:
    body = _tagged_text(messages, prompts.CHAT_SUMMARY_TAG)
    if body is None:
        text = "\n".join(m.text for m in messages if isinstance(m, HumanMessage))
    else:
        text = prompts.between(body, prompts.CHAT_SUMMARY_TAG) or ""
    return ChatTitle(title=title_from_summary(text))


def _supported(schema: Any) -> type[BaseModel] | None:
    if isinstance(schema, type):
        for base in SUPPORTED_SCHEMAS:
            if issubclass(schema, base):
                return base
    return None


def offline_structured(schema: type[BaseModel], messages: Sequence[BaseMessage]) -> BaseModel:
    """The deterministic stand-in result for ``schema`` (SummaryBoard, ExtractionResult or ChatTitle)."""
    base = _supported(schema)
    if base is None:
        raise NotImplementedError(_unsupported_message(schema))
    value: BaseModel
    if base is SummaryBoard:
        value = _summary_board(messages)
    elif base is ExtractionResult:
        value = _extraction(messages)
    else:
        value = _title(messages)
    return value if type(value) is schema else schema.model_validate(value.model_dump())


def _unsupported_message(schema: Any) -> str:
    name = getattr(schema, "__name__", repr(schema))
    return (
        f"The offline model cannot produce structured output for {name}: it only supports "
        f"{', '.join(s.__name__ for s in SUPPORTED_SCHEMAS)} (it is rule-based, not an LLM). "
        "Use a real chat model for other schemas."
    )


def _json_request(messages: Sequence[BaseMessage]) -> type[BaseModel] | None:
    """The schema asked for by a plain call that wants one JSON object (text mode or repair), or None."""
    # A chat prompt built by prompts.reply_prompt is always a chat reply, whatever the user wrote
    # ('JSON "title": "ExtractionResult"' included): its system message holds the summary's header,
    # or in the brief layout, which leaves an empty summary out, the brief rules.
    reply_marks = (SUMMARY_HEADER, prompts.text("reply_rules_brief").strip())
    if any(isinstance(m, SystemMessage) and any(mark in m.text for mark in reply_marks) for m in messages):
        return None
    for i, m in enumerate(messages):
        if not isinstance(m, HumanMessage):
            continue
        text = m.text
        schema = next((s for tag, s in _TAG_SCHEMAS if prompts.between(text, tag) is not None), None)
        if schema is None:
            continue
        if any("JSON" in later.text for later in messages[i + 1 :] if isinstance(later, (SystemMessage, HumanMessage))):
            return schema
    # No tagged input, but an explicit JSON instruction naming one of our schemas.
    for m in reversed(messages):
        if isinstance(m, (SystemMessage, HumanMessage)) and "JSON" in m.text:
            for s in SUPPORTED_SCHEMAS:
                if f'"title": "{s.__name__}"' in m.text:
                    return s
            break
    return None


# --------------------------------------------------------------------------- the model
class OfflineChatModel(BaseChatModel):
    """Rule-based stand-in for a chat model (see the module docstring). Deterministic; never calls tools."""

    model_name: str = "offline"
    tool_names: tuple[str, ...] = ()
    """The tools bound: the offline model calls only ``forget_memory``, when the user asks to forget."""

    @property
    def _llm_type(self) -> str:
        return "offline"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.model_name}

    # -- what to say
    def _respond(self, messages: list[BaseMessage]) -> str:
        schema = _json_request(messages)
        if schema is not None:
            return offline_structured(schema, messages).model_dump_json()
        return offline_reply(messages)

    def _message(self, messages: list[BaseMessage]) -> AIMessage:
        call = forget_call(messages, self.tool_names)
        if call is not None:
            return AIMessage(content="", tool_calls=[call], usage_metadata=_usage(messages, ""),
                             response_metadata={"model_name": self.model_name, "finish_reason": "tool_calls"})
        content = self._respond(messages)
        return AIMessage(
            content=content,
            usage_metadata=_usage(messages, content),
            response_metadata={"model_name": self.model_name, "finish_reason": "stop"},
        )

    # -- non-streamed
    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._message(messages))])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return self._generate(messages, stop, None, **kwargs)

    # -- streamed, word by word; the last chunk carries the usage
    def _chunks(self, messages: list[BaseMessage]) -> Iterator[ChatGenerationChunk]:
        call = forget_call(messages, self.tool_names)
        if call is not None:
            yield ChatGenerationChunk(message=AIMessageChunk(
                content="", usage_metadata=_usage(messages, ""), chunk_position="last",
                tool_call_chunks=[{"name": call["name"], "args": json.dumps(call["args"]), "id": call["id"], "index": 0}],
                response_metadata={"model_name": self.model_name, "finish_reason": "tool_calls"},
            ))
            return
        content = self._respond(messages)
        pieces = _pieces(content)
        for i, piece in enumerate(pieces):
            if i == len(pieces) - 1:
                chunk = AIMessageChunk(
                    content=piece,
                    usage_metadata=_usage(messages, content),
                    response_metadata={"model_name": self.model_name, "finish_reason": "stop"},
                    chunk_position="last",
                )
            else:
                chunk = AIMessageChunk(content=piece)
            yield ChatGenerationChunk(message=chunk)

    def _stream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        for chunk in self._chunks(messages):
            if run_manager:
                run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk

    async def _astream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                       run_manager: AsyncCallbackManagerForLLMRun | None = None, **kwargs: Any) -> AsyncIterator[ChatGenerationChunk]:
        for chunk in self._chunks(messages):
            if run_manager:
                await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk

    # -- tools and structured output
    def bind_tools(self, tools: Sequence[Any], *, tool_choice: str | None = None, **kwargs: Any) -> "OfflineChatModel":
        """The offline model calls one tool: ``forget_memory``, when the user asks it to forget something."""
        names = tuple(getattr(t, "name", None) or (t.get("name") if isinstance(t, dict) else None) or "" for t in tools)
        return self.model_copy(update={"tool_names": names})

    def with_structured_output(
        self, schema: Any, *, include_raw: bool = False, **kwargs: Any
    ) -> Runnable[LanguageModelInput, Any]:
        """SummaryBoard → extractive summary, ExtractionResult → rules, ChatTitle → topic words; others raise."""
        if _supported(schema) is None:
            raise NotImplementedError(_unsupported_message(schema))

        def run(model_input: LanguageModelInput) -> Any:
            messages = self._convert_input(model_input).to_messages()
            parsed = offline_structured(schema, messages)
            if not include_raw:
                return parsed
            content = parsed.model_dump_json()
            raw = AIMessage(
                content=content,
                usage_metadata=_usage(messages, content),
                response_metadata={"model_name": self.model_name, "finish_reason": "stop"},
            )
            return {"raw": raw, "parsed": parsed, "parsing_error": None}

        async def arun(model_input: LanguageModelInput) -> Any:
            return run(model_input)

        return RunnableLambda(run, afunc=arun, name=f"OfflineStructured[{schema.__name__}]")
