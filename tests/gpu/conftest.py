"""The real-GPU tests' one gate: skip only where there is no NVIDIA GPU; where there is one, a torch that
cannot use it FAILS the run.

Before issue 10, `make test-gpu` in .venv (CPU torch) on a GPU host skipped all five tests ("torch sees no
CUDA GPU") and exited 0: a green run that tested nothing. Evidence of a GPU is anything the machine itself
shows: an NVIDIA device node, nvidia-smi listing a GPU, or NVML counting one.
"""
from __future__ import annotations

import glob
import os
import shutil
import subprocess

import pytest


def nvidia_gpu_evidence() -> str | None:
    """Why we believe this machine has an NVIDIA GPU, or None when nothing says so."""
    nodes = sorted(glob.glob("/dev/nvidia[0-9]*"))
    if nodes:
        return f"device node {nodes[0]}"
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired):
            out = ""
        listed = [ln for ln in out.splitlines() if ln.startswith("GPU ")]
        if listed:
            return f"nvidia-smi -L: {listed[0].strip()}"
    from vramkit.adapters import nvml
    snap = nvml.read_snapshot(with_processes=False)
    if snap.unavailable is None and snap.gpus:
        return f"NVML counts {len(snap.gpus)} GPU(s)"
    return None


@pytest.fixture(scope="session")
def gpu_evidence() -> str:
    if os.environ.get("VRAMKIT_GPU_TESTS") != "1":
        pytest.skip("real-GPU test: make test-gpu (sets VRAMKIT_GPU_TESTS=1) on a host with an NVIDIA GPU")
    why = nvidia_gpu_evidence()
    if why is None:
        pytest.skip("no NVIDIA GPU on this machine (no /dev/nvidia*, nvidia-smi lists none, NVML counts none)")
    return why


@pytest.fixture(autouse=True)
def _only_where_there_is_a_gpu(gpu_evidence):
    """Every test in tests/gpu, torch or not: skipped with the reason on a machine without an NVIDIA GPU."""


@pytest.fixture(scope="session")
def torch_cuda(gpu_evidence):
    """torch on GPU 0; a machine with a GPU whose torch cannot use it is a failure, not a skip."""
    fix = "make setup-gpu, then make test-gpu (it runs in .venv-gpu, whose torch is a CUDA build)"
    try:
        import torch
    except ImportError as e:
        pytest.fail(f"this machine has an NVIDIA GPU ({gpu_evidence}) but torch does not import ({e}) -> {fix}",
                    pytrace=False)
    if not torch.cuda.is_available():
        pytest.fail(f"this machine has an NVIDIA GPU ({gpu_evidence}) but torch {torch.__version__} "
                    f"(CUDA build: {torch.version.cuda}) cannot see it -> {fix}", pytrace=False)
    torch.zeros(1, device="cuda:0")
    return torch
