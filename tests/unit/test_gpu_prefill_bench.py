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


def test_the_reference_is_each_token_s_experts_weighted():
    """The float32 reference the GPU check compares the adapter's path with: the layer sums each token's top-k
    experts' silu(x gate) * (x up) down, weighted, from the raw GPTQ values (every nibble 9 here: weight +1)."""
    import torch
    h, i, g = 16, 8, 8
    full = torch.full((), 0x99999999 - 2**32, dtype=torch.int32)
    raw = {"w13_qweight": full.expand(1, h // 8, 2 * i).clone(), "w13_scales": torch.ones(1, h // g, 2 * i).half(),
           "w2_qweight": full.expand(1, i // 8, h).clone(), "w2_scales": torch.ones(1, i // g, h).half()}
    raw["w13_scales"][0, :, i:] = 0.5           # up at half the gate's weight
    x = torch.full((2, h), 0.01)
    out = gpu_prefill_bench.reference(x, raw, torch.zeros(2, 1, dtype=torch.int64), torch.tensor([[0.5], [0.25]]), i, g)
    gate = torch.full((i,), 0.01 * h)
    act = torch.nn.functional.silu(gate) * gate * 0.5
    assert torch.allclose(out, act.sum() * torch.tensor([[0.5], [0.25]]).expand(2, h))


def test_the_fp8_reference_dequantizes_each_block_by_its_own_scale():
    """--format fp8's reference: each [128, 128] block of a weight times its weight_scale_inv entry, as SGLang's
    block-FP8 kernels read them; two blocks with different scales must give different rows."""
    import torch
    h, i = 256, 128
    raw = {"w13_weight": torch.ones(1, 2 * i, h).to(torch.float8_e4m3fn),
           "w13_weight_scale_inv": torch.tensor([[[1.0, 3.0], [0.5, 0.5]]]),      # gate blocks: 1 | 3; up: 0.5
           "w2_weight": torch.ones(1, h, i).to(torch.float8_e4m3fn),
           "w2_weight_scale_inv": torch.tensor([[[2.0], [0.0]]])}                   # down rows 128+: 0
    gate = gpu_prefill_bench.Fp8Experts(raw["w13_weight"], raw["w13_weight_scale_inv"], (128, 128), "cpu",
                                        slice(0, i))[0]
    assert gate[0, :128].eq(1).all() and gate[0, 128:].eq(3).all()
    x = torch.full((1, h), 0.01)
    out = gpu_prefill_bench.fp8_reference(x, raw, torch.zeros(1, 1, dtype=torch.int64), torch.ones(1, 1), i, (128, 128))
    g = 0.01 * (128 * 1 + 128 * 3)
    u = 0.01 * h * 0.5
    act = torch.nn.functional.silu(torch.tensor(g)) * u
    assert torch.allclose(out[0, :128], act * i * 2) and out[0, 128:].eq(0).all()


def test_the_fp8_bench_figures_the_folder_quotes_are_its_runs():
    """moe-gpu-prefill/README.md's FP8 section: run c's copy and copy-plus-MoE times for both pinnings and its numeric
    check (input kept, an error of FP8 activations' size, as the CPU derivation of the arithmetic gives); runs a and
    b's copies and the first token they derived; their void check named void."""
    res = ROOT / "benchmarks" / "results" / "gpu" / "moe-gpu-prefill"
    text = " ".join((res / "README.md").read_text().split())
    c = {pin: json.loads((res / "fp8-bench" / "c" / f"gpu-prefill-bench-fp8{suffix}.json").read_text())
         for pin, suffix in (("alloc", ""), ("register", "-register"))}
    for pin, r in c.items():
        assert r["format"] == "fp8" and r["layer_bytes"] == 604127232 and r["pin"] == pin and r["all_pinned"]
        assert r["check_64_tokens"]["input_kept"] and 0.01 < r["check_64_tokens"]["rel_l2"] < 0.06
    row = " | ".join(f"{r['copy_ms']:.2f} ms, {r['copy_gbs']} GB/s" for r in c.values())
    assert f"| one layer's copy (604 MB) | {row} |" in text
    row = " | ".join(" / ".join(f"{r['run_ms'][t]:.2f}" for t in ("512", "2048", "4096")) + " ms" for r in c.values())
    assert f"| copy + triton MoE, 512 / 2048 / 4096 tokens | {row} |" in text
    err = c["alloc"]["check_64_tokens"]["rel_l2"]
    assert f"erred {100 * err:.1f} % (rel. L2) on the" in " ".join((ROOT / "README.md").read_text().split())
    derived = json.loads((res / "fp8-bench" / "c" / "arithmetic-derived.json").read_text())["derived"]
    assert f"It errs {100 * derived['bench_inputs']['rel_l2']:.2f} % on the bench's inputs and " \
        f"{100 * derived['inputs_x100']['rel_l2']:.2f} % on inputs 100x larger" in text
    assert abs(err - derived["bench_inputs"]["rel_l2"]) < 0.01          # the kernel's error is the arithmetic's
    runs = [json.loads((res / "fp8-bench" / r / "gpu-prefill-bench-fp8.json").read_text()) for r in "ab"]
    assert f"timed the same copy ({runs[0]['copy_ms']:.2f} and {runs[1]['copy_ms']:.2f} ms)" in text
    for r in runs:
        assert not (r["check_64_tokens"]["rel_l2"] < 0.05)            # NaN or huge: the check the README calls void
        d = gpu_prefill_bench.derived_ttft(r["derived_ttft_30k"]["all_gpu_ttft_30k_s"], r["copy_ms"] / 1e3, 31, 30000,
                                           4096)
        assert d == {k: r["derived_ttft_30k"][k] for k in ("chunks", "copies_s", "ttft_s")}
    ttft = sorted(r["derived_ttft_30k"]["ttft_s"] for r in runs)
    assert f"had derived {ttft[0]:.1f}-{ttft[1]:.1f} s from the bench" in text and "Their numeric check was void" in text


def test_the_interpreted_checks_are_their_data_and_the_w8a8_one_is_set_aside():
    """fp8-bench/interpreted: the bench's check computed by SGLang's triton kernels in Triton's interpreter on the CPU.
    Its w8a8 figure is twice the GPU's on the same layer and inputs (so the folder sets it aside, and the SGLang check
    asserts only int8's); its int8 figure, below the GPU's w8a8, is the prediction the GPU's fp8-int8 check tests."""
    res = ROOT / "benchmarks" / "results" / "gpu" / "moe-gpu-prefill"
    text = " ".join((res / "README.md").read_text().split())
    cpu = {f: json.loads((res / "fp8-bench" / "interpreted" / f"gpu-prefill-bench-{f}.json").read_text())
           for f in ("fp8", "fp8-int8")}
    gpu = json.loads((res / "fp8-bench" / "c" / "gpu-prefill-bench-fp8.json").read_text())["check_64_tokens"]
    for f, r in cpu.items():
        assert r["format"] == f and r["device"] == "cpu, Triton's interpreter" and r["check_64_tokens"]["input_kept"]
        assert r["check_64_tokens"]["ref_rms"] == pytest.approx(gpu["ref_rms"], rel=1e-3)    # the same layer and inputs
    w8a8, int8 = (cpu[f]["check_64_tokens"]["rel_l2"] for f in ("fp8", "fp8-int8"))
    assert w8a8 > 1.8 * gpu["rel_l2"] and int8 < gpu["rel_l2"]
    assert f"| w8a8 (`--format fp8`), rel. L2 against float32 on the FP8 values | {100 * w8a8:.1f} % | " \
        f"{100 * gpu['rel_l2']:.2f} % |" in text
    # the prediction tested on the GPU (the twentieth session's H200, the same layer and inputs): it held
    h200 = {f: json.loads((res / "fp8-bench" / "h200" / f"gpu-prefill-bench-{f}.json").read_text())["check_64_tokens"]
            for f in ("fp8", "fp8-int8")}
    assert all(r["ref_rms"] == pytest.approx(gpu["ref_rms"], rel=1e-3) and r["input_kept"] for r in h200.values())
    assert round(h200["fp8-int8"]["rel_l2"], 4) == round(int8, 4) and h200["fp8"]["rel_l2"] == pytest.approx(
        gpu["rel_l2"], abs=5e-4)
    assert (f"`VRAMKIT_KT_PREFILL_FP8=int8`) | {100 * int8:.2f} % | {100 * h200['fp8-int8']['rel_l2']:.2f} % (`h200/`, "
            "twentieth session) |") in text
    assert (f"| rel. L2 against float32 on the FP8 values, 64 tokens | **{100 * h200['fp8-int8']['rel_l2']:.2f} %** "
            f"(interpreted on the dev host: {100 * int8:.2f} %) | {100 * h200['fp8']['rel_l2']:.2f} % (the H100: "
            f"{100 * gpu['rel_l2']:.2f} %) |") in text
    assert f"One layer's int8 conversion took {cpu['fp8-int8']['int8_convert_s']['seconds']} s on these 2 cores" in text
    said = " ".join((ROOT / "tests" / "integration" / "test_gpu_prefill_sglang.py").read_text().split())
    assert f"read {100 * w8a8:.1f} % where the GPU measured {100 * gpu['rel_l2']:.2f} %" in said
