"""The web page at ``/`` and the render endpoint its downloads use.

GET  /                      the page (static HTML, CSS and JS shipped in this package: no build
                            step, nothing fetched from elsewhere)
GET  /static/{name}         its script and style sheet
POST /v1/documents/render   ``?format=txt|srt|vtt|tsv|json`` with a Document's JSON as the body
                            (as ``response_format=document`` answers it): the file the CLI's
                            writer of that format writes for it

The page is a client of the public API only, so it is also its living example.
"""

from __future__ import annotations

import json
from importlib import resources

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from onespeech.speech.server.errors import ApiError, bad_request

# what the page may load: itself, and media from the file the user picked (blob:)
_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "media-src 'self' blob:; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
_STATIC = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}


def page_routes() -> list[Route]:
    """The page's routes, for :func:`~onespeech.speech.server.app.create_app`."""
    return [
        Route("/", _index, methods=["GET", "HEAD"]),
        Route("/static/{name}", _static, methods=["GET", "HEAD"]),
        Route("/v1/documents/render", _render, methods=["POST"]),
    ]


def _asset(name: str) -> Response:
    media_type = _STATIC.get(name)
    if media_type is None:
        raise ApiError(404, f"no page asset {name!r}; the page has {sorted(_STATIC)}", "not_found")
    data = resources.files("onespeech.speech.server").joinpath("static").joinpath(name).read_bytes()
    return Response(data, media_type=media_type,
                    headers={"Content-Security-Policy": _CSP, "X-Content-Type-Options": "nosniff",
                             "Cache-Control": "no-cache"})


async def _index(request: Request) -> Response:
    return _asset("index.html")


async def _static(request: Request) -> Response:
    return _asset(request.path_params["name"])


async def _render(request: Request) -> Response:
    from onespeech.speech.document import Document
    from onespeech.speech.errors import DocumentFormatError
    from onespeech.speech.server.responses import written
    from onespeech.speech.writers import FORMATS

    fmt = request.query_params.get("format", "")
    if fmt not in FORMATS:
        raise bad_request(f"format={fmt!r}; use one of {list(FORMATS)}", "invalid_format", "format")
    try:
        data = json.loads(await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise bad_request(f"the body is not JSON: {error}", "invalid_document") from None
    if not isinstance(data, dict):
        raise bad_request("the body must be a Document's JSON object (response_format=document)",
                          "invalid_document")
    try:
        document = Document.from_dict(data)
    except DocumentFormatError as error:
        raise bad_request(str(error), "invalid_document") from None
    media_type = "application/json" if fmt == "json" else "text/plain"
    return Response(written(document, fmt), media_type=f"{media_type}; charset=utf-8")
