"""The web page in a real headless Chromium (Debian's, driven by Playwright) against a live server.

Needs /usr/bin/chromium (`apt-get install -y chromium`); Playwright's own browser
download is not used. Saves a screenshot: to docs/images/web-page.png (the README's picture)
when MEMORY_AGENT_UPDATE_SCREENSHOT=1, else to a temporary file, so test runs never touch the tree.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.support.http_server import create_keys, new_user, start_server

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--no-first-run"]
SCREENSHOT = (
    REPO_ROOT / "docs" / "images" / "web-page.png"
    if os.environ.get("MEMORY_AGENT_UPDATE_SCREENSHOT") == "1"
    else Path(tempfile.gettempdir()) / "memory-agent-web-page.png"
)


@pytest.fixture(scope="module")
def server(new_database):
    # Every reply streams at 60 ms a word, so the page can be seen streaming (and stopped).
    live = start_server(new_database("web"), env={"MEMORY_AGENT_TEST_WORD_DELAY_MS": "60"})
    yield live
    live.stop()


@pytest.fixture(scope="module")
async def browser():
    if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
        pytest.fail("Chromium is missing: install it with `apt-get update && apt-get install -y chromium`.")
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        await browser.close()


@pytest.fixture
async def page(server, browser):
    """The page, opened with a new user's key in the URL fragment (as `serve` prints it)."""
    user = new_user()
    key = (await create_keys(server.database_url, [user]))[user]
    context = await browser.new_context(viewport={"width": 1440, "height": 900})
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    await page.goto(f"{server.url}/#key={key}")
    await page.wait_for_selector("body[data-ready='1']")
    assert await page.text_content('[data-testid="user-badge"]') == user
    assert "#key" not in page.url  # the key left the address bar; it lives in localStorage
    yield page
    assert errors == []
    await context.close()


def tid(name: str) -> str:
    return f'[data-testid="{name}"]'


async def send(page, text: str) -> None:
    await page.fill(tid("message-input"), text)
    await page.press(tid("message-input"), "Enter")
    await page.wait_for_function("!document.querySelector('[data-testid=send]').disabled")


async def test_a_reply_streams_in_the_fact_shows_in_the_memory_panel_and_search_finds_the_chat(page):
    # 1. The reply arrives token by token: the bubble grows while it is still streaming.
    await page.fill(tid("message-input"), "My name is Dana and I have a dog named Rex")
    await page.click(tid("send"))
    streaming = page.locator(".message.assistant.streaming .message-body")
    await streaming.wait_for()
    await page.wait_for_function("document.querySelector('.message.assistant.streaming .message-body')?.textContent.length > 0")
    early = await streaming.text_content()
    await page.wait_for_function(
        "(n) => (document.querySelector('.message.assistant.streaming .message-body')?.textContent.length || 1e9) > n", arg=len(early)
    )
    await page.wait_for_function("!document.querySelector('[data-testid=send]').disabled", timeout=60_000)
    replies = page.locator(tid("assistant-message"))
    assert await replies.count() == 1
    reply = await replies.first.locator(".message-body").text_content()
    assert reply.startswith("(offline model)") and len(reply) > len(early)
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
    await page.screenshot(path=str(SCREENSHOT))  # the README's picture: streaming, memory panel, search
    await result.first.click()
    await page.wait_for_selector(f'{tid("messages")} >> text=My name is Dana and I have a dog named Rex')


async def test_stop_discards_the_reply_and_gives_the_message_back(page):
    await page.fill(tid("message-input"), "[slow] Tell me a very long story about my cat named Tom")
    await page.click(tid("send"))
    await page.wait_for_function("document.querySelector('.message.assistant.streaming .message-body')?.textContent.length > 0")
    assert await page.is_visible(tid("stop"))
    await page.click(tid("stop"))
    await page.wait_for_function("!document.querySelector('[data-testid=send]').disabled")
    assert await page.input_value(tid("message-input")) == "[slow] Tell me a very long story about my cat named Tom"
    assert "Stopped" in await page.text_content(tid("composer-status"))
    assert await page.locator(tid("assistant-message")).count() == 0
    assert await page.locator(tid("user-message")).count() == 0
    assert await page.locator(tid("fact")).count() == 0  # nothing was learned from the stopped turn


async def test_editing_a_message_regenerates_from_there(page):
    await send(page, "I live in Rome")
    await send(page, "I have a cat named Tom")
    first = page.locator(tid("user-message")).first
    await first.hover()
    await first.locator(tid("edit-message")).click()
    await page.fill(tid("edit-input"), "I live in Haifa")
    await page.click(tid("save-edit"))
    await page.wait_for_function("document.querySelectorAll('[data-testid=user-message]').length === 1 && !document.querySelector('[data-testid=send]').disabled")
    assert await page.locator(tid("user-message")).first.locator(".message-body").text_content() == "I live in Haifa"
    # The later message left the chat (what was learned from it stays in memory, by design).
    assert await page.locator(f'{tid("user-message")} >> text=cat named Tom').count() == 0
    await page.wait_for_selector(f'{tid("profile")} >> text=Haifa')


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


async def test_without_a_key_the_page_asks_for_one_and_keeps_it(server, browser):
    user = new_user()
    key = (await create_keys(server.database_url, [user]))[user]
    context = await browser.new_context()
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
