"""The HTTP edge of the embed service (issue 10): one guard for every route but `/health`, and
JSON bodies that are bounded while they are read.

- `Guard` is the one FastAPI dependency the routes share (issue 11): the Host header must name this
  machine when the service listens on loopback (a web page that rebinds its DNS name to 127.0.0.1
  sends its own name), then the API key when one is set.
- `read_json` refuses anything but `Content-Type: application/json` (415: a web page can send
  `text/plain` to another origin without asking, never `application/json`) and stops reading at
  the cap (413), from the Content-Length header before any byte, or while streaming without one.

No CORS middleware is installed: browsers get no `Access-Control-Allow-*` header from this service.
"""
from __future__ import annotations

import asyncio
import hmac
from collections.abc import Awaitable
from typing import TypeVar

import orjson
from fastapi import Request
from starlette.requests import ClientDisconnect

from vramkit.adapters.http_server import host_ok
from vramkit.embed.requests import BadRequest

T = TypeVar("T")
BODY_TIMEOUT_S = 30.0     # a body must arrive within this (a slow body held a request slot forever)


class Disconnected(Exception):
    """The client went away before its answer (logged as one rate-limited line, nothing sent)."""


class Guard:
    """`Depends(Guard(...))`: raises BadRequest (403 wrong Host, 401 missing/wrong key)."""

    def __init__(self, api_key: str, host_names: set[str] | None):
        self.api_key = api_key.encode()
        self.host_names = host_names

    def host_ok(self, request: Request) -> bool:
        return host_ok(self.host_names, request.headers.get("host", ""))

    def key_ok(self, request: Request) -> bool:
        if not self.api_key:
            return True
        given = request.headers.get("x-api-key", "")
        if not given:
            auth = request.headers.get("authorization", "")
            given = auth[7:] if auth[:7].lower() == "bearer " else ""
        return hmac.compare_digest(given.encode(), self.api_key)

    async def __call__(self, request: Request) -> None:
        if not self.host_ok(request):
            shown = request.headers.get("host", "")[:80]
            raise BadRequest(403, f"Host {shown!r} is not a name this service answers to (it "
                                  "listens on loopback): call it as http://127.0.0.1:PORT, or "
                                  "the operator lists the name in VRAMKIT_EMBED_ALLOWED_HOSTS")
        if not self.key_ok(request):
            raise BadRequest(401, "missing or wrong API key: send it in the X-API-Key header "
                                  "(or Authorization: Bearer)")


async def read_json(request: Request, max_bytes: int, timeout_s: float = BODY_TIMEOUT_S):
    """The parsed JSON body, or BadRequest 415 / 413 / 400 / 408 before reading more than `max_bytes`
    or waiting longer than `timeout_s`; Disconnected when the client goes away while sending it."""
    ctype = request.headers.get("content-type", "")
    if ctype.split(";", 1)[0].strip().lower() != "application/json":
        raise BadRequest(415, f"the body must be JSON sent with Content-Type: application/json "
                              f"(got {ctype[:60] or 'none'!r})")
    length = request.headers.get("content-length")
    if length is not None:
        try:
            declared = int(length)
        except ValueError:
            raise BadRequest(400, f"Content-Length {length[:30]!r} is not a number") from None
        if declared > max_bytes:
            raise BadRequest(413, f"the body is {declared} bytes; the limit is {max_bytes}: "
                                  "split the texts into smaller requests")
    buf = bytearray()
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                buf += chunk
                if len(buf) > max_bytes:
                    raise BadRequest(413, f"the body is over {max_bytes} bytes: split the texts into "
                                          "smaller requests")
    except ClientDisconnect:
        raise Disconnected(f"after {len(buf)} bytes of its body") from None
    except TimeoutError:
        raise BadRequest(408, f"the body did not arrive within {timeout_s:g} s ({len(buf)} bytes came): "
                              "send it at once") from None
    try:
        return orjson.loads(buf)
    except orjson.JSONDecodeError:
        raise BadRequest(400, "the body is not valid JSON: send e.g. "
                              "{\"texts\": [\"def f(): ...\"]}") from None


async def _disconnect(request: Request) -> None:
    """Returns when the client goes away (the body was read: the next message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """`work`'s result; if the client disconnects first, `work` is cancelled (its queued texts leave the
    encoder's queue unencoded: issue 20 item 5) and Disconnected is raised."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnect(request))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in (task, gone):
            if not t.done():
                t.cancel()
    if task.done() and not task.cancelled():
        return task.result()
    raise Disconnected("while its texts waited for the encoder; they were dropped")
