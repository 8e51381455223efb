"""`vramkit vram-safe` exit codes through vramkit.cli.main, the monitoring-plugin convention:
0 OK, 1 WARNING (within 3 % under the threshold), 2 CRITICAL (over it), 3 UNKNOWN, 64 bad arguments.

On main before issue 10 it was 0 under / 1 over / 2 cannot tell, and argparse's own 2 for a typo, so a
script could not tell over-budget from cannot-tell from a typo."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nvml_scenarios as sc
import pytest
from nvml_scenarios import run_cli

from vramkit.adapters import nvml, state
from vramkit.core.gpu import vram

GiB, MiB = sc.GiB, sc.MiB


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    monkeypatch.setenv("VRAMKIT_STATE_DIR", str(tmp_path / "state"))   # no running preset
    nvml.reset()
    yield
    nvml.reset()


def safe(argv, capsys):
    code = run_cli(["vram-safe", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_under_default_75_percent_exit_0(monkeypatch, capsys):
    sc.card_16gb_foreign_6gib().install(monkeypatch)          # 6.52 GiB of 15.99 GiB in use
    code, out, _ = safe([], capsys)
    assert code == 0
    assert out.startswith("vram-safe: OK: GPU 0 6.52 GiB <= 11.99 GiB of 15.99 GiB")
    assert "75 % (default" in out and "driver-reserved memory included" in out
    assert out.count("\n") == 1


def test_over_a_gib_threshold_is_critical_exit_2(monkeypatch, capsys):
    sc.card_16gb_foreign_6gib().install(monkeypatch)
    code, out, _ = safe(["--threshold", "6GiB"], capsys)
    assert code == 2 and out.startswith("vram-safe: CRITICAL: GPU 0 6.52 GiB > 6.00 GiB")


def test_within_3_percent_under_the_threshold_is_warning_exit_1(monkeypatch, capsys):
    sc.card_16gb_foreign_6gib().install(monkeypatch)      # 6.52 GiB in use
    code, out, _ = safe(["--threshold", "6.6GiB"], capsys)  # warn line 6.40 GiB
    assert code == 1 and out.startswith("vram-safe: WARNING: GPU 0 6.52 GiB > warn line 6.40 GiB, <= 6.60 GiB")
    code, out, _ = safe(["--threshold", "6.6GiB", "--json"], capsys)
    data = json.loads(out)
    assert code == 1 and data["verdict"] == "warning" and abs(data["gpus"][0]["warn_bytes"] - 6.6 * GiB * 0.97) < 2
    assert safe(["--threshold", "6.8GiB"], capsys)[0] == 0    # warn line 6.60 GiB: OK


def test_counts_driver_reserved_memory(monkeypatch, capsys):
    # nvidia-smi's used (6.20 GiB) is under 6.4 GiB; total - free (6.52 GiB) is over: the guard says over
    sc.card_16gb_foreign_6gib().install(monkeypatch)
    code, out, _ = safe(["--threshold", "6.4GiB", "--json"], capsys)
    data = json.loads(out)
    assert code == 2 and data["verdict"] == "critical"
    g = data["gpus"][0]
    assert g["nvml_used_bytes"] < g["limit_bytes"] < g["in_use_bytes"]
    assert "driver-reserved" in data["reads"]


def test_percent_threshold(monkeypatch, capsys):
    sc.card_16gb_foreign_6gib().install(monkeypatch)       # 40.8 %
    assert safe(["--threshold", "40%"], capsys)[0] == 2
    assert safe(["--threshold", "41%"], capsys)[0] == 1      # 40.8 % > 97 % of 41 %
    assert safe(["--threshold", "43%"], capsys)[0] == 0


def test_at_the_threshold_is_not_critical(monkeypatch, capsys):
    fake = sc.card_16gb_foreign_6gib().install(monkeypatch)
    g = fake.gpus[0]
    in_use = g.total - g.free
    assert safe(["--threshold", f"{in_use}B"], capsys)[0] == 1
    assert safe(["--threshold", f"{in_use - 1}B"], capsys)[0] == 2
    assert safe(["--threshold", f"{int(in_use / 0.97) + 2}B"], capsys)[0] == 0


@pytest.mark.parametrize("scenario", [sc.driver_missing, sc.driver_not_loaded])
def test_no_driver_is_unknown_exit_3(monkeypatch, capsys, scenario):
    scenario().install(monkeypatch)
    code, out, _ = safe([], capsys)
    assert code == 3 and out.startswith("vram-safe: UNKNOWN: NVML did not start")
    code, out, _ = safe(["--json"], capsys)
    assert code == 3 and json.loads(out)["verdict"] == "unknown"


def test_no_gpu_is_unknown_exit_3(monkeypatch, capsys):
    sc.FakeNvml([]).install(monkeypatch)
    code, out, _ = safe([], capsys)
    assert code == 3 and "sees no GPU" in out


def test_two_gpus_all_and_each(monkeypatch, capsys):
    sc.two_gpus().install(monkeypatch)        # GPU 0 at 89.6 %, GPU 1 at 1.6 %
    assert safe([], capsys)[0] == 2
    assert safe(["--gpu", "1"], capsys)[0] == 0
    code, out, _ = safe(["--gpu", "0", "--json"], capsys)
    assert code == 2 and [g["index"] for g in json.loads(out)["gpus"]] == [0]
    code, out, _ = safe(["--gpu", "7"], capsys)
    assert code == 3 and "there is no GPU 7" in out


def test_lost_gpu_is_unknown_unless_another_is_over(monkeypatch, capsys):
    fake = sc.two_gpus().install(monkeypatch)
    fake.lose(1)
    code, out, _ = safe(["--gpu", "1"], capsys)
    assert code == 3 and "GPU is lost" in out
    assert safe([], capsys)[0] == 2              # GPU 0 is over for sure: that is the answer
    # GPU 0 only near its line: the unreadable GPU may be over, so the host is UNKNOWN, not WARNING
    assert safe(["--threshold", "14.5GiB"], capsys)[0] == 3     # GPU 0: 14.32 GiB, warn line 14.07 GiB
    assert safe(["--threshold", "14.5GiB", "--gpu", "0"], capsys)[0] == 1


def test_default_is_the_running_presets_budget(monkeypatch, capsys):
    sc.card_16gb_foreign_6gib().install(monkeypatch)       # 6.52 GiB in use
    state.write_running("sglang", {"name": "sglang", "preset": "qwen14b-16gb",
                                   "vram_budget_bytes": 6 * GiB, "gpu_indices": [0]})
    code, out, _ = safe([], capsys)
    assert code == 2 and "budget of running preset qwen14b-16gb" in out
    assert safe(["--threshold", "75%"], capsys)[0] == 0     # the flag wins


def test_bad_threshold_is_bad_input(monkeypatch, capsys):
    sc.card_16gb_foreign_6gib().install(monkeypatch)
    for bad in ("12", "twelve", "0%", "150%"):
        code, _, err = safe(["--threshold", bad], capsys)
        assert code == 64 and err.startswith("vramkit: --threshold")


def test_budgets_add_up_on_a_shared_gpu():
    th = vram.budget_thresholds([
        {"preset": "a", "vram_budget_bytes": 4 * GiB, "gpu_indices": [0]},
        {"preset": "b", "vram_budget_bytes": 2 * GiB, "gpu_indices": [0, 1]},
        {"preset": "c"},                                    # no budget recorded
    ])
    assert th[0].limit_bytes == 6 * GiB and th[1].limit_bytes == 2 * GiB
    assert "a+b" in th[0].source


REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("argv", [["--treshold", "5%"], ["--threshold", "-5%"], ["--threshold"], ["--gpu"],
                                  ["--jsn"]])
def test_bad_arguments_exit_64_in_one_line_for_real(argv):
    """The real command line, as a script calls it: argparse's own errors exited 2 (= CRITICAL) before."""
    r = subprocess.run([sys.executable, "-m", "vramkit", "vram-safe", *argv], cwd=REPO, capture_output=True,
                       text=True, timeout=60, env={"VRAMKIT_STATE_DIR": "/nonexistent", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 64, r.stderr
    assert r.stdout == "" and len(r.stderr.splitlines()) == 1 and r.stderr.startswith("vramkit: ")
    assert r.stderr.rstrip().endswith(" -> see `vramkit vram-safe --help`") and "Traceback" not in r.stderr


def test_warn_line_sits_above_a_preset_running_as_planned():
    """A preset at its measured peak must read OK against the budget the launcher records (in use before +
    1.05 x planned peak): the optimized preset measured 14.33 GiB against a 14.28 GiB plan."""
    data = json.loads((REPO / "benchmarks/calibration/opt-f085-16g.json").read_text())
    measured = data["measured"]["peak_vram_bytes"]
    planned = int(14.28 * GiB)
    for before in (0, 480 * MiB):
        budget = before + int(planned * 1.05)
        assert before + measured <= vram.warn_line(budget) < budget


@pytest.mark.parametrize("record", [{"vram_budget_bytes": 5 * GiB, "gpu_indices": 3},
                                    {"vram_budget_bytes": 5 * GiB, "gpu_indices": [[1]]},
                                    {"vram_budget_bytes": float("nan")}, {"vram_budget_bytes": "14GiB"},
                                    {"vram_budget_bytes": True}])
def test_a_malformed_run_record_is_one_line_and_exit_65(record, monkeypatch, capsys):
    """Issue 20 item 7: a malformed run-state file made vram-safe exit 1 with a traceback, and the start
    targets read 1 as WARNING, a pass."""
    sc.card_16gb_foreign_6gib().install(monkeypatch)
    state.write_running("vramkit-optimized", {"name": "vramkit-optimized", **record})
    code, out, err = safe([], capsys)
    assert code == 65 and out == "" and len(err.splitlines()) == 1
    assert err.startswith("vramkit: run record 'vramkit-optimized'") and "--threshold" in err


@pytest.mark.parametrize("says, code, passes", [
    ("vram-safe: WARNING: GPU 0 near its budget", 1, True),
    ("vram-safe: OK: GPU 0 fine", 0, True),
    ("Traceback (most recent call last):", 1, False),       # a crash exits 1 too: not a WARNING
    ("vram-safe: CRITICAL: GPU 0 over", 2, False),
])
def test_start_targets_pass_exit_1_only_when_it_says_warning(says, code, passes, tmp_path):
    """The real `_safe` recipe of mk/qwen.mk, with a stand-in for vramkit that says `says` and exits `code`."""
    fake = tmp_path / "fake-vramkit"
    fake.write_text(f"#!/bin/sh\necho '{says}'\nexit {code}\n")
    fake.chmod(0o755)
    r = subprocess.run(["make", "-s", "--no-print-directory", f"VRAMKIT={fake}", "DRY_RUN=",
                        "--eval", "zz-safe-probe: ; @true $(_safe)", "zz-safe-probe"],
                       cwd=REPO, capture_output=True, text=True, timeout=60)
    assert (r.returncode == 0) is passes, r.stdout + r.stderr
    assert says in r.stdout
