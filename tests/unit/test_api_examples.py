"""docs/api.md's curl examples name routes the server has, and cover every route the web page calls."""

from __future__ import annotations

import re
import shlex

from app.http.app import create_app
from tests.conftest import REPO_ROOT

API_DOC = REPO_ROOT / "docs" / "api.md"
PAGE_SCRIPTS = sorted((REPO_ROOT / "app" / "http" / "web").glob("*.js"))  # the page's own scripts (vendor/ aside)
# The page's calls: api.call("GET", "/chats") and runTurn("POST", `/chats/${state.chatId}/messages`, ...).
PAGE_CALL = re.compile(r"""(?:call|runTurn)\("([A-Z]+)",\s*[`"]([^`"]+)[`"]""")


def curl_examples() -> list[tuple[str, str]]:
    """(method, path) of every curl line in the "curl examples" section, variables filled with ids."""
    section = API_DOC.read_text().split("### curl examples", 1)[1].split("\n### ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1).replace("\\\n", " ")
    found = []
    for line in block.splitlines():
        if not line.startswith("curl "):
            continue
        words = shlex.split(line, comments=True)
        url = next(w for w in words if w.startswith("$API"))
        method = words[words.index("-X") + 1] if "-X" in words else ("POST" if {"-d", "--data"} & set(words) and "-G" not in words else "GET")
        path = re.sub(r"\$[A-Z]+", "some-id", url.removeprefix("$API")).split("?")[0]
        found.append((method, path))
    return found


def routes() -> list[tuple[str, str, re.Pattern]]:
    """(method, path template, its pattern) of every route in the server's OpenAPI document."""
    paths = create_app().openapi()["paths"]
    return [
        (method.upper(), template, re.compile(re.sub(r"\{[^}]+\}", "[^/]+", template) + "$"))
        for template, operations in paths.items()
        for method in operations
    ]


def route_of(method: str, path: str, table) -> str | None:
    return next((template for m, template, pattern in table if m == method and pattern.match(path)), None)


def test_every_curl_example_names_a_route_the_server_has():
    table = routes()
    examples = curl_examples()
    assert len(examples) >= 25
    assert ("POST", "/chats/some-id/messages") in examples
    unknown = [f"{m} {p}" for m, p in examples if route_of(m, p, table) is None]
    assert not unknown, f"docs/api.md has curl examples for routes the server does not have: {unknown}"


def test_every_route_the_web_page_calls_has_a_curl_example():
    table = routes()
    examples = curl_examples()
    missing = []
    for method, raw in PAGE_CALL.findall("\n".join(p.read_text() for p in PAGE_SCRIPTS)):
        path = re.sub(r"\$\{[^}]*\}", "some-id", raw).split("?")[0]
        route = route_of(method, path, table)
        assert route is not None, f"the page calls {method} {raw}, which the server does not have"
        if not any(route_of(m, p, table) == route and m == method for m, p in examples):
            missing.append(f"{method} {route}")
    assert not missing, f"routes the page calls without a curl example in docs/api.md: {missing}"


def test_the_message_example_sends_the_text_body_and_reads_the_stream_unbuffered():
    section = API_DOC.read_text().split("### curl examples", 1)[1]
    send = re.search(r"curl -N -X POST \$API/chats/\$CHAT/messages .*?\n.*?-d '(\{.*?\})'", section, re.S)
    assert send and '"text"' in send.group(1)
