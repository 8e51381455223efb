"""--capture on one machine, --replay on another: the capture holds every panel's JSON with the device,
versions and date, and the replayed page says whose capture it shows."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from vramkit.dashboard.capture import CAPTURE_FILES, CAPTURE_SCHEMA, ReplaySource
from vramkit.dashboard.sources import LiveSource
from vramkit.launch import reference

from .conftest import REPO, chromium_dom
from .test_dashboard_browser import Dom


def capture(tmp_path: Path, *extra: str, env: dict | None = None) -> tuple[subprocess.CompletedProcess, Path]:
    import os
    out_dir = tmp_path / "cap"
    out = subprocess.run([sys.executable, "-m", "vramkit", "dashboard", "--capture", str(out_dir), "--samples", "2",
                          *extra], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={**os.environ, **(env or {})})
    return out, out_dir


def test_capture_writes_every_panel_with_device_versions_and_date(tmp_path, state_dir):
    out, d = capture(tmp_path)
    assert out.returncode == 0, out.stderr
    assert f"vramkit dashboard --replay {d}" in out.stdout
    assert sorted(p.name for p in d.iterdir()) == sorted(CAPTURE_FILES)
    meta = json.loads((d / "meta.json").read_text())
    assert meta["schema"] == CAPTURE_SCHEMA
    assert meta["captured_at_utc"] and meta["device"] and meta["versions"]["vramkit"]
    assert meta["versions"]["sglang_pinned"] == "0.5.15.post1"
    live = json.loads((d / "live.json").read_text())
    assert len(live["history"]) == 2                      # --samples 2
    plan = json.loads((d / "plan.json").read_text())
    assert plan["preset"] == "optimized" and plan["memory"]["gpu"]
    assert "vramkit_gpu_" in (d / "metrics.txt").read_text()
    bench = json.loads((d / "bench.json").read_text())
    assert any(r["label"] == "optimized-16g" for r in bench["runs"])


def test_replayed_page_says_whose_capture_it_shows(tmp_path, state_dir, dashboard_cli):
    out, d = capture(tmp_path)
    assert out.returncode == 0, out.stderr
    meta = json.loads((d / "meta.json").read_text())
    url = dashboard_cli("--replay", str(d))
    # the explorer's host RAM given (the reference desktop's): what this busy machine had free at the capture must
    # not decide the verdict
    dom = Dom(chromium_dom(url + f"/?host_ram_gib={reference.HOST_RAM_GIB:g}", tmp_path))
    banner = dom.text("replay")
    assert banner.startswith(f"replay of a capture from {meta['device']}, {meta['captured_at_utc']}")
    for panel in ("plan", "live", "server", "bench"):
        assert dom.state(panel) == "ready", panel
    assert dom.text("plan-verdict") == "FITS"


def test_replay_of_a_real_runs_server_draws_predicted_vs_actual(tmp_path, state_dir, dashboard_cli):
    """A capture assembled from committed GPU-host data (the /server_info SGLang returned on the H100 held
    to 16 GiB, and that configuration's log figures: no adapter line, the embeddings stayed on the GPU), through the same prediction code as a live capture:
    the page draws the predicted-vs-actual table from it."""
    out, d = capture(tmp_path)
    assert out.returncode == 0, out.stderr
    bench = json.loads((REPO / "benchmarks/results/gpu/optimized-16g.json").read_text())
    calib = json.loads((REPO / "benchmarks/calibration/opt-16g.json").read_text())
    record = {"name": "vramkit-optimized", "preset": "optimized", "model": calib["model"], "port": 30000}
    server = {"url": "http://127.0.0.1:30000", "running": True, "record": record, "server_info": bench["server"],
              "loads": None, "sglang_memory": {}, "sglang_metrics": {}, "log_figures": calib["measured"]["log_figures_gib"],
              "nvml": {"bytes": calib["measured"]["peak_vram_bytes"], "how": "NVML peak (calibration run)"}}

    class Recorded(LiveSource):
        pass
    server.update(Recorded().predict_running(record, bench["server"], None, server["log_figures"],
                                             _no_gpu_snapshot(), server["nvml"]))
    (d / "server.json").write_text(json.dumps(server))
    assert ReplaySource(d).server()["rows"]
    url = dashboard_cli("--replay", str(d))
    dom = Dom(chromium_dom(url + "/?panel=server", tmp_path))
    assert dom.state("server") == "ready"
    text = dom.text("server-out")
    assert "predicted (vramkit planner) vs actual" in text
    assert "30,990 tokens" in text and "30,987 tokens" in text         # KV pool: planner vs SGLang


def _no_gpu_snapshot():
    from vramkit.core.gpu.snapshot import NotAvailable, Snapshot
    return Snapshot(time_s=0.0, unavailable=NotAvailable("test"))


def test_the_device_label_says_what_the_numbers_stand_for(tmp_path, state_dir):
    out, d = capture(tmp_path, env={"VRAMKIT_DEVICE_LABEL": "H100 80GB HBM3, memory emulated at 16 GB (ballast.py)"})
    assert out.returncode == 0, out.stderr
    meta = json.loads((d / "meta.json").read_text())
    assert meta["device"] == "H100 80GB HBM3, memory emulated at 16 GB (ballast.py)"
    assert isinstance(meta["gpu_names"], list)


def test_replay_of_a_folder_that_is_not_a_capture_is_one_line(tmp_path):
    out = subprocess.run([sys.executable, "-m", "vramkit", "dashboard", "--replay", str(tmp_path), "--background"],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 65
    assert out.stderr.startswith("vramkit: ") and "not a dashboard capture" in out.stderr
    assert "Traceback" not in out.stderr


def test_capture_and_replay_together_is_bad_input(tmp_path):
    out = subprocess.run([sys.executable, "-m", "vramkit", "dashboard", "--capture", str(tmp_path / "a"),
                          "--replay", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 64 and "Traceback" not in out.stderr
    assert not (tmp_path / "a").exists()


def test_capture_works_where_prometheus_client_is_missing(tmp_path, state_dir):
    """The GPU host's Python may lack prometheus-client (the SGLang bundle does not ship it)."""
    code = ("import sys; sys.modules['prometheus_client'] = None; from vramkit.cli import main; "
            f"sys.exit(main(['dashboard', '--capture', {str(tmp_path / 'cap')!r}, '--samples', '1']))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "cap" / "metrics.txt").read_text().startswith("# prometheus-client was not installed")
    assert json.loads((tmp_path / "cap" / "meta.json").read_text())["schema"] == CAPTURE_SCHEMA
