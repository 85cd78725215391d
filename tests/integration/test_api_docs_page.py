"""/docs renders without a network: headless Chromium (Debian's, driven by Playwright) against a
live server, every request to anywhere but the server aborted, the page's CSP enforced."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from tests.support.browser import browser  # noqa: F401 (a pytest fixture)
from tests.support.http_server import live_server_fixture

pytestmark = [pytest.mark.browser, pytest.mark.slow]  # a server and headless Chromium


server = live_server_fixture("apidocs", workers=1)


async def test_the_api_docs_render_every_operation_with_the_network_off(server, browser):
    context = await browser.new_context(bypass_csp=False)  # the CSP the server sends is enforced
    offsite: list[str] = []
    problems: list[str] = []

    async def only_the_server(route):
        if route.request.url.startswith(server.url):
            await route.continue_()
        else:  # the network is off: a CDN, a font, a validator badge would be refused here
            offsite.append(route.request.url)
            await route.abort("internetdisconnected")

    await context.route("**/*", only_the_server)
    page = await context.new_page()
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    try:
        response = await page.goto(f"{server.url}/docs")
        assert response.status == 200

        await page.wait_for_selector(".opblock", timeout=60_000)
        summaries = [" ".join((await op.inner_text()).split()) for op in await page.query_selector_all(".opblock-summary")]
        document = await (await page.context.request.get(f"{server.url}/openapi.json")).json()
        operations = {f"{method.upper()} {path}" for path, methods in document["paths"].items() for method in methods}
        shown = {" ".join(s.split()[:2]) for s in summaries}  # an operation with two tags is listed under each
        assert shown == operations  # every operation of the API is listed
        assert any(s.startswith("POST /chats/{chat_id}/messages") for s in summaries)
        assert any(s.startswith("POST /chats/import") for s in summaries)
        assert await page.is_visible("text=memory-agent chat API")

        # Opening an operation shows its request body: sending a message is {"text": …}.
        await page.click("#operations-chats-send_message_chats__chat_id__messages_post .opblock-summary")
        await page.wait_for_selector("#operations-chats-send_message_chats__chat_id__messages_post .body-param__example, "
                                     "#operations-chats-send_message_chats__chat_id__messages_post .microlight", timeout=30_000)
        body = await page.inner_text("#operations-chats-send_message_chats__chat_id__messages_post")
        assert '"text"' in body
        await page.screenshot(path=str(Path(tempfile.gettempdir()) / "memory-agent-api-docs.png"))  # to look at, not compared

        assert offsite == [], f"the docs page asked the network for {offsite}"
        assert "script-src 'self' 'sha256-" in response.headers["content-security-policy"]
        assert problems == [], problems  # no CSP refusal, no script error
    finally:
        await context.close()
