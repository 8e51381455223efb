"""What the dashboard costs (issue 13), measured over HTTP on loopback.

Starts `vramkit dashboard` as its own process (as `make dashboard` does), then measures with one
keep-alive connection: the page's weight (every byte the browser loads: HTML, CSS, JS), and the latency
of each route the page polls or a scraper hits (p50 / p95 of N sequential requests): /api/plan for the
optimized preset, /api/live (one NVML reading), /api/server, /api/bench, /metrics; and the CPU the
dashboard process used while the page polls /api/live every 2 s for 60 s (the page's own cadence).
Writes benchmarks/results/dashboard.json (device, versions, date, load average: the machine is shared).
Run: .venv/bin/python benchmarks/dashboard_bench.py   (about 2 minutes)
"""
from __future__ import annotations

import http.client
import json
import os
import platform
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vramkit import __version__
from vramkit.adapters import nvml
from vramkit.core.bench_stats import percentile

RESULTS = ROOT / "benchmarks" / "results"
N = 50
ROUTES = ["/api/plan?preset=optimized", "/api/live", "/api/server", "/api/bench", "/metrics", "/api/catalog"]
PAGE = ["/", "/static/style.css", "/static/app.js"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(conn: http.client.HTTPConnection, path: str) -> tuple[int, bytes, float]:
    t0 = time.perf_counter()
    conn.request("GET", path)
    r = conn.getresponse()
    body = r.read()
    return r.status, body, time.perf_counter() - t0


def main() -> int:
    port = free_port()
    state = Path(os.environ.get("TMPDIR", "/tmp")) / f"dashboard-bench-state-{port}"
    env = {**os.environ, "VRAMKIT_STATE_DIR": str(state)}     # no recorded server: the idle dashboard
    proc = subprocess.Popen([sys.executable, "-m", "vramkit", "dashboard", "--port", str(port)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for _ in range(100):
            try:
                if get(conn, "/health")[0] == 200:
                    break
            except OSError:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                time.sleep(0.1)
        page = {p: len(get(conn, p)[1]) for p in PAGE}
        routes = {}
        for path in ROUTES:
            get(conn, path)                                   # warm (imports, first NVML init)
            times, size, status = [], 0, 0
            for _ in range(N):
                status, body, dt = get(conn, path)
                times.append(dt * 1000)
                size = len(body)
            routes[path] = {"status": status, "bytes": size, "p50_ms": round(percentile(times, 50), 2),
                            "p95_ms": round(percentile(times, 95), 2), "n": N}
        me = psutil.Process(proc.pid)
        cpu0 = me.cpu_times()
        t0 = time.monotonic()
        while time.monotonic() - t0 < 60:                     # the open page: /api/live every 2 s
            get(conn, "/api/live")
            time.sleep(2.0)
        cpu1 = me.cpu_times()
        wall = time.monotonic() - t0
        cpu_pct = 100 * ((cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)) / wall
        rss = me.memory_info().rss
    finally:
        proc.terminate()
        proc.wait(10)
    snap = nvml.read_snapshot(with_processes=False)
    out = {
        "what": "vramkit dashboard: page weight, route latency (loopback, sequential, keep-alive), CPU of an open page",
        "date_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "device": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                   "gpu": snap.status if snap.unavailable is not None else [str(g.name) for g in snap.gpus],
                   "load_avg_1m_at_end": round(os.getloadavg()[0], 2)},
        "versions": {"vramkit": __version__, "python": platform.python_version()},
        "page_bytes": page, "page_bytes_total": sum(page.values()),
        "routes": routes,
        "open_page_cpu_percent_of_one_core": round(cpu_pct, 2), "open_page_seconds": round(wall, 1),
        "dashboard_rss_bytes": rss,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "dashboard.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
