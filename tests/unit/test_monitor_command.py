"""`vramkit monitor` end to end through vramkit.cli.main: --once --json, the log, a lost GPU."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import nvml_scenarios as sc
import pytest
from nvml_scenarios import run_cli

from vramkit.adapters import nvml

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _fresh_nvml():
    nvml.reset()
    yield
    nvml.reset()


def test_once_json_on_this_host_without_gpu_for_real():
    """No fake: a separate interpreter, the real nvidia-ml-py, this machine (no GPU)."""
    if nvml.read_snapshot().status == "ok":
        pytest.skip("this host has a GPU: the no-GPU answer cannot be checked for real here")
    out = subprocess.run([sys.executable, "-m", "vramkit", "monitor", "--once", "--json"],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    if "No module named 'vramkit.commands" in out.stderr:
        # another part's command module is listed in cli.py but not written yet: same real run,
        # through run_cli, which leaves the missing module out
        code = ("import sys; sys.path.insert(0, 'tests/unit'); from nvml_scenarios import run_cli; "
                "sys.exit(run_cli(['monitor', '--once', '--json']))")
        out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                             timeout=60)
    assert out.returncode == 2, out.stderr
    data = json.loads(out.stdout)
    assert data["status"] in ("no_nvml", "no_gpu") and data["gpus"] == []
    assert data["exit_code"] == 2 and data["reason"]
    assert "Traceback" not in out.stderr


def test_once_json_16gb_card(monkeypatch, capsys):
    sc.card_16gb_foreign_6gib().install(monkeypatch)
    assert run_cli(["monitor", "--once", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    (g,) = data["gpus"]
    assert data["status"] == "ok" and g["in_use_percent"] == pytest.approx(40.8, abs=0.05)
    assert g["processes"][0] == {"pid": 4242, "used_bytes": 6 << 30, "name": "python3", "kind": "compute"}
    assert g["reserved_bytes"] == 331 << 20 and g["memory_api"] == "v2"


def test_once_driver_missing_one_line_exit_2(monkeypatch, capsys):
    sc.driver_missing().install(monkeypatch)
    assert run_cli(["monitor", "--once"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "NVML not available" in err and "->" in err


def test_once_gpu_lost_exit_3(monkeypatch, capsys):
    fake = sc.two_gpus().install(monkeypatch)
    fake.lose(1)
    assert run_cli(["monitor", "--once", "--json"]) == 3
    data = json.loads(capsys.readouterr().out)
    assert data["status"] == "gpu_lost" and data["gpus"][1]["error"].endswith("GPU is lost")
    assert data["gpus"][1]["in_use_bytes"] is None       # not 0


def test_live_run_gpu_lost_mid_loop_logs_and_exits_3(monkeypatch, capsys, tmp_path):
    fake = sc.two_gpus().install(monkeypatch)
    fake.lose(0, after_counts=2)                 # readings 1-2 fine, then GPU 0 is lost
    log = tmp_path / "samples.jsonl"
    code = run_cli(["monitor", "--interval", "0.02", "--duration", "0.15", "--log", str(log),
                    "--json", "--cooldown", "0"])
    assert code == 3
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert len(lines) >= 4
    assert [x["status"] for x in lines[:2]] == ["ok", "ok"] and lines[-1]["status"] == "gpu_lost"
    assert lines[-1]["gpus"][0]["in_use_bytes"] is None and lines[-1]["gpus"][0]["status"] == "lost"
    assert lines[-1]["gpus"][1]["total_bytes"] == 24564 << 20
    out = capsys.readouterr()
    summary = json.loads(out.out.strip().splitlines()[-1])["summary"]
    assert summary["exit_code"] == 3 and summary["gpus"][0]["missing_samples"] >= 1
    assert summary["gpus"][0]["alerts"] == 1     # 85 % crossed once, not once per sample
    assert out.err.count("ALERT GPU 0 above 85 %") == 1


def test_log_csv_rows(monkeypatch, tmp_path):
    sc.two_gpus().install(monkeypatch)
    log = tmp_path / "vram.csv"
    assert run_cli(["monitor", "--interval", "0.02", "--duration", "0.05", "--log", str(log),
                    "--json"]) == 0
    rows = list(csv.DictReader(log.open()))
    assert rows and set(r["gpu"] for r in rows) == {"0", "1"}
    r0 = next(r for r in rows if r["gpu"] == "0")
    assert int(r0["total_bytes"]) == 16376 << 20 and r0["util_percent"] == "97"
    assert float(r0["power_w"]) == 280.0 and r0["temperature_c"] == "71"
    assert int(r0["in_use_bytes"]) == (14 << 30) + (331 << 20)
    assert list(rows[0]) == ["time", "time_s", "gpu", "in_use_bytes", "nvml_used_bytes", "total_bytes",
                             "util_percent", "temperature_c", "power_w", "status"]


def test_thresholds_from_environment(monkeypatch, capsys):
    sc.card_16gb_foreign_6gib().install(monkeypatch)        # 40.8 % in use
    monkeypatch.setenv("VRAMKIT_ALERT_THRESHOLDS", "30,40,50")
    assert run_cli(["monitor", "--interval", "0.02", "--duration", "0.01", "--json"]) == 0
    err = capsys.readouterr().err
    assert "above 30 %" in err and "above 40 %" in err and "above 50 %" not in err


def test_bad_thresholds_are_one_line(monkeypatch, capsys):
    monkeypatch.setenv("VRAMKIT_ALERT_THRESHOLDS", "ninety")
    assert run_cli(["monitor", "--once"]) == 64
    assert "VRAMKIT_ALERT_THRESHOLDS" in capsys.readouterr().err


def test_live_with_no_driver_exits_2(monkeypatch, capsys):
    sc.driver_not_loaded().install(monkeypatch)
    assert run_cli(["monitor", "--duration", "1"]) == 2
    assert "Driver Not Loaded" in capsys.readouterr().err


def test_steady_cadence_in_a_real_loop(monkeypatch, tmp_path):
    sc.card_16gb_foreign_6gib().install(monkeypatch)
    log = tmp_path / "s.jsonl"
    assert run_cli(["monitor", "--interval", "0.05", "--duration", "0.5", "--log", str(log), "--json"]) == 0
    times = [json.loads(x)["time_s"] for x in log.read_text().splitlines()]
    assert 9 <= len(times) <= 12
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert max(gaps) < 0.05 + 0.03          # log times are rounded to ms; sleeps are not exact


def test_piped_output_is_one_plain_line_per_gpu(monkeypatch, capsys):
    sc.two_gpus().install(monkeypatch)
    assert run_cli(["monitor", "--interval", "0.02", "--duration", "0.01"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out
    assert [line.split("  ")[1] for line in out.splitlines()[:2]] == ["GPU 0", "GPU 1"]
    assert "peak" in out                         # the session table at the end
