"""A 405 names every method the path takes (Starlette named the first route's only: "POST
/chats/x" answered Allow: GET, though the path takes PATCH and DELETE too)."""

import httpx

from app.http.app import create_app


async def _answer(method: str, path: str) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app()), base_url="http://api.test") as client:
        return await client.request(method, path)


async def test_a_405_names_every_method_the_path_takes_in_the_error_shape():
    answer = await _answer("POST", "/chats/some-chat")
    assert answer.status_code == 405 and answer.json()["error"]["code"] == "method_not_allowed"
    assert answer.headers["allow"] == "DELETE, GET, PATCH"
    assert (await _answer("PUT", "/chats")).headers["allow"] == "GET, POST"


async def test_a_405_on_a_path_the_schema_leaves_out_keeps_starlettes_allow_not_an_empty_one():
    answer = await _answer("POST", "/openapi.json")
    assert answer.status_code == 405 and answer.headers["allow"] == "GET, HEAD"  # (it was sent empty)
