"""benchmarks/gpu/decode_profile.py: a decode step's budget from SGLang's kineto trace, llama.cpp's from a sweep."""
from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dp():
    spec = importlib.util.spec_from_file_location("decode_profile", REPO / "benchmarks" / "gpu" / "decode_profile.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _step(t0: float, corr: int, stall_us: float) -> list[dict]:
    """One graph replay as kineto writes it: the CPU-side launch, then a GEMM, a stall (a KT host node), an MoE kernel."""
    return [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": t0, "dur": 8, "args": {"correlation": corr}},
        {"ph": "X", "cat": "kernel", "name": "sm90_gemm_bf16", "ts": t0 + 10, "dur": 100, "args": {"correlation": corr}},
        {"ph": "X", "cat": "kernel", "name": "fused_moe_kernel", "ts": t0 + 110 + stall_us, "dur": 50,
         "args": {"correlation": corr}},
        {"ph": "X", "cat": "kernel", "name": "_fwd_grouped_kernel_stage1", "ts": t0 + 160 + stall_us, "dur": 40,
         "args": {"correlation": corr}},
        # a kernel of another launch (sampling, outside the graph) must not count in the step
        {"ph": "X", "cat": "kernel", "name": "argmax", "ts": t0 + 400 + stall_us, "dur": 5, "args": {"correlation": -corr}},
    ]


def test_kineto_splits_a_step_into_busy_stall_and_outside(dp, tmp_path):
    events = [e for i in range(5) for e in _step(1000.0 * i, 10 + i, stall_us=300)]
    p = tmp_path / "t.trace.json.gz"
    with gzip.open(p, "wt") as f:
        json.dump({"traceEvents": events}, f)
    b = dp.kineto(dp.load(p))
    assert b["steps"] == 5 and b["kernels_per_step"] == 3
    assert b["period_ms"] == 1.0                       # launch to launch
    assert b["graph_span_ms"] == pytest.approx(0.49)   # 10 -> 500 us
    assert b["gpu_busy_ms"] == pytest.approx(0.19)
    assert b["gpu_idle_in_graph_ms"] == pytest.approx(0.30)
    assert b["stalls_over_20us_per_step"] == 1 and b["stall_ms"] == pytest.approx(0.30)
    assert b["outside_graph_ms"] == pytest.approx(0.51)
    cats = b["kernel_time_by_name_pattern_ms"]
    assert cats["experts (MoE GEMMs)"] == pytest.approx(0.05) and cats["attention"] == pytest.approx(0.04)
    assert cats["dense GEMMs"] == pytest.approx(0.10)
    assert b["top_kernels_ms_per_step"][0] == {"name": "sm90_gemm_bf16", "ms": 0.1}


def test_kineto_without_graph_replays_refuses(dp):
    with pytest.raises(ValueError, match="no CUDA graph replay"):
        dp.kineto([{"ph": "X", "cat": "kernel", "name": "k", "ts": 0, "dur": 1, "args": {"correlation": 1}}])


def test_sweep_fits_the_per_layer_cost_of_cpu_experts(dp):
    rows = [{"n_cpu_moe": n, "n_gen": 128, "n_depth": 0, "n_threads": 14, "avg_ts": 1e3 / (4.0 + 0.5 * n)}
            for n in (0, 11, 24)]
    rows.append({"n_cpu_moe": 11, "n_gen": 128, "n_depth": 8192, "n_threads": 14, "avg_ts": 10.0})  # other depth
    rows.append({"n_cpu_moe": 11, "n_gen": 0, "n_prompt": 512, "n_depth": 0, "n_threads": 14, "avg_ts": 1e3})
    s = dp.sweep(rows)
    assert s["threads"] == 14 and [p["n_cpu_moe"] for p in s["points"]] == [0, 11, 24]
    assert s["all_gpu_step_ms"] == pytest.approx(4.0) and s["per_cpu_layer_ms"] == pytest.approx(0.5)
    assert s["max_fit_error_pct"] == 0.0
    with pytest.raises(ValueError, match="two or more"):
        dp.sweep(rows[:1])
