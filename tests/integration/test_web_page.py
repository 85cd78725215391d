"""The web page in a real headless Chromium (Debian's, driven by Playwright) against a live server.

Needs /usr/bin/chromium (`apt-get install -y chromium`); Playwright's own browser
download is not used. The layout is checked at 390 px (a phone), 1,024 px (a laptop)
and 1,440 px, each light and dark (an emulated ``prefers-color-scheme``).

Screenshots: to docs/images/ (the README's pictures) under ``pytest --update-screenshots``,
else to a temporary directory, so test runs never touch the tree.
"""

from __future__ import annotations

import asyncio
import re
import signal
import tempfile
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.support.browser import browser  # noqa: F401 (a pytest fixture)
from tests.support.http_server import MARKDOWN_CODE, create_keys, new_user, paced_test_model, revoke_keys, start_server

pytestmark = [pytest.mark.browser, pytest.mark.slow]  # a server and headless Chromium

# Where screenshots go: a temporary folder, or docs/images/ under --update-screenshots (set below).
SCREENSHOTS = {"folder": Path(tempfile.gettempdir()) / "memory-agent-web-page"}
HEIGHTS = {390: 844, 1024: 768, 1440: 900}
WIDTHS = [390, 1024, 1440]
SCHEMES = ["light", "dark"]
PROFILE_GOALS = 5  # memory-panel.js PROFILE_FIELDS: the sixth is goals
BACKGROUNDS = {"light": "rgb(246, 247, 249)", "dark": "rgb(18, 21, 28)"}  # --bg of style.css


@pytest.fixture(scope="module", autouse=True)
def screenshot_folder(pytestconfig):
    if pytestconfig.getoption("update_screenshots"):
        SCREENSHOTS["folder"] = REPO_ROOT / "docs" / "images"


@pytest.fixture(scope="module")
def server(new_database):
    # Every reply streams at 60 ms a word, so the page can be seen streaming (and stopped).
    live = start_server(new_database("web"), model=paced_test_model(60))
    yield live
    live.stop()


class Pages:
    """Opens the page as a user would (the key in the URL fragment, as `serve` prints it);
    every page must end without a JavaScript error."""

    def __init__(self, server, browser) -> None:
        self.server = server
        self.browser = browser
        self.contexts = []
        self.errors: list[str] = []

    async def key(self, user: str | None = None) -> tuple[str, str]:
        user = user or new_user()
        return user, (await create_keys(self.server.database_url, [user]))[user]

    async def open(self, *, width: int = 1440, scheme: str = "light", key: tuple[str, str] | None = None, csp: bool = False):
        """``csp``: enforce the page's Content-Security-Policy. Off otherwise, because Playwright's
        ``wait_for_function`` evaluates its string in the page, which ``script-src 'self'`` forbids;
        the CSP test waits without it."""
        user, api_key = key or await self.key()
        context = await self.browser.new_context(
            viewport={"width": width, "height": HEIGHTS.get(width, 900)},
            color_scheme=scheme,
            permissions=["clipboard-read", "clipboard-write"],
            bypass_csp=not csp,
        )
        self.contexts.append(context)
        page = await context.new_page()
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        await page.goto(f"{self.server.url}/#key={api_key}")
        await page.wait_for_selector("body[data-ready='1']")
        assert await page.text_content(tid("user-badge")) == user
        assert "#key" not in page.url  # the key left the address bar; it lives in localStorage
        return page

    async def close(self) -> None:
        for context in self.contexts:
            await context.close()


@pytest.fixture
async def pages(server, browser):
    opened = Pages(server, browser)
    yield opened
    await opened.close()
    assert opened.errors == []


@pytest.fixture
async def page(pages):
    return await pages.open()


def tid(name: str) -> str:
    return f'[data-testid="{name}"]'


async def idle(page, timeout: float = 60_000) -> None:
    await page.wait_for_function("!document.querySelector('[data-testid=send]').disabled && document.body.dataset.busy !== '1'", timeout=timeout)


async def send(page, text: str) -> None:
    await page.fill(tid("message-input"), text)
    await page.press(tid("message-input"), "Enter")
    await page.wait_for_function("document.body.dataset.busy === '1' || document.querySelector('[data-testid=chat-notice]:not([hidden])')")
    await idle(page)


# The pictures in README.md and docs/api.md; the other screens are checked, not photographed.
README_SHOTS = {
    "web-page-1440-light", "web-page-1440-dark", "web-page-1024-light", "web-page-390-light", "web-page-390-dark-chats",
    "web-page-390-light-memory", "web-page-390-light-second-tab", "web-page-390-light-server-down",
}


async def screenshot(page, name: str) -> None:
    if name not in README_SHOTS:
        return
    SCREENSHOTS["folder"].mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(SCREENSHOTS["folder"] / f"{name}.png"))


# --------------------------------------------------------------------------- layout facts, measured in the page
LAYOUT_PROBLEMS = """() => {
  const vw = document.documentElement.clientWidth;
  const problems = [];
  if (document.documentElement.scrollWidth > vw) problems.push(`page is ${document.documentElement.scrollWidth}px wide in ${vw}px`);
  for (const sel of [".chat-header", ".messages", ".composer", ".chat-notice", ".sidebar", ".memory", ".turn", ".message"]) {
    for (const e of document.querySelectorAll(sel)) {
      if (e.offsetParent !== null && e.scrollWidth > e.clientWidth + 1) problems.push(`${sel} overflows: ${e.scrollWidth} > ${e.clientWidth}`);
    }
  }
  // Everything shown in the chat column is inside the screen (code and tables scroll in their own box).
  for (const e of document.querySelectorAll(".chat *")) {
    if (e.closest("pre, .table-wrap") || e.offsetParent === null) continue;
    const r = e.getBoundingClientRect();
    if (r.width && (r.left < -1 || r.right > vw + 1)) problems.push(`${e.tagName}.${e.className} spans ${Math.round(r.left)}..${Math.round(r.right)}`);
  }
  return problems;
}"""

# Words (letters and digits) drawn on two lines: broken mid-word. Code, links and over-long tokens are exempt.
WORDS_BROKEN = """(selector) => {
  const broken = [];
  for (const root of document.querySelectorAll(selector)) {
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    let node;
    while ((node = walker.nextNode())) {
      if (node.parentElement.closest("pre, code, a, .code-block")) continue;
      for (const m of node.data.matchAll(/[\\p{L}\\p{N}]+/gu)) {
        if (m[0].length > 24) continue;
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const lines = new Set([...range.getClientRects()].filter((r) => r.width > 0).map((r) => Math.round(r.top)));
        if (lines.size > 1) broken.push(m[0]);
      }
    }
  }
  return broken;
}"""

IN_VIEWPORT = """(e) => {
  const r = e.getBoundingClientRect();
  const style = getComputedStyle(e);
  return style.visibility === "visible" && style.display !== "none" && r.width > 0 && r.left >= -1 && r.right <= document.documentElement.clientWidth + 1;
}"""


async def shown(page, name: str) -> bool:
    """Visible and inside the screen (a closed drawer is neither)."""
    return await page.locator(tid(name)).evaluate(IN_VIEWPORT)


async def wait_shown(page, name: str, expected: bool = True) -> None:
    # Drawers slide (0.2 s): wait for the end state.
    for _ in range(50):
        if await shown(page, name) == expected:
            await asyncio.sleep(0.25)
            if await shown(page, name) == expected:
                return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{name} {'not ' if expected else ''}shown")


async def assert_fits(page) -> None:
    assert await page.evaluate(LAYOUT_PROBLEMS) == []
    assert await page.evaluate(WORDS_BROKEN, ".message, .memory, .chat-item") == []


# --------------------------------------------------------------------------- every screen, light and dark
@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("width", WIDTHS)
async def test_the_page_fits_the_screen_renders_markdown_safely_and_opens_its_panels(pages, width, scheme):
    page = await pages.open(width=width, scheme=scheme)
    assert await page.evaluate("getComputedStyle(document.documentElement).backgroundColor") == BACKGROUNDS[scheme]
    await send(page, "My name is Dana and I have a dog named Rex")
    await send(page, "[markdown] Plan my dinners for the week, with a code example")

    reply = page.locator(tid("assistant-message")).last
    # Markdown is rendered: heading, emphasis, both kinds of list, a table in its own scroll box.
    assert await reply.locator("h2").text_content() == "Dinner plan"
    assert await reply.locator("strong").text_content() == "short"
    assert await reply.locator("ul > li").count() == 2 and await reply.locator("ol > li").count() == 2
    assert await reply.locator(".table-wrap table td").first.text_content() == "Monday"
    assert "##" not in await reply.text_content() and "```" not in await reply.text_content()
    # … sanitized: no script ran, no handler or javascript: link survived.
    assert await page.evaluate("window.__injected") is None
    assert await reply.locator("script, img, [onerror], [onclick]").count() == 0
    assert await reply.locator("a[href^='javascript']").count() == 0
    assert await reply.locator("a[href^='https://example.com']").get_attribute("rel") == "noopener noreferrer"
    # … and its code block has a copy button that copies the code exactly.
    block = reply.locator(tid("code-block"))
    assert await block.locator(".code-head").text_content() == "pythonCopy"
    await block.locator(tid("copy-code")).click()
    await page.wait_for_function("document.querySelector('[data-testid=copy-code]').textContent === 'Copied ✓'")
    assert await page.evaluate("navigator.clipboard.readText()") == MARKDOWN_CODE

    # Nothing sticks out sideways, no word is broken mid-letter.
    await assert_fits(page)
    await page.wait_for_selector(f'{tid("facts")} >> text=Has a dog named Rex', state="attached")

    if width == 390:
        # Phone: one column; the chat list is a drawer, the memory panel too.
        assert not await shown(page, "chats-drawer") and not await shown(page, "memory-panel")
        assert await shown(page, "messages") and await shown(page, "message-input")
        await screenshot(page, f"web-page-{width}-{scheme}")
        await page.click(tid("open-chats"))
        await wait_shown(page, "chats-drawer")
        assert await shown(page, "scrim")
        await assert_fits(page)
        await screenshot(page, f"web-page-{width}-{scheme}-chats")
        await page.locator(tid("chat-item")).first.click()  # picking a chat closes the drawer
        await wait_shown(page, "chats-drawer", False)
        await page.click(tid("toggle-memory"))
        await wait_shown(page, "memory-panel")
        assert "Has a dog named Rex" in await page.locator(tid("facts")).text_content()
        await assert_fits(page)
        await screenshot(page, f"web-page-{width}-{scheme}-memory")
        await page.click(tid("close-memory"))
        await wait_shown(page, "memory-panel", False)
    elif width == 1024:
        # Laptop: chats beside the chat; the memory panel slides in from a button.
        assert await shown(page, "chats-drawer") and not await shown(page, "memory-panel")
        assert not await page.is_visible(tid("open-chats"))
        await page.click(tid("toggle-memory"))
        await wait_shown(page, "memory-panel")
        await assert_fits(page)
        await screenshot(page, f"web-page-{width}-{scheme}")
        await page.click(tid("scrim"))  # a click beside the panel closes it
        await wait_shown(page, "memory-panel", False)
        await page.click(tid("toggle-memory"))
        await wait_shown(page, "memory-panel")
        await page.keyboard.press("Escape")
        await wait_shown(page, "memory-panel", False)
    else:
        # Wide: three columns; the button hides and shows the memory panel.
        assert await shown(page, "chats-drawer") and await shown(page, "memory-panel")
        assert not await page.is_visible(tid("scrim"))
        await screenshot(page, f"web-page-{width}-{scheme}")
        await page.click(tid("toggle-memory"))
        await wait_shown(page, "memory-panel", False)
        await assert_fits(page)
        await page.click(tid("toggle-memory"))
        await wait_shown(page, "memory-panel")


# --------------------------------------------------------------------------- what the page does
async def test_a_reply_streams_in_the_fact_shows_in_the_memory_panel_and_search_finds_the_chat(page):
    # 1. The reply arrives token by token: the bubble grows while it is still streaming.
    await page.fill(tid("message-input"), "My name is Dana and I have a dog named Rex")
    await page.click(tid("send"))
    streaming = page.locator(".message.assistant.streaming .message-body")
    await streaming.wait_for()
    await page.wait_for_function("document.querySelector('.message.assistant.streaming .message-body')?.textContent.length > 1")
    early = await streaming.text_content()
    await page.wait_for_function(
        "(n) => (document.querySelector('.message.assistant.streaming .message-body')?.textContent.length || 1e9) > n", arg=len(early)
    )
    await idle(page)
    replies = page.locator(tid("assistant-message"))
    assert await replies.count() == 1
    reply = await replies.first.locator(".message-body").text_content()
    assert reply.startswith("(offline model)") and len(reply) > len(early)
    assert await page.locator(".cursor").count() == 0
    assert "Remembered: name = Dana; + Has a dog named Rex" in await page.text_content(tid("messages"))

    # 2. What was remembered appears in the memory panel.
    await page.wait_for_selector(f'{tid("facts")} >> text=Has a dog named Rex')
    assert "Dana" in await page.text_content(tid("profile"))

    # A second chat about something else, so that search has to choose.
    await page.click(tid("new-chat"))
    await page.wait_for_function("document.querySelector('[data-testid=chat-title]').textContent === 'New chat'")
    await send(page, "I am planning a trip to Japan in April: Tokyo, Kyoto and Osaka")
    await send(page, "I live in Haifa and I work as a nurse")
    assert await page.locator(tid("chat-item")).count() == 2

    # 3. "Find the chat about …" finds the first chat and opens it.
    await page.fill(tid("chat-search"), "my dog Rex")
    await page.wait_for_selector(tid("search-heading"))
    assert await page.text_content(tid("search-heading")) == "Best match"
    result = page.locator(tid("search-result"))
    assert await result.count() == 1
    assert "Dana" in await result.first.text_content()
    await result.first.click()
    await page.wait_for_selector(f'{tid("messages")} >> text=My name is Dana and I have a dog named Rex')


async def test_the_pages_csp_stops_an_injected_script_while_the_page_itself_works(pages):
    page = await pages.open(csp=True)
    violations: list[str] = []
    page.on("console", lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None)
    await page.reload()
    await page.wait_for_selector("body[data-ready='1']")
    assert violations == [], violations  # the page itself needs nothing the policy refuses
    # A script that got into the page (as an XSS would put it there) does not run...
    ran = await page.evaluate("""() => new Promise((done) => {
        document.addEventListener("securitypolicyviolation", () => done(window.__injected || "blocked"), {once: true});
        const s = document.createElement("script");
        s.textContent = "window.__injected = 'ran'";
        document.body.append(s);
        setTimeout(() => done(window.__injected || "no violation reported"), 3000);
    })""")
    assert ran == "blocked", ran
    # ...while the page's own scripts and styles, and a streamed reply's Markdown, all work.
    assert await page.evaluate("getComputedStyle(document.documentElement).backgroundColor") == BACKGROUNDS["light"]
    await page.fill(tid("message-input"), "[markdown] plan my dinners")
    await page.press(tid("message-input"), "Enter")
    body = page.locator(tid("assistant-message")).last.locator(".message-body")
    await body.locator("table").wait_for(timeout=60_000)  # locators wait without evaluating strings
    await page.locator(".message.assistant.streaming").wait_for(state="detached", timeout=60_000)
    assert await body.locator("h2").count() == 1
    assert await page.evaluate("window.__injected === undefined")  # nor did the reply's HTML run


@pytest.mark.parametrize("width", [390, 1440])
async def test_stop_keeps_the_partial_reply_marked_stopped_and_nothing_is_learned(pages, width):
    page = await pages.open(width=width, scheme="dark" if width == 390 else "light")
    # Memory would learn "Has a cat named Tom" from this message, had the reply finished.
    await page.fill(tid("message-input"), "[slow] I have a cat named Tom. Tell me a very long story about him")
    await page.click(tid("send"))
    await page.wait_for_function("document.querySelector('.message.assistant.streaming .message-body')?.textContent.length > 20")
    assert await page.is_visible(tid("stop"))
    await page.click(tid("stop"))
    await idle(page)

    assert await page.input_value(tid("message-input")) == ""  # the message stays in the chat, not in the box
    assert "kept" in await page.text_content(tid("composer-status"))
    assert await page.locator(tid("user-message")).count() == 1
    reply = page.locator(tid("assistant-message"))
    assert await reply.count() == 1
    assert (await reply.locator(".message-body").text_content()).startswith("(offline model)")
    assert await page.locator(".streaming, .cursor").count() == 0  # no cursor left blinking
    tag = page.locator(tid("stopped-tag"))
    assert await tag.is_visible() and "memory learned nothing" in await tag.get_attribute("title")
    assert await page.locator(tid("fact")).count() == 0  # nothing was learned from the stopped turn
    await assert_fits(page)

    # Regenerate turns it into a complete reply, which memory learns from.
    await page.click(tid("regenerate"))
    await idle(page)
    assert await page.locator(tid("assistant-message")).count() == 1
    assert await page.locator(tid("stopped-tag")).count() == 0
    await page.wait_for_selector(f'{tid("facts")} >> text=Has a cat named Tom', state="attached")


async def test_regenerate_answers_the_last_message_again(page):
    await send(page, "I live in Rome")
    await send(page, "I have a cat named Tom")
    assert await page.locator(tid("regenerate")).count() == 1  # on the last reply only
    first_id = await page.locator(tid("assistant-message")).last.get_attribute("data-message-id")
    await page.click(tid("regenerate"))
    await idle(page)
    assert await page.locator(tid("user-message")).count() == 2
    assert await page.locator(tid("assistant-message")).count() == 2
    assert await page.locator(tid("assistant-message")).last.get_attribute("data-message-id") != first_id


# The Enter that picks a word in an IME (Japanese, Chinese…), as Chrome sends it: key Enter, isComposing.
IME_ENTER = """(testid) => {
  const box = document.querySelector(`[data-testid="${testid}"]`);
  box.dispatchEvent(new KeyboardEvent("keydown", {key: "Enter", code: "Enter", keyCode: 229, isComposing: true, bubbles: true, cancelable: true}));
  return {busy: document.body.dataset.busy === "1", renaming: Boolean(document.querySelector("[data-testid=title-input]"))};
}"""


async def test_the_enter_that_ends_an_ime_composition_neither_sends_nor_saves(page):
    await page.fill(tid("message-input"), "にほんご")
    # A message is sent synchronously on Enter (the page is busy at once): none was.
    assert (await page.evaluate(IME_ENTER, "message-input"))["busy"] is False
    assert await page.input_value(tid("message-input")) == "にほんご"
    await page.press(tid("message-input"), "Enter")  # the Enter after the composition sends
    await idle(page)
    assert await page.locator(f'{tid("user-message")} >> text=にほんご').count() == 1

    await page.click(tid("rename-chat"))
    await page.fill(tid("title-input"), "日本語の練習")
    assert (await page.evaluate(IME_ENTER, "title-input"))["renaming"] is True
    await page.press(tid("title-input"), "Enter")
    await page.wait_for_function("document.querySelector('[data-testid=chat-title]').textContent === '日本語の練習'")


DIRECTION = "(e) => getComputedStyle(e).direction"


async def test_hebrew_and_arabic_are_laid_out_right_to_left_wherever_they_are_shown(pages):
    user, key = await pages.key()
    async with pages.server.async_client(key) as client:
        await client.patch("/memory/profile", json={"name": "דנה"})
    page = await pages.open(key=(user, key))  # 1,440 px: the memory panel is open
    await page.fill(tid("message-input"), "שלום, מה שלומך?")
    assert await page.locator(tid("message-input")).evaluate(DIRECTION) == "rtl"
    await page.press(tid("message-input"), "Enter")
    await idle(page)
    assert await page.locator(tid("user-message")).first.locator(".message-body").evaluate(DIRECTION) == "rtl"
    # A reply's blocks each take their own direction (the offline model's begins in English).
    reply = page.locator(tid("assistant-message")).first.locator(".message-body")
    assert await reply.get_attribute("dir") == "auto" and await reply.locator("p[dir=auto]").count() >= 1
    assert await page.locator(f'{tid("profile")} dd').first.evaluate(DIRECTION) == "rtl"

    await page.click(tid("rename-chat"))
    await page.fill(tid("title-input"), "مرحبا بالعالم!")
    assert await page.locator(tid("title-input")).evaluate(DIRECTION) == "rtl"
    await page.press(tid("title-input"), "Enter")
    await page.wait_for_function("document.querySelector('[data-testid=chat-title]').textContent === 'مرحبا بالعالم!'")
    assert await page.locator(tid("chat-title")).evaluate(DIRECTION) == "rtl"
    assert await page.locator(f"{tid('chat-item')} .title-text").first.evaluate(DIRECTION) == "rtl"
    # English stays left to right.
    await page.fill(tid("message-input"), "Hello")
    assert await page.locator(tid("message-input")).evaluate(DIRECTION) == "ltr"


async def test_every_message_shows_when_it_was_said(page):
    await send(page, "I live in Rome")  # the chat's history is read again after the turn, with the times
    times = page.locator(tid("message-time"))
    assert await times.count() == 2
    assert await times.first.get_attribute("datetime")
    assert re.fullmatch(r"\d{1,2}[:.]\d{2}(\s?[AP]M)?", (await times.first.inner_text()).strip())  # today: the time alone


@pytest.mark.parametrize("width", [390, 1024])
async def test_a_renamed_chat_keeps_its_title_after_a_reload(pages, width):
    page = await pages.open(width=width)
    await send(page, "Hello there, I need help with my taxes")
    await page.click(tid("rename-chat"))
    await page.fill(tid("title-input"), "Taxes 2025")
    await page.press(tid("title-input"), "Enter")
    await page.wait_for_function("document.querySelector('[data-testid=chat-title]').textContent === 'Taxes 2025'")
    assert await page.locator(tid("title-input")).count() == 0
    await send(page, "Another message, so the agent would title the chat again")
    await page.reload()
    await page.wait_for_selector("body[data-ready='1']")
    assert await page.text_content(tid("chat-title")) == "Taxes 2025"
    assert await page.locator(f"{tid('chat-item')} .title-text").first.text_content() == "Taxes 2025"
    # Escape leaves the title as it was.
    await page.dblclick(tid("chat-title"))
    await page.fill(tid("title-input"), "Something else")
    await page.press(tid("title-input"), "Escape")
    assert await page.text_content(tid("chat-title")) == "Taxes 2025"
    await assert_fits(page)


async def test_a_pasted_title_is_never_cut_the_server_says_what_is_too_long(page):
    await send(page, "Hello there")
    # 150 emoji: 150 characters for the server (it allows 200), 300 UTF-16 units for a maxlength.
    emoji = "🐶" * 150
    await page.click(tid("rename-chat"))
    await page.fill(tid("title-input"), emoji)
    await page.press(tid("title-input"), "Enter")
    await page.wait_for_function("(t) => document.querySelector('[data-testid=chat-title]').textContent === t", arg=emoji)

    # Too long: the server's message, and the title stays in its box to be shortened.
    await page.click(tid("rename-chat"))
    await page.fill(tid("title-input"), "x" * 201)
    await page.press(tid("title-input"), "Enter")
    await page.wait_for_function("document.querySelector('[data-testid=composer-status]').textContent.includes('200')")
    assert await page.input_value(tid("title-input")) == "x" * 201
    await page.fill(tid("title-input"), "x" * 200)
    await page.press(tid("title-input"), "Enter")
    await page.wait_for_function("document.querySelector('[data-testid=chat-title]').textContent === 'x'.repeat(200)")
    assert await page.locator(tid("title-input")).count() == 0


async def test_a_second_tab_sees_the_running_reply_and_keeps_its_message(pages):
    key = await pages.key()
    first = await pages.open(key=key)
    second = await pages.open(key=key, width=390)
    await send(first, "My name is Dana")
    await second.reload()
    await second.wait_for_selector("body[data-ready='1']")

    # The first tab starts a long reply; the second sends while it runs.
    # (A reply unlike the last, so it streams from its first words: see below.)
    await first.fill(tid("message-input"), "[slow] [markdown] Tell me a long story about the sea")
    await first.click(tid("send"))
    await first.wait_for_function("document.querySelector('.message.assistant.streaming .message-body')?.textContent.length > 0")
    await second.fill(tid("message-input"), "And what about the mountains?")
    await second.press(tid("message-input"), "Enter")
    notice = second.locator(tid("chat-notice"))
    await notice.wait_for()
    await screenshot(second, "web-page-390-light-second-tab")
    assert "Not sent" in await notice.text_content() and "already being written" in await notice.text_content()
    assert await second.input_value(tid("message-input")) == "And what about the mountains?"
    assert await second.locator(f'{tid("user-message")} >> text=mountains').count() == 0
    await asyncio.sleep(2)  # the explanation stays (the page polls the chat meanwhile)
    assert await notice.is_visible() and "Not sent" in await notice.text_content()
    await assert_fits(second)

    # When the first tab's reply is done, the second shows it and says it may send now.
    await idle(first)
    await second.wait_for_function("document.querySelector('[data-testid=chat-notice]').textContent.includes('press Send')", timeout=30_000)
    assert await second.locator(f'{tid("user-message")} >> text=long story about the sea').count() == 1
    await second.press(tid("message-input"), "Enter")
    await idle(second)
    assert await notice.is_hidden()
    assert await second.locator(f'{tid("user-message")} >> text=mountains').count() == 1

    # A tab that opens the chat while a reply runs says so, and can stop it.
    # A long reply (the markdown one, at 150 ms a word) that repeats nothing, so it streams from its
    # first words (a reply that begins like the previous one is held back while it may be a repeat).
    await first.fill(tid("message-input"), "[slow] [markdown] One more long story, please")
    await first.click(tid("send"))
    await first.wait_for_function("document.querySelector('.message.assistant.streaming .message-body')?.textContent.length > 0")
    await second.reload()
    await second.wait_for_selector("body[data-ready='1']")
    assert "being written" in await notice.text_content()
    await second.click(tid("stop-other"))
    await idle(first)
    await second.wait_for_selector(tid("stopped-tag"))
    assert await first.locator(tid("stopped-tag")).count() == 1


async def test_editing_a_message_regenerates_from_there(page):
    await send(page, "I live in Rome")
    await send(page, "I have a cat named Tom")
    await page.locator(tid("edit-message")).first.click()
    await page.fill(tid("edit-input"), "I live in Haifa")
    await page.click(tid("save-edit"))
    await page.wait_for_function("document.querySelectorAll('[data-testid=user-message]').length === 1 && !document.querySelector('[data-testid=send]').disabled")
    assert await page.locator(tid("user-message")).first.locator(".message-body").text_content() == "I live in Haifa"
    # The later message left the chat (what was learned from it stays in memory, by design).
    assert await page.locator(f'{tid("user-message")} >> text=cat named Tom').count() == 0
    await page.wait_for_selector(f'{tid("profile")} >> text=Haifa')


async def test_an_edit_not_sent_stays_in_its_editor_and_survives_the_polling_of_another_tabs_reply(pages):
    key = await pages.key()
    first = await pages.open(key=key)
    await send(first, "I live in Rome")
    second = await pages.open(key=key)
    # Refused (too long): the edit comes back to its editor, not to the message box, where Send
    # would add it to the chat as a new message.
    await second.locator(tid("edit-message")).first.click()
    await second.fill(tid("edit-input"), "x" * 20_001)
    await second.click(tid("save-edit"))
    await second.wait_for_function("document.querySelector('[data-testid=composer-status]').textContent.includes('too long')")
    await idle(second)
    assert len(await second.input_value(tid("edit-input"))) == 20_001
    assert await second.input_value(tid("message-input")) == ""

    # A reply runs in the first tab: the edit is refused (409) and stays open while the second
    # tab reloads the chat every 1.5 s until that reply is done, then it can be saved.
    await first.fill(tid("message-input"), "[slow] [markdown] Tell me a long story about the sea")
    await first.click(tid("send"))
    await first.wait_for_function("document.querySelector('.message.assistant.streaming .message-body')?.textContent.length > 0")
    await second.fill(tid("edit-input"), "I live in Haifa")
    await second.click(tid("save-edit"))
    await second.wait_for_function("document.querySelector('[data-testid=chat-notice]').textContent.includes('Your edit is still open')")
    await idle(first)
    await second.wait_for_function("document.querySelector('[data-testid=chat-notice]').textContent.includes('press Save & regenerate')", timeout=30_000)
    assert await second.input_value(tid("edit-input")) == "I live in Haifa"
    assert await second.input_value(tid("message-input")) == ""
    await second.click(tid("save-edit"))
    await second.wait_for_function("document.querySelectorAll('[data-testid=user-message]').length === 1 && !document.querySelector('[data-testid=edit-input]')")
    await idle(second)
    assert await second.locator(tid("user-message")).all_text_contents() == ["I live in Haifa"]


async def test_a_task_change_is_confirmed_on_the_page_and_memory_can_be_corrected(page):
    await send(page, "[task] Buy milk")
    await page.wait_for_selector(tid("interrupt"))
    assert "add a task: “Buy milk”" in await page.text_content(tid("interrupt"))
    await page.click(tid("approve"))
    await page.wait_for_selector(f'{tid("tasks")} >> text=Buy milk')
    assert await page.locator(tid("interrupt")).count() == 0

    await send(page, "I have a dog named Rex")
    fact = page.locator(tid("fact")).first
    await fact.wait_for()
    await fact.locator(tid("edit-fact")).click()
    await page.fill(tid("inline-input"), "Has a dog named Rex, a beagle")
    await page.press(tid("inline-input"), "Enter")
    await page.wait_for_selector(f'{tid("facts")} >> text=Has a dog named Rex, a beagle')
    await page.locator(tid("delete-fact")).first.click()
    await page.wait_for_function("document.querySelectorAll('[data-testid=fact]').length === 0")


async def test_a_message_sent_while_a_confirmation_waits_is_kept_and_the_page_says_to_answer_it(page):
    await send(page, "[task] Buy milk")
    await page.wait_for_selector(tid("interrupt"))
    await send(page, "And some bread")
    await page.locator(tid("chat-notice")).wait_for()
    notice = await page.text_content(tid("chat-notice"))
    assert "Approve or Decline" in notice and "still in the box" in notice
    assert "POST" not in notice and "/resume" not in notice
    assert await page.input_value(tid("message-input")) == "And some bread"
    await page.click(tid("approve"))
    await page.wait_for_selector(f'{tid("tasks")} >> text=Buy milk')
    await page.press(tid("message-input"), "Enter")
    await idle(page)
    assert await page.locator(f'{tid("user-message")} >> text=And some bread').count() == 1


async def test_a_confirmation_another_tab_answered_is_said_to_be_answered_and_the_chat_reloaded(pages):
    key = await pages.key()
    first = await pages.open(key=key)
    await send(first, "[task] Buy milk")
    await first.wait_for_selector(tid("interrupt"))
    second = await pages.open(key=key)
    await second.wait_for_selector(tid("interrupt"))
    await first.click(tid("approve"))
    await idle(first)
    await first.wait_for_selector(f'{tid("tasks")} >> text=Buy milk')

    await second.click(tid("decline"))  # the second tab still shows the question
    notice = second.locator(tid("chat-notice"))
    await notice.wait_for()
    assert "already answered" in await notice.text_content()
    assert "still in the box" not in await notice.text_content()
    await idle(second)
    assert await second.locator(tid("interrupt")).count() == 0
    assert await second.locator(tid("assistant-message")).count() == await first.locator(tid("assistant-message")).count()
    await second.wait_for_selector(f'{tid("tasks")} >> text=Buy milk')  # approved, as the first tab said


async def test_deleting_a_memory_another_tab_deleted_says_so_and_the_panel_shows_what_is_stored(pages):
    key = await pages.key()
    first = await pages.open(key=key)
    await send(first, "I have a dog named Rex")
    await first.locator(tid("fact")).first.wait_for()
    second = await pages.open(key=key)
    await second.locator(tid("delete-fact")).first.click()
    await second.wait_for_function("document.querySelectorAll('[data-testid=fact]').length === 0")

    await first.locator(tid("delete-fact")).first.click()  # the first tab still shows it
    await first.wait_for_function("document.querySelector('[data-testid=composer-status]').textContent.includes('not found')")
    await first.wait_for_function("document.querySelectorAll('[data-testid=fact]').length === 0")
    # (The pages fixture fails the test on an uncaught error: the click's failure was not one.)


async def test_where_a_memory_came_from_opens_that_chat_in_a_new_tab(pages):
    key = await pages.key()
    page = await pages.open(key=key)  # 1,440 px: the memory panel is open
    await send(page, "I have a dog named Rex")
    first_chat = await page.locator(tid("chat-item")).first.get_attribute("data-chat-id")
    await page.click(tid("new-chat"))
    await page.wait_for_function("document.querySelector('[data-testid=chat-title]').textContent === 'New chat'")
    await send(page, "I live in Haifa")
    origin = page.locator(f'{tid("fact")} {tid("origin")}').first
    await origin.wait_for()
    href = await origin.get_attribute("href")
    assert href == f"#{first_chat}"

    # Opened in a new tab (a middle click): that chat, not the newest.
    tab = await page.context.new_page()
    tab.on("pageerror", lambda e: pages.errors.append(str(e)))
    await tab.goto(f"{pages.server.url}/{href}")
    await tab.wait_for_selector("body[data-ready='1']")
    assert await tab.locator(f'{tid("user-message")} >> text=dog named Rex').count() == 1
    assert await tab.locator(f"{tid('chat-item')}.active").get_attribute("data-chat-id") == first_chat

    # Another user's chat is not opened: the newest of one's own is, and the link is said to be wrong.
    other = await pages.open()
    await send(other, "Hello")
    stranger = await other.context.new_page()
    stranger.on("pageerror", lambda e: pages.errors.append(str(e)))
    await stranger.goto(f"{pages.server.url}/{href}")
    await stranger.wait_for_selector("body[data-ready='1']")
    assert await stranger.locator(f'{tid("user-message")} >> text=Hello').count() == 1
    assert "not one of yours" in await stranger.text_content(tid("composer-status"))


async def test_a_list_item_holding_a_comma_stays_one_item_when_the_list_is_edited(pages):
    user, key = await pages.key()
    async with pages.server.async_client(key) as client:
        await client.patch("/memory/profile", json={"goals": ["Run a marathon, then rest", "Learn Go"]})
        page = await pages.open(key=(user, key))  # 1,440 px: the memory panel is open
        goals = page.locator(f'{tid("profile")} dd').nth(PROFILE_GOALS)
        assert await page.locator(f'{tid("profile")} dt').nth(PROFILE_GOALS).text_content() == "goals"
        await goals.click()
        assert await page.input_value(tid("inline-input")) == "Run a marathon, then rest, Learn Go"
        await page.fill(tid("inline-input"), "Run a marathon, then rest, Learn Go, Sleep more, Eat well")
        await page.press(tid("inline-input"), "Enter")
        await page.wait_for_function("document.querySelectorAll('[data-testid=profile] dd')[5].textContent.includes('Eat well')")
        stored = (await client.get("/memory/profile")).json()["goals"]
    assert stored == ["Run a marathon, then rest", "Learn Go", "Sleep more", "Eat well"]


async def test_without_a_key_the_page_asks_for_one_and_keeps_it(server, browser):
    user = new_user()
    key = (await create_keys(server.database_url, [user]))[user]
    context = await browser.new_context(bypass_csp=True)  # for wait_for_function (see Pages.open)
    page = await context.new_page()
    await page.goto(server.url)
    await page.wait_for_selector(f"{tid('key-dialog')}[open]")
    await page.fill(tid("key-input"), "ma_00000000_wrong")
    await page.click(tid("key-save"))
    await page.wait_for_function("document.querySelector('[data-testid=key-error]').textContent.includes('unknown or revoked')")
    await page.fill(tid("key-input"), key)
    await page.click(tid("key-save"))
    await page.wait_for_selector("body[data-ready='1']")
    assert await page.text_content(tid("user-badge")) == user
    assert await page.evaluate("localStorage.getItem('memory-agent.api-key')") == key
    await page.reload()  # remembered: no dialog the second time
    await page.wait_for_selector("body[data-ready='1']")
    assert not await page.is_visible(tid("key-dialog"))
    await context.close()


async def test_a_malformed_key_in_the_link_is_said_and_the_page_still_starts(pages):
    context = await pages.browser.new_context(bypass_csp=True)  # for wait_for_function (see Pages.open)
    pages.contexts.append(context)
    fresh = await context.new_page()
    fresh.on("pageerror", lambda e: pages.errors.append(str(e)))
    await fresh.goto(f"{pages.server.url}/#key=%E0%A4%A")  # a bad % escape: the link was cut short
    await fresh.wait_for_selector(f"{tid('key-dialog')}[open]")
    assert "malformed" in await fresh.text_content(tid("key-error"))
    assert "Could not start" not in await fresh.text_content(tid("composer-status"))
    assert "#key" not in fresh.url

    # With a working key saved in this browser, the page starts with it and says why.
    user, key = await pages.key()
    page = await (await pages.open(key=(user, key))).context.new_page()  # a new tab: the key is saved
    page.on("pageerror", lambda e: pages.errors.append(str(e)))
    await page.goto(f"{pages.server.url}/#key=%E0%A4%A")
    await page.wait_for_selector("body[data-ready='1']")
    assert await page.text_content(tid("user-badge")) == user
    assert "malformed" in await page.text_content(tid("composer-status"))
    assert not await page.is_visible(tid("key-dialog"))
    assert await page.evaluate("localStorage.getItem('memory-agent.api-key')") == key


async def test_a_wrong_key_in_the_link_keeps_the_saved_key_that_works(pages):
    user, key = await pages.key()
    page = await (await pages.open(key=(user, key))).context.new_page()  # a new tab: the key is saved
    page.on("pageerror", lambda e: pages.errors.append(str(e)))
    await page.goto(f"{pages.server.url}/#key=ma_00000000_wrong")
    await page.wait_for_selector("body[data-ready='1']")
    assert await page.text_content(tid("user-badge")) == user
    assert "unknown or revoked" in await page.text_content(tid("composer-status"))
    assert await page.evaluate("localStorage.getItem('memory-agent.api-key')") == key
    assert "#key" not in page.url

    # Without a saved key, the dialog says the link's key was refused.
    context = await pages.browser.new_context(bypass_csp=True)  # for wait_for_function (see Pages.open)
    pages.contexts.append(context)
    fresh = await context.new_page()
    fresh.on("pageerror", lambda e: pages.errors.append(str(e)))
    await fresh.goto(f"{pages.server.url}/#key=ma_00000000_wrong")
    await fresh.wait_for_selector(f"{tid('key-dialog')}[open]")
    assert "The key in the link is unknown or revoked." in await fresh.text_content(tid("key-error"))
    assert await fresh.evaluate("localStorage.getItem('memory-agent.api-key')") is None


async def test_a_key_revoked_mid_session_opens_the_key_dialog(pages):
    user, key = await pages.key()
    page = await pages.open(key=(user, key))
    await send(page, "My name is Dana")
    await revoke_keys(pages.server.database_url, [key])
    await page.fill(tid("message-input"), "Are you still there?")
    await page.press(tid("message-input"), "Enter")
    await page.wait_for_selector(f"{tid('key-dialog')}[open]")
    assert "Unknown or revoked API key." in await page.text_content(tid("key-error"))
    await idle(page)
    assert await page.input_value(tid("message-input")) == "Are you still there?"  # not lost

    # A new key for the same user: the page goes on where it was.
    fresh = (await create_keys(pages.server.database_url, [user]))[user]
    await page.fill(tid("key-input"), fresh)
    await page.click(tid("key-save"))
    await page.wait_for_selector(f"{tid('key-dialog')}:not([open])", state="attached")
    await page.wait_for_selector("body[data-ready='1']")
    await page.press(tid("message-input"), "Enter")
    await idle(page)
    assert await page.locator(f'{tid("user-message")} >> text=Are you still there?').count() == 1
    assert await page.evaluate("localStorage.getItem('memory-agent.api-key')") == fresh


# --------------------------------------------------------------------------- a server that goes away
async def test_a_server_that_dies_mid_reply_is_said_plainly_and_the_page_recovers(new_database, browser):
    """`memory-agent serve` with one worker is one process: SIGKILL is the server dying."""
    database = new_database("webdown")
    live = start_server(database, workers=1, model=paced_test_model(60))
    pages = Pages(live, browser)
    try:
        page = await pages.open(width=390)
        await send(page, "My name is Dana")
        await page.fill(tid("message-input"), "[slow] Tell me a very long story about the sea")
        await page.click(tid("send"))
        await page.wait_for_function("document.querySelector('.message.assistant.streaming .message-body')?.textContent.length > 20")
        live.process.send_signal(signal.SIGKILL)
        live.process.wait(timeout=10)

        # The stream broke: said on the reply and below it; no cursor blinks on.
        await page.wait_for_selector(tid("broken-tag"))
        await idle(page)
        assert await page.locator(".streaming, .cursor").count() == 0
        assert "broke" in await page.text_content(tid("composer-status")) or "closed" in await page.text_content(tid("composer-status"))
        banner = page.locator(tid("connection-banner"))
        await banner.wait_for()
        assert "cannot be reached" in await banner.text_content()
        assert "Failed to fetch" not in await page.text_content("body")
        await assert_fits(page)
        await screenshot(page, "web-page-390-light-server-down")

        # A message typed now is not lost.
        await page.fill(tid("message-input"), "Are you there?")
        await page.press(tid("message-input"), "Enter")
        await idle(page)
        assert await page.input_value(tid("message-input")) == "Are you there?"
        assert "cannot be reached" in await page.text_content(tid("composer-status"))
        assert await page.locator(f'{tid("user-message")} >> text=Are you there?').count() == 0

        # The server comes back on the same address: the banner goes, the chat is reloaded.
        port = int(live.url.rsplit(":", 1)[1])
        live = start_server(database, workers=1, port=port)
        pages.server = live
        await page.wait_for_selector(tid("connection-banner"), state="hidden", timeout=30_000)
        await page.wait_for_selector("body[data-ready='1']")
        assert await page.locator(f'{tid("user-message")} >> text=My name is Dana').count() == 1
    finally:
        await pages.close()
        live.stop()
    assert pages.errors == []


async def test_a_yes_no_preference_refuses_any_other_answer_and_saves_nothing(page):
    if not await shown(page, "memory-panel"):
        await page.click(tid("toggle-memory"))
        await wait_shown(page, "memory-panel")
    bullets = page.locator(f'{tid("preferences")} dd').nth(4)  # PREFERENCE_FIELDS: prefers_bullets
    assert (await page.locator(f'{tid("preferences")} dt').nth(4).text_content()) == "prefers bullets"
    await bullets.click()
    await page.fill(tid("inline-input"), "maybe")
    await page.press(tid("inline-input"), "Enter")
    await page.wait_for_function("document.querySelector('[data-testid=composer-status]').textContent.includes('yes or no')")
    assert "Nothing was changed" in await page.text_content(tid("composer-status"))
    assert (await bullets.text_content()).strip() == "—"  # not saved as "no"
    await bullets.click()
    await page.fill(tid("inline-input"), "yes")
    await page.press(tid("inline-input"), "Enter")
    await page.wait_for_function("document.querySelectorAll('[data-testid=preferences] dd')[4].textContent.trim() === 'yes'")
