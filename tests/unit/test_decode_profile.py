"""benchmarks/gpu/decode_profile.py: a decode step's budget from SGLang's kineto trace, llama.cpp's from a sweep."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from repo_modules import load_module

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dp():
    return load_module("benchmarks/gpu/decode_profile.py")


def _step(t0: float, corr: int, wait_us: float) -> list[dict]:
    """One graph replay as kineto writes it for a KT layer: the CPU-side launch; a GEMM; the hidden states' copy to the
    host; a 60 us stall (the host node that hands the CPU its experts); the GPU's experts; a stall while the CPU's
    finish; their copy back; attention."""
    def k(name, ts, dur):
        return {"ph": "X", "cat": "kernel" if not name.startswith("Memcpy") else "gpu_memcpy", "name": name,
                "ts": t0 + ts, "dur": dur, "args": {"correlation": corr}}
    return [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": t0, "dur": 8, "args": {"correlation": corr}},
        k("sm90_gemm_bf16", 10, 100), k("Memcpy DtoH (Device -> Pinned)", 110, 5), k("fused_moe_kernel", 175, 50),
        k("Memcpy HtoD (Pinned -> Device)", 225 + wait_us, 5), k("_fwd_grouped_kernel_stage1", 230 + wait_us, 40),
        # a kernel of another launch (sampling, outside the graph) must not count in the step
        {"ph": "X", "cat": "kernel", "name": "argmax", "ts": t0 + 600, "dur": 5, "args": {"correlation": -corr}},
    ]


def test_kineto_splits_a_step_into_busy_stalls_and_outside(dp, tmp_path):
    # the CPU launches each replay 1 ms apart, but the GPU starts them 1.2 ms apart (the GPU-side period counts)
    events = [e for i in range(5) for e in _step(1200.0 * i, 10 + i, wait_us=300)]
    for e in events:
        if e["name"] == "cudaGraphLaunch":
            e["ts"] = 1000.0 * (e["args"]["correlation"] - 10)
    p = tmp_path / "t.trace.json.gz"
    with gzip.open(p, "wt") as f:
        json.dump({"traceEvents": events}, f)
    b = dp.kineto(dp.load(p))
    assert b["steps"] == 5 and b["kernels_per_step"] == 5
    assert b["period_ms"] == 1.2 and b["launch_period_ms"] == 1.0
    assert b["graph_span_ms"] == pytest.approx(0.56)   # 10 -> 570 us
    assert b["gpu_busy_ms"] == pytest.approx(0.20)
    assert b["gpu_idle_in_graph_ms"] == pytest.approx(0.36)
    assert b["stalls_over_20us_per_step"] == 2 and b["stall_ms"] == pytest.approx(0.36)
    assert b["handoff_stall_ms"] == pytest.approx(0.06) and b["wait_stall_ms"] == pytest.approx(0.30)
    assert b["other_stall_ms"] == 0
    assert b["outside_graph_ms"] == pytest.approx(0.64)
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


def test_the_committed_budget_report_is_generated_from_its_data():
    """benchmarks/results/gpu/moe-budget.md is moe_budget.py's output over moe-budget/ (medians, sweep, findings)."""
    mod = load_module("benchmarks/gpu/moe_budget.py")
    assert mod.main(["--check"]) == 0, "run: python3 benchmarks/gpu/moe_budget.py"
    text = mod.render()
    # the figures the findings quote come from the points: the kit's best step is its profiled period
    b = mod._budget("run1", "k16-wna16-prof", 1)
    assert f"spends {b['period_ms']:.1f} ms a token at batch 1" in text
    assert "| 11 | 8.43 |" in text          # llama-bench at --n-cpu-moe 11, 14 threads


def test_the_budget_tool_pairs_new_points_and_tells_repeated_routers_from_independent_ones(capsys):
    """moe_budget.py's two helpers for a new step's data: `pair` is the report's own pairing, and `layers` tells a
    recording whose layers share one router (SGLang's dummy weights) from one whose layers route apart."""
    import json
    import random
    mod = load_module("benchmarks/gpu/moe_budget.py")
    summary = json.loads((REPO / "benchmarks" / "results" / "gpu" / "moe-budget.json").read_text())
    assert mod.main(["pair", "hot", "k16-wna16-hot", "k16-wna16-triv"]) == 0
    assert json.loads(capsys.readouterr().out) == summary["placement_speed"]["other_prompts"]
    rng = random.Random(0)
    apart = [[rng.randint(0, 1000) for _ in range(128)] for _ in range(48)]
    alike = [[c + rng.randint(0, 50) for c in apart[0]] for _ in range(48)]
    assert abs(mod.layer_routing(apart)["corr_with_layer0_median"]) < 0.2
    assert mod.layer_routing(alike)["corr_with_layer0_median"] > 0.9


def test_readme_budget_line_follows_the_data(tmp_path, monkeypatch):
    from vramkit import generated
    src = json.loads((REPO / generated.MOE_BUDGET).read_text())
    src["kit"]["handoff_ms"] = 1.25
    src["medians_of_3"]["decode_tok_s"] = 1.07
    dst = tmp_path / generated.MOE_BUDGET
    dst.parent.mkdir(parents=True)
    dst.write_text(json.dumps(src))
    monkeypatch.setattr(generated, "REPO_ROOT", tmp_path)
    line = generated._measured_budget()[1]
    assert "+ 1.2 ms handing 48 layers' CPU experts over" in line and "1.07x at depth 0" in line
    dst.unlink()
    assert generated._measured_budget() == []


def test_waits_lists_each_layer_s_wait_and_counts_the_long_ones(dp):
    """Four steps, one KT layer each: waits of 100, 200, 200 and 900 us; the hand-off stall is 60 us every time."""
    events = [e for i, w in enumerate((100, 200, 200, 900)) for e in _step(2000.0 * i, 10 + i, wait_us=w)]
    w = dp.waits(events, bin_us=100, long_us=600)
    assert w["steps"] == 4 and w["waits_per_step"] == 1
    assert w["wait_us"]["p50"] == 200 and w["wait_us"]["max"] == 900
    assert w["waits_over_600us_per_step"] == 0.25 and w["handoff_us_p50"] == 60
    assert w["histogram_100us_bins"] == {"100": 1, "200": 2, "600": 1}
    assert w["per_layer_median_us"] == [200]
    with pytest.raises(ValueError, match="no wait stalls"):
        dp.waits([e for e in _step(0.0, 1, wait_us=0) if not e["name"].startswith("Memcpy HtoD")])


def test_handoffs_split_each_cpu_layer_s_gap_at_its_copies(dp):
    """The adapter's host-function path, two CPU layers: the hidden states' copy to the host and the top-k ids' and
    weights' after it, the host node (no GPU event), the result's copy back; each gap split at those copies. A small
    copy to the host with no kernel before it, or the ids' copy alone, starts no hand-off."""
    def ev(name, ts, dur, nbytes=0):
        cat = "gpu_memcpy" if name.startswith("Memcpy") else "kernel"
        return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "args": {"bytes": nbytes}}
    out, back = "Memcpy DtoH (Device -> Pinned)", "Memcpy HtoD (Pinned -> Device)"
    events = []
    for t0, host in ((0.0, 278.0), (1000.0, 478.0)):
        events += [ev("gemm", t0, 10), ev(out, t0 + 15, 3, 8192), ev(out, t0 + 19, 1, 32), ev(out, t0 + 21, 1, 32),
                   ev(back, t0 + 22 + host, 2, 8192), ev("attn", t0 + 27 + host, 5)]
    events.append(ev(out, 5000.0, 1, 4))         # the sampled token's copy: too small to be a layer's hidden states
    h = dp.handoffs(events)
    assert h["handoffs"] == 2 and h["hidden_bytes"] == [8192]
    assert h["before_us"]["median"] == 5 and h["copies_out_us"]["median"] == 7 and h["copy_back_us"]["median"] == 2
    assert h["after_us"]["median"] == 3 and h["host_us"]["median"] == 378 and h["host_us"]["p90"] == 478
    assert h["total_us"]["median"] == pytest.approx(5 + 7 + 378 + 2 + 3)
    assert dp.handoffs([ev("gemm", 0, 10)]) == {"handoffs": 0}
