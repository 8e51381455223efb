"""On a real GPU: the NVML adapter and vram-safe against nvidia-smi and torch while memory is held.

Opt-in: `make test-gpu` (VRAMKIT_GPU_TESTS=1, in .venv-gpu once `make setup-gpu` made it; GPU 0)
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest

# Gate (skip without a GPU, fail when torch cannot use the GPU that is here) and `torch_cuda`: conftest.py
pytestmark = [pytest.mark.gpu]

GiB, MiB = 1 << 30, 1 << 20
# Other processes and the CUDA allocator's rounding move the numbers a little between two readings.
TOLERANCE_BYTES = 64 * MiB


def smi_used_total_mib() -> tuple[int, int]:
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used,memory.total", "--format=csv,noheader,nounits",
                          "-i", "0"], capture_output=True, text=True, check=True, timeout=30).stdout
    used, total = (int(x) for x in out.strip().split(","))
    return used, total


def test_adapter_sees_an_allocation_of_2_gib(torch_cuda):
    from vramkit.adapters import nvml
    before = nvml.read_gpu(0)
    assert before.error is None and before.memory_api in ("v2", "v1")
    block = torch_cuda.empty(2 * GiB, dtype=torch_cuda.uint8, device="cuda:0")
    block.fill_(1)
    torch_cuda.cuda.synchronize()
    time.sleep(0.3)
    during = nvml.read_gpu(0)
    del block
    torch_cuda.cuda.empty_cache()
    time.sleep(0.3)
    after = nvml.read_gpu(0)
    assert abs((during.in_use_bytes - before.in_use_bytes) - 2 * GiB) < TOLERANCE_BYTES
    assert abs(after.in_use_bytes - before.in_use_bytes) < TOLERANCE_BYTES
    assert any(p.pid == os.getpid() for p in during.processes)


@pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="nvidia-smi is not on PATH")
def test_nvml_used_matches_nvidia_smi(torch_cuda):
    from vramkit.adapters import nvml
    g = nvml.read_gpu(0)
    used_mib, total_mib = smi_used_total_mib()
    assert abs(g.nvml_used_bytes / MiB - used_mib) <= 2          # nvidia-smi rounds to MiB
    assert abs(g.total_bytes / MiB - total_mib) <= 1
    assert g.in_use_bytes >= g.nvml_used_bytes                    # reserve is counted on top


def test_in_use_matches_torch_mem_get_info(torch_cuda):
    from vramkit.adapters import nvml
    free, total = torch_cuda.cuda.mem_get_info(0)
    g = nvml.read_gpu(0)
    # CUDA's total leaves out the driver reserve; its free is the same memory NVML calls free
    assert abs(g.free_bytes - free) < TOLERANCE_BYTES


def test_vram_safe_exit_codes_on_real_memory(torch_cuda, tmp_path, monkeypatch, capsys):
    from vramkit.adapters import nvml
    from vramkit.cli import main
    monkeypatch.setenv("VRAMKIT_STATE_DIR", str(tmp_path))
    block = torch_cuda.empty(4 * GiB, dtype=torch_cuda.uint8, device="cuda:0")   # steady usage, 1.5 % ~ 70 MiB
    block.fill_(1)
    torch_cuda.cuda.synchronize()
    in_use = nvml.read_gpu(0).in_use_bytes
    assert main(["vram-safe", "--gpu", "0", "--threshold", f"{in_use + 1 * GiB}B"]) == 0
    assert main(["vram-safe", "--gpu", "0", "--threshold", f"{in_use - 1 * GiB}B"]) == 2           # CRITICAL
    assert main(["vram-safe", "--gpu", "0", "--threshold", f"{int(in_use / 0.985)}B"]) == 1        # WARNING
    del block
    torch_cuda.cuda.empty_cache()
    capsys.readouterr()
    assert main(["vram-safe", "--gpu", "0", "--json", "--threshold", "100%"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["gpus"][0]["in_use_bytes"] > 0


def test_monitor_once_json_exit_0(torch_cuda, capsys):
    from vramkit.cli import main
    assert main(["monitor", "--once", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["status"] == "ok" and data["gpus"][0]["total_bytes"] > 0
