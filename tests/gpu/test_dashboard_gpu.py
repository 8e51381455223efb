"""On a real GPU: the dashboard's Prometheus series and live panel against nvidia-smi.

Opt-in: `make test-gpu` (VRAMKIT_GPU_TESTS=1; GPU 0; prometheus-client)
"""
from __future__ import annotations

import shutil
import subprocess

import pytest

# Gate (skip without a GPU, with the reason): conftest.py's gpu_evidence
pytestmark = [pytest.mark.gpu]

MiB = 1 << 20
TOLERANCE_BYTES = 64 * MiB      # other processes move the reading a little between two queries


def smi(field: str) -> str:
    if shutil.which("nvidia-smi") is None:
        pytest.skip("no nvidia-smi")
    return subprocess.run(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader,nounits", "-i", "0"],
                          capture_output=True, text=True, check=True, timeout=30).stdout.strip()


def test_metrics_match_nvidia_smi(gpu_evidence):
    pytest.importorskip("prometheus_client")
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from vramkit.adapters import nvml
    from vramkit.dashboard.metrics import registry

    text = generate_latest(registry(nvml.read_snapshot)).decode()
    m = {s.name: s for f in text_string_to_metric_families(text) for s in f.samples if s.labels.get("index") == "0"}
    assert m["vramkit_gpu_up"].value == 1.0
    assert m["vramkit_gpu_up"].labels["uuid"] == smi("uuid")
    assert m["vramkit_gpu_up"].labels["name"] == smi("name")
    used_mib, reserved_mib, total_mib = (int(x) for x in smi("memory.used,memory.reserved,memory.total").split(","))
    # vramkit's "in use" = total - free = nvidia-smi's used + reserved (core/gpu/snapshot.py)
    assert abs(m["vramkit_gpu_memory_used_bytes"].value - (used_mib + reserved_mib) * MiB) <= TOLERANCE_BYTES
    assert abs(m["vramkit_gpu_memory_total_bytes"].value - total_mib * MiB) <= MiB
    assert 0.0 <= m["vramkit_gpu_utilization_ratio"].value <= 1.0
    assert abs(m["vramkit_gpu_temperature_celsius"].value - int(smi("temperature.gpu"))) <= 3


def test_live_panel_lists_the_card(gpu_evidence):
    from vramkit.dashboard.sources import LiveSource

    live = LiveSource().live()
    assert live["snapshot"]["status"] == "ok" and live["status_line"] is None
    assert live["snapshot"]["gpus"][0]["name"] == smi("name")
    assert live["history"] and "0" in live["history"][-1]["gpus"]
