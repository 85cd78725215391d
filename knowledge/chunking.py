"""Structure-aware chunking: headings -> sections -> paragraphs -> packed chunks.

1. Markdown ATX heading lines (``#`` .. ``######`` followed by a space) split the text
   into sections; each section knows its heading path ("Install > Linux"). ``#`` lines
   inside fenced code blocks (``` or ~~~) are code, not headings.
   Plain text and a PDF's text have neither (``markdown=False``): one section of paragraphs.
2. Blank lines split a section into paragraphs (a fenced code block stays one paragraph).
3. Paragraphs are packed into chunks of at most ``target_tokens`` tokens. When a chunk
   is full, the next one starts with an overlap of up to ``overlap_tokens`` tokens: the
   previous chunk's last paragraph(s), or its last sentences when that paragraph is
   bigger than the overlap.
4. A paragraph bigger than ``target_tokens`` is split into sentences, a sentence still too
   big into lines, and a line still too big is hard-split at whitespace.

Chunks never cross a section boundary, so each has a single heading path. Tokens are
approximated like ``langchain_core.messages.utils.count_tokens_approximately``: one token
per 4 characters, rounded up. Every chunk is guaranteed to be at most ``target_tokens``.

Everything here is a pure function of its input.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from core.tokens import CHARS_PER_TOKEN, count_tokens

DEFAULT_TARGET_TOKENS = 350
DEFAULT_OVERLAP_TOKENS = 50
HEADING_SEPARATOR = " > "



@dataclass(frozen=True)
class Span:
    """A piece of the source text: ``text`` is ``source[start:end]`` (stripped)."""

    text: str
    start: int
    end: int


@dataclass(frozen=True)
class Section:
    headings: tuple[str, ...]
    paragraphs: tuple[Span, ...]

    @property
    def heading_path(self) -> str:
        return HEADING_SEPARATOR.join(self.headings)


@dataclass(frozen=True)
class Chunk:
    index: int
    """0-based position of the chunk in its document."""
    heading_path: str
    text: str
    start: int
    """Offset of the chunk's first character in the document text (overlap included)."""
    end: int

    @property
    def tokens(self) -> int:
        return count_tokens(self.text)


# --------------------------------------------------------------------------- sections

_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
# A closing fence (CommonMark): the opening's character, at least as many, nothing after. A "```bash"
# line inside a "````" block shows a fence; it does not end the block.
_CLOSING_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})[ \t]*$")


def _lines(text: str) -> list[tuple[str, int]]:
    """The lines of ``text`` with their start offsets (without the newline)."""
    out: list[tuple[str, int]] = []
    pos = 0
    for line in text.split("\n"):
        out.append((line, pos))
        pos += len(line) + 1
    return out


def split_sections(text: str, *, markdown: bool = True) -> list[Section]:
    """Split on Markdown heading lines; sections with no body text are left out.

    ``markdown=False`` (plain text, a PDF's text): one section of paragraphs. A ``# note`` line
    there is text, and read as a heading it was lost when another such line came next."""
    sections: list[Section] = []
    stack: list[tuple[int, str]] = []  # (level, title)
    paragraphs: list[Span] = []
    para_start: int | None = None
    para_end = 0
    fence: str | None = None

    def end_paragraph() -> None:
        nonlocal para_start
        if para_start is not None:
            raw = text[para_start:para_end]
            stripped = raw.strip()
            if stripped:
                lead = len(raw) - len(raw.lstrip())
                start = para_start + lead
                paragraphs.append(Span(stripped, start, start + len(stripped)))
            para_start = None

    def end_section() -> None:
        end_paragraph()
        if paragraphs:
            sections.append(Section(tuple(title for _, title in stack), tuple(paragraphs)))
        paragraphs.clear()

    for line, pos in _lines(text):
        if not markdown:
            if not line.strip():
                end_paragraph()
            else:
                if para_start is None:
                    para_start = pos
                para_end = pos + len(line)
            continue
        if fence is not None:
            # inside a code block: everything belongs to the current paragraph
            para_end = pos + len(line)
            closing = _CLOSING_FENCE.match(line)
            if closing and closing.group(1)[0] == fence[0] and len(closing.group(1)) >= len(fence):
                fence = None
            continue
        fence_match = _FENCE.match(line)
        if fence_match:
            fence = fence_match.group(1)
            if para_start is None:
                para_start = pos
            para_end = pos + len(line)
            continue
        heading = _HEADING.match(line)
        if heading:
            end_section()
            level = len(heading.group(1))
            title = heading.group(2).strip()
            while stack and stack[-1][0] >= level:
                stack.pop()
            if title:
                stack.append((level, title))
            continue
        if not line.strip():
            end_paragraph()
            continue
        if para_start is None:
            para_start = pos
        para_end = pos + len(line)
    end_section()
    return sections


# --------------------------------------------------------------------------- splitting big pieces

# A sentence ends with . ! ? … (or CJK 。！？), optionally followed by closing quotes or
# brackets, then whitespace. No capital letter is required after it (Hebrew has none).
_SENTENCE_END = re.compile(r"(?<=[.!?…。！？])[\"'”’»)\]]*\s+|(?<=[。！？])")


def split_sentences(span: Span) -> list[Span]:
    """Split a paragraph into sentences (keeping their offsets)."""
    return _split_by(span, _SENTENCE_END)


def _split_by(span: Span, pattern: re.Pattern[str]) -> list[Span]:
    pieces: list[Span] = []
    last = 0
    text = span.text
    for match in pattern.finditer(text):
        cut = match.end()
        if cut <= last or cut >= len(text):
            continue
        piece = text[last:cut]
        _append_stripped(pieces, piece, span.start + last)
        last = cut
    _append_stripped(pieces, text[last:], span.start + last)
    return pieces or [span]


def _append_stripped(pieces: list[Span], raw: str, start: int) -> None:
    stripped = raw.strip()
    if stripped:
        lead = len(raw) - len(raw.lstrip())
        pieces.append(Span(stripped, start + lead, start + lead + len(stripped)))


_NEWLINE = re.compile(r"\n")


def hard_split(span: Span, max_tokens: int) -> list[Span]:
    """Cut ``span`` into pieces of at most ``max_tokens``, preferring to cut at whitespace."""
    max_chars = max(1, int(max_tokens * CHARS_PER_TOKEN))
    pieces: list[Span] = []
    text = span.text
    pos = 0
    while pos < len(text):
        if len(text) - pos <= max_chars:
            _append_stripped(pieces, text[pos:], span.start + pos)
            break
        window = text[pos : pos + max_chars]
        cut = max(window.rfind(" "), window.rfind("\n"), window.rfind("\t"))
        if cut < max_chars // 2:
            cut = max_chars  # no good whitespace: cut mid-word
        _append_stripped(pieces, text[pos : pos + cut], span.start + pos)
        pos += cut
    return pieces


def split_to_fit(span: Span, max_tokens: int) -> list[Span]:
    """Sentences, then lines, then hard cuts, until every piece is at most ``max_tokens``."""
    if count_tokens(span.text) <= max_tokens:
        return [span]
    out: list[Span] = []
    for sentence in split_sentences(span):
        if count_tokens(sentence.text) <= max_tokens:
            out.append(sentence)
            continue
        for line in _split_by(sentence, _NEWLINE):
            if count_tokens(line.text) <= max_tokens:
                out.append(line)
            else:
                out.extend(hard_split(line, max_tokens))
    return out


# --------------------------------------------------------------------------- packing


@dataclass(frozen=True)
class _Piece:
    span: Span
    paragraph: int  # pieces of the same paragraph are joined with a space, others with a blank line


def _join(pieces: list[_Piece]) -> str:
    parts: list[str] = []
    for i, piece in enumerate(pieces):
        if i:
            parts.append(" " if piece.paragraph == pieces[i - 1].paragraph else "\n\n")
        parts.append(piece.span.text)
    return "".join(parts)


def _overlap_tail(pieces: list[_Piece], overlap_tokens: int) -> list[_Piece]:
    """The end of a full chunk to repeat at the start of the next one (at most ``overlap_tokens``)."""
    if overlap_tokens <= 0 or not pieces:
        return []
    tail: list[_Piece] = []
    for piece in reversed(pieces):
        candidate = [piece] + tail
        if count_tokens(_join(candidate)) <= overlap_tokens:
            tail = candidate
            continue
        if not tail:
            # the last piece is bigger than the overlap: carry its last sentences instead
            sentences = [_Piece(s, piece.paragraph) for s in split_sentences(piece.span)]
            for sentence in reversed(sentences):
                candidate = [sentence] + tail
                if count_tokens(_join(candidate)) > overlap_tokens:
                    break
                tail = candidate
        break
    return tail


def _pack_section(section: Section, target_tokens: int, overlap_tokens: int) -> list[list[_Piece]]:
    pieces = [
        _Piece(span, n)
        for n, paragraph in enumerate(section.paragraphs)
        for span in split_to_fit(paragraph, target_tokens)
    ]
    chunks: list[list[_Piece]] = []
    current: list[_Piece] = []
    fresh = 0  # pieces in ``current`` that are not overlap
    for piece in pieces:
        if current and count_tokens(_join(current + [piece])) > target_tokens:
            if fresh:
                chunks.append(current)
            current = _overlap_tail(current, overlap_tokens)
            fresh = 0
            while current and count_tokens(_join(current + [piece])) > target_tokens:
                current = current[1:]  # the overlap must give way to the new content
        current.append(piece)
        fresh += 1
    if current and fresh:
        chunks.append(current)
    return chunks


def chunk_text(
    text: str,
    *,
    target_tokens: int = DEFAULT_TARGET_TOKENS,
    overlap_tokens: int = DEFAULT_OVERLAP_TOKENS,
    markdown: bool = True,
) -> list[Chunk]:
    """Chunk a document's text (see the module docstring). Blank text gives no chunks.
    ``markdown=False``: no headings or code fences, paragraphs only (see :func:`split_sections`)."""
    if target_tokens < 1:
        raise ValueError("target_tokens must be at least 1")
    overlap_tokens = max(0, min(overlap_tokens, target_tokens // 2))
    sections = split_sections(text, markdown=markdown)
    if not sections and text.strip():
        # only headings: keep their text rather than lose the document
        lines = [m.group(2).strip() for line, _ in _lines(text) if (m := _HEADING.match(line))]
        body = "\n".join(line for line in lines if line) or text.strip()
        start = text.find(body) if body in text else 0
        sections = [Section((), (Span(body, start, start + len(body)),))]
    chunks: list[Chunk] = []
    for section in sections:
        for pieces in _pack_section(section, target_tokens, overlap_tokens):
            chunks.append(
                Chunk(
                    index=len(chunks),
                    heading_path=section.heading_path,
                    text=_join(pieces),
                    start=pieces[0].span.start,
                    end=pieces[-1].span.end,
                )
            )
    return chunks
