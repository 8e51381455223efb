"""The dashboard's HTTP app: one static page (vramkit/dashboard/static, no build step, no CDN) and the
JSON it draws, plus Prometheus /metrics.

Routes: /  /static/*  /api/meta  /api/catalog  /api/plan?<fields>  /api/live  /api/server  /api/bench
/metrics  /health. With an API key set (VRAMKIT_DASHBOARD_API_KEY or --api-key) every route needs it:
header X-API-Key or Authorization: Bearer, or `?key=` once in the address (the answer then sets an
HttpOnly cookie so the page's own requests carry it).

Issue 20 item 4: the Host header must name this machine when it listens on loopback, as on the embed
service (a page that rebinds its DNS name to 127.0.0.1 sends its own name: 403); /api/plan is rate-limited
per client (`PLAN_RATE_PER_S`, burst `PLAN_BURST`: 429), and its inputs are bounded (planning.py).
"""
from __future__ import annotations

import asyncio
import hmac
import time
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from vramkit.adapters.http_server import LOOPBACK_NAMES, host_ok
from vramkit.dashboard.sources import LiveSource
from vramkit.errors import Exit, VramkitError

STATIC_DIR = Path(__file__).resolve().parent / "static"
COOKIE = "vramkit_dashboard_key"
ENV_API_KEY = "VRAMKIT_DASHBOARD_API_KEY"
HISTORY_SAMPLE_S = 2.0     # the page polls at this cadence too; the monitor measured 0.35 % of a core at 4 reads/s
PLAN_RATE_PER_S = 4.0      # plans per second per client, sustained (a plan is 10-100 ms of a core)
PLAN_BURST = 20            # the page plans on every change of the form: a burst of edits passes


class RateLimit:
    """A token bucket per client address: `take(who)` is False when the client is over its rate."""

    def __init__(self, per_s: float, burst: int):
        self.per_s, self.burst = per_s, burst
        self.buckets: dict[str, tuple[float, float]] = {}   # who -> (tokens, last time)

    def take(self, who: str) -> bool:
        now = time.monotonic()
        tokens, last = self.buckets.get(who, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - last) * self.per_s)
        if len(self.buckets) > 10_000:                       # bounded memory
            self.buckets.clear()
        if tokens < 1.0:
            self.buckets[who] = (tokens, now)
            return False
        self.buckets[who] = (tokens - 1.0, now)
        return True


def _given_key(request: Request) -> str:
    given = request.headers.get("x-api-key", "")
    if not given:
        auth = request.headers.get("authorization", "")
        given = auth[7:] if auth[:7].lower() == "bearer " else ""
    return given or request.query_params.get("key", "") or request.cookies.get(COOKIE, "")


async def _sample(source: LiveSource, every_s: float) -> None:
    """The live card's history in the background; stops sampling when there is no GPU to read."""
    while True:
        live = await asyncio.to_thread(source.live)
        if live["snapshot"]["status"] in ("no_nvml", "no_gpu"):
            return
        await asyncio.sleep(every_s)


def _error(err: VramkitError, status: int = 400) -> JSONResponse:
    return JSONResponse({"error": {"message": err.what, "todo": err.todo, "exit_code": int(err.code)}},
                        status_code=status)


def create_app(source: LiveSource | None = None, api_key: str = "", sample_s: float = HISTORY_SAMPLE_S,
               host_names: set[str] | frozenset[str] | None = LOOPBACK_NAMES,
               plan_rate: RateLimit | None = None) -> FastAPI:
    """`sample_s`: how often the live card is sampled for its history while the dashboard runs (0 = only
    when the page asks), so a page opened later still shows the last minutes. `host_names`: the Host
    header names answered (None = any: it listens beyond loopback, where the key guards)."""
    source = source or LiveSource()
    key = api_key.encode()
    names = set(host_names) if host_names is not None else None
    plan_limit = plan_rate or RateLimit(PLAN_RATE_PER_S, PLAN_BURST)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        task = asyncio.create_task(_sample(source, sample_s)) if sample_s > 0 and source.mode == "live" else None
        yield
        if task:
            task.cancel()

    app = FastAPI(title="vramkit dashboard", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)

    @app.middleware("http")
    async def require_key(request: Request, call_next):
        if not host_ok(names, request.headers.get("host", "")):
            shown = request.headers.get("host", "")[:80]
            return JSONResponse({"error": {"message": f"Host {shown!r} is not a name this dashboard answers to "
                                                      "(it listens on loopback)",
                                           "todo": "open it as http://127.0.0.1:PORT/, or list the name in "
                                                   "VRAMKIT_DASHBOARD_ALLOWED_HOSTS"}}, status_code=403)
        if not key:
            return await call_next(request)
        given = _given_key(request)
        if not hmac.compare_digest(given.encode(), key):
            return JSONResponse({"error": {"message": "missing or wrong API key",
                                           "todo": "send X-API-Key (or Authorization: Bearer), or open /?key=KEY"}},
                                status_code=401)
        response = await call_next(request)
        if request.query_params.get("key"):
            response.set_cookie(COOKIE, given, httponly=True, samesite="strict")
        return response

    async def run(fn, *args):
        """The sources block (NVML, HTTP, the planner): off the event loop."""
        try:
            return JSONResponse(await asyncio.to_thread(fn, *args))
        except VramkitError as err:
            return _error(err)
        except Exception as err:        # noqa: BLE001 - one line to the page, never a traceback
            return _error(VramkitError(f"{type(err).__name__}: {err}", "report it with the request that caused it",
                                       Exit.BAD_INPUT), status=500)

    @app.get("/")
    async def index():
        return FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-store"})

    @app.get("/health")
    async def health():
        return {"ok": True, "mode": source.mode}

    @app.get("/api/meta")
    async def meta():
        return await run(source.meta)

    @app.get("/api/catalog")
    async def catalog_():
        return await run(source.catalog)

    @app.get("/api/plan")
    async def plan(request: Request):
        if not plan_limit.take(request.client.host if request.client else "?"):
            return JSONResponse({"error": {"message": f"more than {PLAN_RATE_PER_S:g} plans a second from your "
                                                      "address", "todo": "wait a moment"}},
                                status_code=429, headers={"Retry-After": "1"})
        raw = {k: v for k, v in request.query_params.items() if k != "key"}
        return await run(source.plan, raw)

    @app.get("/api/live")
    async def live():
        return await run(source.live)

    @app.get("/api/server")
    async def server():
        return await run(source.server)

    @app.get("/api/bench")
    async def bench():
        return await run(source.bench)

    @app.get("/metrics")
    async def metrics():
        if hasattr(source, "metrics_text"):            # a replay serves what was captured
            try:
                text = await asyncio.to_thread(source.metrics_text)
            except VramkitError as err:
                return _error(err)
            return PlainTextResponse(text, media_type=CONTENT_TYPE_LATEST)
        body = await asyncio.to_thread(lambda: generate_latest(source.metrics_registry()))
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    return app
