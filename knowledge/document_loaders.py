"""Turn files into plain text the chunker can read: Markdown, plain text, HTML and PDF.

Every loader returns a :class:`LoadedDocument` whose ``text`` keeps the document's
structure in a form :mod:`knowledge.chunking` understands: headings as Markdown ``#``
lines and paragraphs separated by blank lines. HTML headings ``<h1>``..``<h6>``
become ``#``..``######`` lines; script, style and navigation are dropped. PDF pages
are joined with blank lines and their character spans are kept in ``pages`` so a
chunk can say which page(s) it came from.

A file that cannot be used (unknown extension, unreadable, not UTF-8, no text)
raises :class:`DocumentLoadError` naming the path, so ``memory-agent ingest`` can
report it and carry on with the other files.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, NamedTuple

from core.errors import MemoryAgentError
from core.text_validation import made_storable

# extension -> kind
SUPPORTED_EXTENSIONS: dict[str, str] = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".txt": "text",
    ".html": "html",
    ".htm": "html",
    ".pdf": "pdf",
}


NO_TEXT = "the file holds no text"
"""Why a file of only markup (``<html><body></body></html>``) is refused: it is empty, as a blank file is."""


class DocumentLoadError(MemoryAgentError):
    """A file could not be loaded; ``path`` says which, the message says why."""

    def __init__(self, path: str | Path, reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


@dataclass(frozen=True)
class PageSpan:
    """Where one PDF page's text sits in :attr:`LoadedDocument.text` (``start``..``end`` chars)."""

    page: int  # 1-based
    start: int
    end: int


@dataclass(frozen=True)
class LoadedDocument:
    source: str
    """How the document is named in the knowledge base (path relative to the CWD when possible)."""
    text: str
    sha256: str
    """Hex digest of the file's bytes: an unchanged file is not ingested twice."""
    kind: str
    """``markdown``, ``text``, ``html`` or ``pdf``."""
    pages: tuple[PageSpan, ...] | None = None
    """PDF only: the character span of each page that has text."""
    path: str | None = None
    """The file's absolute path."""

    @property
    def has_headings(self) -> bool:
        """Whether ``text`` marks headings as ``#`` lines: Markdown, and HTML's ``<h1>``..``<h6>``.
        In plain text and a PDF's text a ``# ...`` line is text (a comment, "# of seats")."""
        return self.kind in ("markdown", "html")

    def pages_for_span(self, start: int, end: int) -> list[int]:
        """The page numbers whose text overlaps ``text[start:end]`` (empty for non-PDFs)."""
        if not self.pages:
            return []
        return [p.page for p in self.pages if p.start < end and start < p.end]


# --------------------------------------------------------------------------- paths


def source_name(path: str | Path) -> str:
    """The path relative to the current directory when it lies under it, else absolute (POSIX style)."""
    resolved = Path(path).expanduser().resolve()
    try:
        return resolved.relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return resolved.as_posix()


class FoundFile(NamedTuple):
    """A file to ingest; ``within``: the folder its contents must come from (None: named, or links followed)."""

    path: Path
    within: Path | None = None


def read_file(path: str | Path, within: Path | None = None) -> bytes:
    """The file's bytes, read through one open file descriptor.

    With ``within``, the file actually opened must lie inside that folder: its real path is
    checked after opening, and must name the very file opened (same device and inode). A file
    swapped for a link to an outside file after the walk (or a folder on its path swapped for
    one) is then refused, not read: the walk's check alone would leave that window open.
    """
    try:
        # O_NONBLOCK: a FIFO swapped in must not hang the open (it is refused below as not a file).
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise DocumentLoadError(path, f"cannot read the file: {exc.strerror or exc}") from exc
    with os.fdopen(fd, "rb") as handle:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode):
            raise DocumentLoadError(path, "not a regular file")
        if within is not None:
            real = Path(os.path.realpath(path))
            try:
                named = os.stat(real)
            except OSError:
                named = None
            same = named is not None and (named.st_dev, named.st_ino) == (opened.st_dev, opened.st_ino)
            if not (_inside(real, within) and same):
                raise SymlinkSkipped(Path(path), real, within, after_walk=True)
        try:
            return handle.read()
        except OSError as exc:
            raise DocumentLoadError(path, f"cannot read the file: {exc.strerror or exc}") from exc


def is_supported(path: str | Path) -> bool:
    return Path(path).suffix.lower() in SUPPORTED_EXTENSIONS


class SymlinkSkipped(DocumentLoadError):
    """A symbolic link found in a folder that leads out of it: not ingested unless asked."""

    def __init__(self, path: Path, target: Path, root: Path, *, after_walk: bool = False) -> None:
        self.target = str(target)
        what = "turned into a link to" if after_walk else "a symbolic link to"
        when = "after the folder was walked; not read" if after_walk else "not followed (pass --follow-symlinks to include it)"
        super().__init__(path, f"{what} {target}, outside {root}, {when}")


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def expand_paths(paths: Iterable[str | Path], *, follow_symlinks: bool = False) -> tuple[list[FoundFile], list[DocumentLoadError]]:
    """Files to ingest, in a stable order, plus errors for paths that cannot be used.

    Directories are walked recursively for the supported extensions (hidden files and
    folders are skipped). A file named explicitly with an unsupported extension is an
    error, a missing path too. Duplicates are listed once.

    A path given here is used as given, even when it is a link (it was named). Inside a
    folder, a symbolic link that leads out of it (to a file, or to a folder) is not
    followed unless ``follow_symlinks``, and comes back as a :class:`SymlinkSkipped`
    error: a link to ``/etc/passwd`` dropped in a shared folder must not reach the
    knowledge base every user retrieves from. Links that stay inside are followed. Each file
    of a folder carries the folder it must be read from (:func:`read_file` checks it again
    when the file is read).
    """
    files: list[FoundFile] = []
    errors: list[DocumentLoadError] = []
    seen: set[Path] = set()

    def add(p: Path, within: Path | None = None) -> None:
        key = p.resolve()
        if key not in seen:
            seen.add(key)
            files.append(FoundFile(p, within))

    for raw in paths:
        if not str(raw).strip():  # Path("") is the current folder: an empty $DOC would ingest it all
            errors.append(DocumentLoadError(repr(str(raw)), "an empty path names no file or folder"))
            continue
        p = Path(raw).expanduser()
        if p.is_dir():
            found, skipped = _walk(p, follow_symlinks)
            errors.extend(skipped)
            if not found and not skipped:  # a wrong folder, most likely: said, not a quiet "0 added"
                supported = ", ".join(sorted(SUPPORTED_EXTENSIONS))
                errors.append(DocumentLoadError(p, f"the folder holds no file to ingest ({supported}; hidden ones are left out)"))
            for f in sorted(found):
                add(f, None if follow_symlinks else p.resolve())
        elif p.is_file():
            if is_supported(p):
                add(p)
            else:
                errors.append(_unsupported(p))
        elif p.exists():
            errors.append(DocumentLoadError(p, "not a regular file or directory"))
        else:
            errors.append(DocumentLoadError(p, "no such file or directory"))
    return files, errors


def _walk(folder: Path, follow_symlinks: bool) -> tuple[list[Path], list[DocumentLoadError]]:
    """Supported, non-hidden files under ``folder``, and what was skipped: the links leading out of
    it, and folders that could not be read (reported, not passed over in silence)."""
    root = folder.resolve()
    found: list[Path] = []
    skipped: list[DocumentLoadError] = []

    def unreadable(exc: OSError) -> None:
        skipped.append(DocumentLoadError(exc.filename or folder, f"cannot read the folder: {exc.strerror or exc}"))

    visited: set[Path] = set()  # followed links may form a cycle

    def leaves(path: Path) -> bool:
        if not path.is_symlink():
            return False
        target = path.resolve()
        if _inside(target, root):
            return False
        if not follow_symlinks:
            skipped.append(SymlinkSkipped(path, target, folder))
        return not follow_symlinks

    for dirpath, dirnames, filenames in os.walk(folder, onerror=unreadable, followlinks=follow_symlinks):
        real = Path(dirpath).resolve()
        if real in visited:
            dirnames[:] = []
            continue
        visited.add(real)
        kept = []
        for name in sorted(dirnames):
            sub = Path(dirpath) / name
            if not name.startswith(".") and not leaves(sub):
                kept.append(name)  # unfollowed, a link to a folder inside is not walked: its files are found on their own path
        dirnames[:] = kept
        for name in filenames:
            path = Path(dirpath) / name
            if not name.startswith(".") and is_supported(name) and not leaves(path):
                found.append(path)
    return found, skipped


def _unsupported(path: Path) -> DocumentLoadError:
    ext = path.suffix or "(no extension)"
    supported = ", ".join(sorted(SUPPORTED_EXTENSIONS))
    return DocumentLoadError(path, f"unsupported file type {ext}; supported: {supported}")


# --------------------------------------------------------------------------- loading


def load_document(path: str | Path, *, source: str | None = None, data: bytes | None = None) -> LoadedDocument:
    """Load one file (``data``: its bytes, already read with :func:`read_file`). Raises
    :class:`DocumentLoadError` when it cannot be used."""
    p = Path(path).expanduser()
    kind = SUPPORTED_EXTENSIONS.get(p.suffix.lower())
    if kind is None:
        raise _unsupported(p)
    if data is None:
        if not p.exists():
            raise DocumentLoadError(p, "no such file")
        data = read_file(p)
    if not data.strip():
        raise DocumentLoadError(p, "the file is empty")
    sha = hashlib.sha256(data).hexdigest()
    pages: tuple[PageSpan, ...] | None = None
    if kind == "pdf":
        text, pages = _pdf_text(p, data)
    else:
        decoded = _decode(p, data)
        text = html_to_text(decoded) if kind == "html" else clean_document_text(decoded)
    if not text.strip():
        if kind == "pdf":  # its text may be there, as images: not the same as empty
            raise DocumentLoadError(p, "no text could be extracted (a scanned PDF needs OCR first)")
        raise DocumentLoadError(p, NO_TEXT)
    return LoadedDocument(
        source=source or source_name(p),
        text=text,
        sha256=sha,
        kind=kind,
        pages=pages,
        path=p.resolve().as_posix(),
    )


def _decode(path: Path, data: bytes) -> str:
    if b"\x00" in data[:8192]:
        raise DocumentLoadError(path, "looks like a binary file (or UTF-16 text), not UTF-8 text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DocumentLoadError(path, f"is not valid UTF-8 (byte {exc.start}); save it as UTF-8 and ingest again") from exc


_SPACES = re.compile(r"[ \t\f\v\u00a0]+")
_MANY_BLANK_LINES = re.compile(r"\n{3,}")


def clean_document_text(text: str) -> str:
    """Unix newlines, no NUL characters, no trailing spaces, at most one blank line in a row, trimmed.
    A lone surrogate (a PDF's broken character map can give one) is replaced: Postgres refused the
    document's insert with a raw UnicodeEncodeError."""
    text = made_storable(text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", ""))
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    return _MANY_BLANK_LINES.sub("\n\n", text).strip()


# --------------------------------------------------------------------------- HTML

# A <form> is kept, only its controls dropped: a page framework (ASP.NET's <form runat="server">)
# wraps the whole body in one.
_DROP_TAGS = {"script", "style", "nav", "noscript", "template", "svg", "iframe", "head", "button", "select", "textarea"}
_BLOCK_TAGS = {
    "address", "article", "aside", "blockquote", "body", "dd", "details", "dialog", "div", "dl", "dt",
    "fieldset", "figcaption", "figure", "footer", "header", "hr", "html", "li", "main", "ol", "p",
    "section", "summary", "table", "tbody", "thead", "tfoot", "tr", "ul", "caption",
}
_HEADING_TAGS = {f"h{i}": i for i in range(1, 7)}
_CELL_TAGS = {"td", "th"}


_MARKUP_LINE = re.compile(r"^(#{1,6}[ \t]|`{3,}|~{3,})")  # knowledge.chunking's heading and fence starts (lines are stripped)


def html_to_text(html: str) -> str:
    """Readable text from HTML: ``#`` heading lines, blank-line paragraphs, list items as ``- ``.

    ``<script>``, ``<style>``, ``<nav>`` (and other non-content elements) are dropped.
    """
    from bs4 import BeautifulSoup, NavigableString, Tag
    from bs4.element import PreformattedString

    soup = BeautifulSoup(html, "html.parser")
    for tag in soup.find_all(list(_DROP_TAGS)):
        tag.decompose()

    blocks: list[tuple[str, bool]] = []  # (text, is a list item)
    inline: list[str] = []

    def flush(list_item: bool = False) -> None:
        text = "".join(inline)
        inline.clear()
        lines = [_SPACES.sub(" ", line).strip() for line in text.split("\n")]
        # A text line that reads as Markdown markup ("# 1 reason" in a <p>) is escaped as Markdown
        # escapes it: read as a heading it was lost when another came next; read as a fence it made
        # the page's rest code.
        joined = "\n".join(_MARKUP_LINE.sub(r"\\\1", line) for line in lines if line and line != "-")
        if joined:
            blocks.append((joined, list_item))

    def walk(node) -> None:
        for child in node.children:
            if isinstance(child, PreformattedString):
                continue  # comments, doctype, CDATA, processing instructions
            if isinstance(child, NavigableString):
                inline.append(re.sub(r"\s+", " ", str(child)))
                continue
            if not isinstance(child, Tag):
                continue
            name = (child.name or "").lower()
            if name in _HEADING_TAGS:
                flush()
                title = re.sub(r"\s+", " ", child.get_text(" ")).strip()
                if title:
                    blocks.append(("#" * _HEADING_TAGS[name] + " " + title, False))
            elif name == "pre":
                flush()
                code = child.get_text().strip("\n")
                if code.strip():
                    # fenced, so the chunker keeps it whole and reads no '#' line in it as a heading;
                    # longer than any fence in the code (a <pre> showing Markdown), which would end it
                    runs = re.findall(r"^ {0,3}(`{3,})", code, flags=re.MULTILINE)
                    fence = "`" * max([3] + [len(r) + 1 for r in runs])
                    blocks.append((f"{fence}\n{code}\n{fence}", False))
            elif name == "br":
                inline.append("\n")
            elif name in _CELL_TAGS:
                inline.append(" ")
                walk(child)
                inline.append(" ")
            elif name in _BLOCK_TAGS:
                flush()
                if name == "li":
                    inline.append("- ")
                walk(child)
                flush(list_item=name == "li")
            else:
                walk(child)

    walk(soup)
    flush()
    # Consecutive list items stay one paragraph (one item per line); other blocks are paragraphs.
    parts: list[str] = []
    for i, (text, list_item) in enumerate(blocks):
        if i:
            parts.append("\n" if list_item and blocks[i - 1][1] else "\n\n")
        parts.append(text)
    return clean_document_text("".join(parts))


# --------------------------------------------------------------------------- PDF


def _pdf_text(path: Path, data: bytes) -> tuple[str, tuple[PageSpan, ...]]:
    import io

    try:
        from pypdf import PdfReader
        from pypdf.errors import PdfReadError
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise DocumentLoadError(path, "reading PDFs needs the pypdf package (run `make install`)") from exc
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            try:
                reader.decrypt("")
            except Exception as exc:
                raise DocumentLoadError(path, "the PDF is encrypted") from exc
        parts: list[str] = []
        spans: list[PageSpan] = []
        offset = 0
        for number, page in enumerate(reader.pages, start=1):
            page_text = clean_document_text(page.extract_text() or "")
            if not page_text:
                continue
            if parts:
                offset += 2  # the "\n\n" between pages
            spans.append(PageSpan(page=number, start=offset, end=offset + len(page_text)))
            parts.append(page_text)
            offset += len(page_text)
    except DocumentLoadError:
        raise
    except (PdfReadError, ValueError, KeyError, TypeError, OSError) as exc:
        raise DocumentLoadError(path, f"not a readable PDF: {exc}") from exc
    return "\n\n".join(parts), tuple(spans)
