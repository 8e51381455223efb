"""The example alerting rules pass Prometheus's own checker, and fire at the lines they name
(`promtool test rules` on synthetic series)."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "services" / "prometheus" / "vramkit-alerts.yml"
PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (Debian package prometheus; "
                                                         "make setup-test-tools installs it)")


def test_promtool_check_rules():
    out = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 5 rules found" in out.stdout


def test_promtool_fires_each_line_at_its_threshold(tmp_path):
    labels = '{index="0", name="NVIDIA GeForce RTX 4080", uuid="GPU-0", instance="h:8003", job="vramkit"}'
    alert = {"index": "0", "name": "NVIDIA GeForce RTX 4080", "uuid": "GPU-0", "instance": "h:8003", "job": "vramkit"}

    descriptions = {r["alert"]: r["annotations"]["description"]
                    for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}

    def expect(name: str, severity: str | None, ratio: float) -> str:
        if severity is None:
            return f"          - eval_time: 5m\n            alertname: {name}\n            exp_alerts: []\n"
        lab = "\n".join(f"                  {k}: {json.dumps(v)}" for k, v in (alert | {"severity": severity}).items())
        summary = f"GPU 0 (NVIDIA GeForce RTX 4080) memory at {round(ratio * 100)}%"   # humanizePercentage
        return (f"          - eval_time: 5m\n            alertname: {name}\n            exp_alerts:\n"
                f"              - exp_labels:\n{lab}\n                exp_annotations:\n"
                f"                  summary: {json.dumps(summary)}\n"
                f"                  description: {json.dumps(descriptions[name])}\n")

    def case(ratio: float, fired: dict[str, str | None]) -> str:
        return (f"  - interval: 30s\n    input_series:\n"
                f"      - series: 'vramkit_gpu_memory_used_ratio{labels}'\n        values: '{ratio}x20'\n"
                f"      - series: 'vramkit_gpu_up{labels}'\n        values: '1x20'\n"
                f"    alert_rule_test:\n" + "".join(expect(n, s, ratio) for n, s in fired.items()))

    test = tmp_path / "t.yml"
    test.write_text(f"rule_files:\n  - {RULES}\nevaluation_interval: 30s\ntests:\n"
                    + case(0.87, {"VramkitGpuMemory85": "info", "VramkitGpuMemory90": None, "VramkitGpuMemory95": None})
                    + case(0.92, {"VramkitGpuMemory85": None, "VramkitGpuMemory90": "warning", "VramkitGpuMemory95": None})
                    + case(0.97, {"VramkitGpuMemory90": None, "VramkitGpuMemory95": "critical"})
                    + case(0.50, {"VramkitGpuMemory85": None, "VramkitGpuDown": None}))
    out = subprocess.run([PROMTOOL, "test", "rules", str(test)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
