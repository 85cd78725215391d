"""``/docs``: Swagger UI served from this server, so the API docs work offline.

FastAPI's default page loads Swagger UI from a CDN and is blank without the network. The
files come from the ``fastapi-offline`` package (Swagger UI 5, which reads the OpenAPI 3.1
document FastAPI writes); only its static folder is used, mounted at :data:`ASSETS_URL`,
and the page is FastAPI's own ``get_swagger_ui_html`` pointed at them.

The page has a Content-Security-Policy as strict as the chat page's: scripts only from this
server plus the one inline script that starts Swagger UI (allowed by its hash, computed from
the page as built), nothing fetched from elsewhere, no framing. Inline styles are allowed:
Swagger UI's React components set them.
"""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

DOCS_URL = "/docs"
ASSETS_URL = "/docs-assets"
_INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.S)


def assets_dir() -> Path:
    """Swagger UI's files as the fastapi-offline package ships them (``swagger-ui-bundle.js``, ``swagger-ui.css``, ``favicon.png``)."""
    import fastapi_offline  # a dependency in pyproject.toml; imported here, once, when the app is built

    return Path(fastapi_offline.__file__).resolve().parent / "static"


def docs_csp(html: str) -> str:
    hashes = " ".join(
        f"'sha256-{base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()}'" for script in _INLINE_SCRIPT.findall(html)
    )
    return (
        f"default-src 'self'; script-src 'self' {hashes}; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
        "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
    )


def install_api_docs(app: FastAPI) -> None:
    """Serve ``/docs`` from local files; create the app with ``docs_url=None, redoc_url=None``."""
    app.mount(ASSETS_URL, StaticFiles(directory=assets_dir()), name="docs-assets")

    @app.get(DOCS_URL, include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        page = get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - API docs",
            swagger_js_url=f"{root}{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS_URL}/favicon.png",
            oauth2_redirect_url=None,  # the API takes keys, not OAuth
            # No validator badge: it would send the document to validator.swagger.io.
            swagger_ui_parameters={"validatorUrl": None, **(app.swagger_ui_parameters or {})},
        )
        html = page.body.decode()
        return HTMLResponse(html, headers={"Content-Security-Policy": docs_csp(html), "X-Frame-Options": "DENY", "Cache-Control": "no-cache"})
