"""The README and docs/ stay short, linked and true to the code they describe."""

from __future__ import annotations

import json
import re
from dataclasses import fields
from pathlib import Path

from core.context import Context

REPO_ROOT = Path(__file__).resolve().parents[2]
README = REPO_ROOT / "README.md"
CONFIGURATION = REPO_ROOT / "docs" / "configuration.md"
README_MAX_LINES = 250  # the LangGraph templates' READMEs are 80-270 lines
SKIPPED_DIRS = {".venv", ".git", "node_modules", "__pycache__", "eval-results"}
ENV_VAR = re.compile(r"MEMORY_AGENT_[A-Z0-9_]*[A-Z0-9]")
LINK = re.compile(r"\]\(([^)\s]+)\)|<img src=\"([^\"]+)\"")


def _markdown_pages() -> list[Path]:
    return [README, REPO_ROOT / "ARCHITECTURE.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]


def _python_sources() -> list[Path]:
    this = Path(__file__).resolve()
    return [
        p for p in REPO_ROOT.rglob("*.py")
        if not SKIPPED_DIRS.intersection(p.relative_to(REPO_ROOT).parts) and not p.parts[-2].endswith(".egg-info") and p != this
    ]  # fmt: skip


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but `-` and `_` dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _headings(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # a '#' in a code block is no heading
    return [m.group(2) for m in re.finditer(r"^(#{1,6}) +(.+?) *$", text, flags=re.M)]


def _configuration_table() -> str:
    """The one table of settings (the list of removed ones below it does not count)."""
    return CONFIGURATION.read_text().split("\n## Removed", 1)[0]


def test_the_readme_is_at_most_250_lines():
    lines = README.read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail to docs/ (at most {README_MAX_LINES})"


def test_every_relative_link_in_the_readme_and_docs_resolves_to_a_file_and_heading():
    broken = []
    for page in _markdown_pages():
        for match in LINK.finditer(page.read_text()):
            target = match.group(1) or match.group(2)
            if re.match(r"[a-z]+:", target):  # http(s):, mailto:
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if not resolved.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in {_anchor(h) for h in _headings(resolved)}:
                broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_the_readme_links_every_page_of_docs():
    readme = README.read_text()
    unlinked = [p.name for p in sorted((REPO_ROOT / "docs").glob("*.md")) if f"docs/{p.name}" not in readme]
    assert not unlinked, f"docs pages the README does not link: {unlinked}"


def test_every_context_field_is_in_the_configuration_table():
    table = _configuration_table()
    missing = [f.name for f in fields(Context) if f"`{f.name}`" not in table]
    assert not missing, f"Context fields missing from docs/configuration.md: {missing}"


def test_every_environment_variable_the_code_reads_is_in_the_configuration_table_and_no_other():
    read = {name for path in _python_sources() for name in ENV_VAR.findall(path.read_text(errors="replace"))}
    documented = set(ENV_VAR.findall(_configuration_table()))
    assert not read - documented, f"read in code, missing from docs/configuration.md: {sorted(read - documented)}"
    assert not documented - read, f"in docs/configuration.md but read nowhere: {sorted(documented - read)}"


def test_every_label_of_the_retrieval_eval_names_a_heading_its_corpus_has():
    """The retrieval eval's labels point at README and docs headings: moving a section must move its labels."""
    labelled = json.loads((REPO_ROOT / "evals" / "data" / "retrieval_queries.json").read_text())
    broken = []
    for query in labelled["queries"]:
        for label in query.get("relevant", []):
            page = REPO_ROOT / label["source"]
            assert any(label["source"].startswith(c) for c in labelled["corpus"]), f"{label['source']} is not in the corpus"
            if page.suffix != ".md" or not label.get("heading"):
                continue
            if not page.exists() or not any(label["heading"].casefold() in h.casefold() for h in _headings(page)):
                broken.append(f"{label['source']} › {label['heading']!r} ({query['query']!r})")
    assert not broken, "retrieval labels naming no heading:\n" + "\n".join(broken)
