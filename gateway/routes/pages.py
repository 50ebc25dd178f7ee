"""The pages a browser opens: the dashboard (``/``, gateway/static), the API docs (``/docs``: Swagger UI from the
fastapi-offline package's assets, served by the gateway itself, no CDN) and the OpenAPI schema behind the token."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Depends, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse

from gateway.security import DOCS_CSP, authorize, authorize_page

STATIC = Path(__file__).resolve().parents[1] / "static"
DOCS_ASSETS = "/docs-assets"  # Swagger UI, from the fastapi-offline package (no CDN)

router = APIRouter(include_in_schema=False)


@router.get("/")
async def index() -> FileResponse:
    return FileResponse(STATIC / "index.html", media_type="text/html; charset=utf-8")


@router.get("/openapi.json", dependencies=[Depends(authorize)])
async def openapi(request: Request) -> JSONResponse:
    return JSONResponse(request.app.openapi())


@router.get("/docs", dependencies=[Depends(authorize_page)])
async def docs() -> HTMLResponse:
    return _docs_page()


@router.get("/redoc", dependencies=[Depends(authorize_page)])
async def redoc(request: Request) -> RedirectResponse:
    query = f"?{request.url.query}" if request.url.query else ""
    return RedirectResponse(f"/docs{query}")


def docs_assets() -> Path:
    """Swagger UI as the fastapi-offline package ships it (swagger-ui-bundle.js, swagger-ui.css, favicon.png)."""
    import fastapi_offline

    return Path(fastapi_offline.__file__).resolve().parent / "static"


def _docs_page() -> HTMLResponse:
    """The API docs page: Swagger UI from the gateway's own assets; gateway/static/docs.js fetches
    /openapi.json (with the token when there is one) and renders it."""
    html = f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Forage gateway API</title>
<link rel="icon" href="{DOCS_ASSETS}/favicon.png">
<link rel="stylesheet" href="{DOCS_ASSETS}/swagger-ui.css">
</head>
<body>
<div id="api-docs"><p>Loading the API schema…</p></div>
<script src="{DOCS_ASSETS}/swagger-ui-bundle.js"></script>
<script src="/static/docs.js"></script>
</body>
</html>
"""
    return HTMLResponse(html, headers={"Content-Security-Policy": DOCS_CSP, "Referrer-Policy": "no-referrer",
                                       "Cache-Control": "no-store"})
