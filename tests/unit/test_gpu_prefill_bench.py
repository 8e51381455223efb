"""benchmarks/gpu/gpu_prefill_bench.py, the decision experiment for the GPU-side prompt of CPU layers: its derivation,
and that it says in one line why it cannot run where there is no GPU (its timing runs on the GPU host only)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu" / "gpu_prefill_bench.py"
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))
import gpu_prefill_bench  # noqa: E402


def test_the_derived_first_token_adds_each_chunk_s_copies_to_the_all_gpu_one():
    d = gpu_prefill_bench.derived_ttft(3.139, 0.0057, 11, 30000, 4096)
    assert d["chunks"] == 8 and d["copies_s"] == pytest.approx(8 * 11 * 0.0057, abs=1e-3)
    assert d["ttft_s"] == pytest.approx(3.139 + 8 * 11 * 0.0057, abs=0.01)
    assert gpu_prefill_bench.derived_ttft(3.0, 0.01, 11, 4096, 4096)["chunks"] == 1
    assert gpu_prefill_bench.derived_ttft(3.0, 0.01, 0, 30000, 4096)["ttft_s"] == 3.0     # no CPU layer, no copies


def test_the_readme_s_derivation_is_this_one():
    """The README's ~3.6 s: the same arithmetic at the measured pinned copy rate and the planner's layer size."""
    text = " ".join((ROOT / "benchmarks/results/gpu/moe-vs-llamacpp-mf/README.md").read_text().split())
    c24 = json.loads((ROOT / "benchmarks/results/gpu/moe-vs-llamacpp-24g.json").read_text())
    from vramkit.generated import _pinned_copy_gbs
    layer = 0.29 * 2**30 / 1e9                                 # the README's rounded layer, GB
    d = gpu_prefill_bench.derived_ttft(c24["engines"]["vramkit"]["ttft_30k_s"], layer / _pinned_copy_gbs(), 11,
                                       30000, 4096)
    assert f"TTFT ~{d['ttft_s']:.1f} s" in text


def test_no_gpu_here_is_one_line_and_a_distinct_exit(tmp_path):
    out = tmp_path / "r.json"
    run = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 3 and run.stderr.count("\n") == 1 and "Traceback" not in run.stderr
    assert run.stderr.startswith("gpu_prefill_bench: ") and "error" in json.loads(out.read_text())
    bad = subprocess.run([sys.executable, str(SCRIPT), "--tokens", "4k"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "whole numbers" in bad.stderr and bad.stderr.count("\n") == 1


def test_the_reference_unpacks_gptq_as_autogptq_packs_it():
    """The float32 reference the GPU check compares the adapter's path with: row r of a qweight holds k = 8 r + j in
    bits 4 j..4 j + 3 (AutoGPTQ's pack), symmetric around 8, scaled by its group; and the layer sums each token's top-k
    experts' silu(x gate) * (x up) down, weighted."""
    import torch
    gen = torch.Generator().manual_seed(1)
    k, n, g = 16, 3, 8
    vals = torch.randint(0, 16, (k, n), generator=gen, dtype=torch.int64)
    packed = torch.zeros(k // 8, n, dtype=torch.int64)
    for j in range(8):
        packed |= vals[j::8] << (4 * j)
    q = torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)     # int32 storage, high nibble signed
    scales = torch.tensor([[0.5, 1.0, 2.0], [0.25, 0.125, 4.0]], dtype=torch.float16)
    w = gpu_prefill_bench.unpack_gptq(q, scales, g)
    assert torch.equal(w, (vals.float() - 8) * scales.float().repeat_interleave(g, dim=0))
    # one expert, identity-like weights: the reference is silu(x gate) * (x up) down, times the routing weight
    h, i = 16, 8
    raw = {"w13_qweight": q.new_zeros((1, h // 8, 2 * i)), "w13_scales": torch.ones(1, h // g, 2 * i).half(),
           "w2_qweight": q.new_zeros((1, i // 8, h)), "w2_scales": torch.ones(1, i // g, h).half()}
    raw["w13_qweight"] += 0x99999999 - 2**32          # every value 9: weight +1
    raw["w2_qweight"] += 0x99999999 - 2**32
    x = torch.full((2, h), 0.01)
    out = gpu_prefill_bench.reference(x, raw, torch.zeros(2, 1, dtype=torch.int64), torch.full((2, 1), 0.5), i, g)
    a = torch.full((i,), 0.01 * h)
    assert torch.allclose(out, (torch.nn.functional.silu(a) * a).sum().expand(2, h) * 0.5)
