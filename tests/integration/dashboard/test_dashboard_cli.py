"""`make dashboard-up` / `dashboard-down` and `vramkit monitor --prometheus` as a person runs them: a
background process that answers, /metrics without a GPU, and nothing left behind after the stop."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

from vramkit.adapters import nvml

from .conftest import REPO, free_port


def vramkit(*args: str, env: dict | None = None, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vramkit", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def no_gpu_here() -> bool:
    nvml.reset()
    return nvml.read_snapshot().status in ("no_nvml", "no_gpu")


def test_up_serves_metrics_and_down_leaves_nothing(state_dir):
    port = free_port()
    up = vramkit("dashboard", "--background", "--port", str(port), "--json")
    assert up.returncode == 0, up.stderr
    info = __import__("json").loads(up.stdout)
    pid = info["pid"]
    try:
        assert json.loads((state_dir / "dashboard.pid").read_text())["pid"] == pid
        assert oct((state_dir / "dashboard.log").stat().st_mode & 0o777) == "0o600"
        r = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
        names = {s.name for f in text_string_to_metric_families(r.text) for s in f.samples}
        assert "vramkit_gpu_up" in names
        if no_gpu_here():
            assert "vramkit_gpu_up 0.0" in r.text and "Traceback" not in r.text
        again = vramkit("dashboard", "--background", "--port", str(port))
        assert again.returncode == 0 and "already running" in again.stdout
    finally:
        down = vramkit("dashboard", "--stop")
    assert down.returncode == 0 and f"pid {pid}" in down.stdout
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert list(state_dir.iterdir()) == []                   # no pid file, no log
    assert vramkit("dashboard", "--stop").stdout.strip() == "dashboard was not running"


def test_port_in_use_is_one_line_and_starts_nothing(state_dir):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        out = vramkit("dashboard", "--background", "--port", str(port))
    assert out.returncode == 13
    assert out.stderr.startswith("vramkit: ") and "in use" in out.stderr and "Traceback" not in out.stderr
    assert not (state_dir / "dashboard.pid").exists()


def test_api_key_guards_every_route_background(state_dir):
    port = free_port()
    key = "k-" + os.urandom(6).hex()
    up = vramkit("dashboard", "--background", "--port", str(port), env={"VRAMKIT_DASHBOARD_API_KEY": key})
    assert up.returncode == 0, up.stderr
    try:
        base = f"http://127.0.0.1:{port}"
        # the key is not on the background process's command line (ps shows that to every user)
        pid = json.loads((state_dir / "dashboard.pid").read_text())["pid"]
        assert key not in " ".join(psutil.Process(pid).cmdline())
        for path in ("/", "/health", "/metrics", "/api/plan?preset=optimized", "/api/live", "/api/bench",
                     "/static/app.js"):
            assert httpx.get(base + path, timeout=10).status_code == 401, path
            assert httpx.get(base + path, headers={"X-API-Key": key}, timeout=10).status_code == 200, path
        assert httpx.get(base + "/metrics", headers={"Authorization": f"Bearer {key}"}, timeout=10).status_code == 200
        assert httpx.get(base + "/metrics", headers={"X-API-Key": key + "x"}, timeout=10).status_code == 401
    finally:
        vramkit("dashboard", "--stop")


def test_monitor_prometheus_headless(state_dir):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "vramkit", "monitor", "--prometheus", str(port), "--duration", "20"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        text = None
        while time.monotonic() < deadline and text is None:
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)
                text = r.text if r.status_code == 200 else None
            except httpx.HTTPError:
                time.sleep(0.2)
        assert text is not None, proc.stderr.read() if proc.poll() is not None else "no answer"
        fams = {f.name: f for f in text_string_to_metric_families(text)}
        assert "vramkit_gpu_up" in fams
        if no_gpu_here():
            assert [s.value for s in fams["vramkit_gpu_up"].samples] == [0.0]
        assert "python_gc" not in text and "process_cpu" not in text     # the card only
    finally:
        proc.terminate()
        proc.wait(10)
    assert proc.returncode in (0, -15)
    assert "Traceback" not in proc.stderr.read()


def test_plan_api_errors_are_one_line_json(dashboard_cli):
    url = dashboard_cli()
    r = httpx.get(url + "/api/plan", params={"preset": "nope"}, timeout=10)
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["message"] == "unknown preset 'nope'" and err["exit_code"] == 64
    r = httpx.get(url + "/api/plan", params={"kv_dtype": "fp3"}, timeout=10)
    assert r.status_code == 400 and "--kv-dtype" in r.json()["error"]["message"]
    r = httpx.get(url + "/api/plan", params={"bogus": "1"}, timeout=10)
    assert r.status_code == 400 and "unknown plan field" in r.json()["error"]["message"]
    if no_gpu_here():
        r = httpx.get(url + "/api/plan", params={"gpu": "auto"}, timeout=10)
        assert r.status_code == 400 and r.json()["error"]["exit_code"] == 11


def test_monitor_prometheus_on_a_busy_port_is_one_line():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        out = vramkit("monitor", "--prometheus", str(s.getsockname()[1]), "--duration", "1")
    assert out.returncode == 13
    assert out.stderr.startswith("vramkit: cannot serve on") and "Traceback" not in out.stderr
