"""The dashboard's pure views: the memory bar adds up and matches the planner; a running server's own
/server_info re-plans to what that server measured (real data from the GPU host)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramkit import catalog
from vramkit.core.plan.planner import Engine
from vramkit.dashboard import planning
from vramkit.dashboard.view import (
    knobs_from_server_info,
    predicted_vs_actual,
    server_memory,
    trim_history,
)

REPO = Path(__file__).resolve().parents[2]
GiB = 1 << 30


def _engine() -> Engine:
    return catalog.engine()


@pytest.mark.parametrize("params", [
    {"preset": "optimized"},
    {"preset": "baseline"},
    {"preset": "128k"},
    {"preset": "optimized", "tp": 2, "gpu": "rtx-4090-24gb"},
    {"preset": "optimized", "cpu_offload_gib": "3"},
    {"preset": "optimized", "kt_embed_host": "off"},
    {"preset": "moe"},
])
def test_gpu_segments_add_up_to_the_card_and_the_peak(params):
    p = planning.plan_view(planning.parse_params(params), None, None)
    m = p["memory"]
    total = catalog.gpu(params.get("gpu", "rtx-5060-ti-16gb")).memory_total_bytes
    assert m["gpu_total_bytes"] == total
    assert sum(s["bytes"] for s in m["gpu"]) == total
    # everything but the reserve and the free space is the server: the planner's peak
    server = sum(s["bytes"] for s in m["gpu"] if s["key"] not in ("reserved", "free"))
    assert server == p["peak_vram_bytes"]
    assert all(s["bytes"] >= 0 for s in m["gpu"] if s["key"] != "free")
    # the moved token embeddings (auto in these two presets, where the move can run) are drawn in host RAM
    moves = params["preset"] in ("optimized", "moe") and not {"kt_embed_host", "tp", "cpu_offload_gib"} & set(params)
    host = {s["key"]: s["bytes"] for s in m["host"]}
    assert host.get("embed", 0) == p["host_embed_bytes"] and (p["host_embed_bytes"] > 0) == moves


def test_the_graph_segment_is_the_planners_decode_graph_constant():
    """The bar's 'decode CUDA graphs' is the plan's figure; with graphs on and no offload it must equal
    engine.toml's measured decode_graph, and 0 with graphs off."""
    on = planning.plan_view({"preset": "optimized"}, None, None)["memory"]["gpu"]
    off = planning.plan_view({"preset": "optimized", "cuda_graph_max_bs": 0}, None, None)["memory"]["gpu"]
    graphs = {s["key"]: s["bytes"] for s in on}["graphs"]
    assert graphs == _engine().decode_graph
    assert {s["key"]: s["bytes"] for s in off}["graphs"] == 0


def test_offload_comes_out_of_the_decoder_layers():
    p = planning.plan_view(planning.parse_params({"preset": "optimized", "cpu_offload_gib": "3"}), None, None)
    parts = p["weights_on_gpu_by_component"]
    full = p["weights_by_component"]
    assert p["weights_offloaded_bytes"] > 0
    assert parts["embed_tokens"] == full["embed_tokens"]          # embeddings stay (README: 2.9 GiB)
    removed = (full["attention"] - parts["attention"]) + (full["mlp"] - parts["mlp"])
    assert abs(removed - p["weights_offloaded_bytes"]) <= 2
    host = {s["key"]: s["bytes"] for s in p["memory"]["host"]}
    assert host["offload"] == p["weights_pinned_host_bytes"] > p["weights_offloaded_bytes"]   # pinned: powers of two


def test_a_plan_that_does_not_fit_shows_over_the_card():
    p = planning.plan_view({"preset": "128k", "model": "qwen2.5-coder-14b-instruct-gptq-int4"}, None, None)
    assert not p["fits"]
    assert p["alternatives"]
    assert p["memory"]["gpu"][-1]["key"] == "free"


def test_server_info_of_a_real_run_replans_to_what_it_measured():
    """benchmarks/results/gpu/optimized-16g.json holds the /server_info SGLang gave on the H100 held to
    16 GiB; opt-16g.json the same configuration's log ("Load weight begin. avail mem=15.33 GB"). The
    dashboard's prediction for that server must land where the calibration test says the planner does."""
    bench = json.loads((REPO / "benchmarks/results/gpu/optimized-16g.json").read_text())
    calib = json.loads((REPO / "benchmarks/calibration/opt-16g.json").read_text())
    info = bench["server"]
    knobs = knobs_from_server_info(info)
    assert knobs["mem_fraction"] == 0.8 and knobs["kv_dtype"] == "fp8_e5m2"
    assert knobs["cuda_graph_max_bs"] == 8 and knobs["hicache_gb"] == 8
    params = planning.running_params({"preset": "optimized", "model": calib["model"]}, info,
                                     calib["measured"]["log_figures_gib"])
    assert params["kt_embed_host"] == "off"      # that run's log has no adapter line: the table stayed on the GPU
    plan = planning.plan_view(params, None, None)
    rows = {r["what"]: r for r in predicted_vs_actual(plan, plan["memory"], info, None,
                                                      calib["measured"]["peak_vram_bytes"])}
    assert rows["KV pool"]["actual"] == 30987
    assert abs(rows["KV pool"]["diff_pct"]) < 0.5
    assert abs(rows["longest prompt"]["diff_pct"]) < 0.5
    assert abs(rows["weights on the GPU"]["diff_pct"]) < 1.0     # SGLang rounds to 0.01 GiB
    assert abs(rows["GPU memory of the server"]["diff_pct"]) < 2.0


def test_server_memory_prefers_v1_loads_and_falls_back_to_server_info():
    info = {"memory_usage_gb": {"weight": 9.41, "kvcache": 2.84, "graph": 0.06}}
    loads = {"loads": [{"num_used_tokens": 1200, "max_total_num_tokens": 30987, "num_running_reqs": 1,
                        "num_waiting_reqs": 0, "memory": {"weight_gb": 9.4, "kv_cache_gb": 2.8, "graph_gb": 0.05}}]}
    both = server_memory(info, loads)
    assert both["weights_bytes"] == round(9.4 * GiB) and both["num_used_tokens"] == 1200
    only_info = server_memory(info, None)
    assert only_info["kv_pool_bytes"] == round(2.84 * GiB) and "num_used_tokens" not in only_info
    assert server_memory(None, None) == {}


def test_disable_cuda_graph_means_no_graphs():
    assert knobs_from_server_info({"disable_cuda_graph": True, "cuda_graph_max_bs_decode": 8})["cuda_graph_max_bs"] == 0
    assert knobs_from_server_info({"enable_hierarchical_cache": False, "hicache_size": 8})["hicache_gb"] == 0


def test_history_keeps_the_window_and_the_newest():
    pts = [{"time_s": float(t)} for t in range(0, 1000, 10)]
    kept = trim_history(pts, now_s=990.0, window_s=100.0, max_points=5)
    assert [p["time_s"] for p in kept] == [950.0, 960.0, 970.0, 980.0, 990.0]
    assert trim_history(pts, now_s=990.0, window_s=25.0, max_points=50) == pts[-3:]


def test_server_api_keys_are_never_shown_or_captured():
    from vramkit.dashboard.sources import redact
    info = {"api_key": "sk-123", "admin_api_key": "adm", "max_total_num_tokens": 30987, "api_key_empty": "",
            "model_path": "/m", "hf_token_secret": "x"}
    out = redact(info)
    assert out["api_key"] == "<redacted>" and out["admin_api_key"] == "<redacted>" and out["hf_token_secret"] == "<redacted>"
    assert out["max_total_num_tokens"] == 30987 and out["model_path"] == "/m" and out["api_key_empty"] == ""


def test_card_in_use_is_set_against_the_recorded_budget():
    plan = planning.plan_view({"preset": "optimized"}, None, None)
    rows = predicted_vs_actual(plan, plan["memory"], {}, None, None, gpu_in_use_bytes=15 * GiB, budget_bytes=16 * GiB)
    budget = rows[-1]
    assert budget["what"] == "GPU in use vs the kit's budget"
    assert budget["diff_pct"] == round(100 * (16 - 15) / 15, 2)
    server = next(r for r in rows if r["what"] == "GPU memory of the server")
    assert server["actual"] is None and server["diff_pct"] is None      # no process list: no number made up
    assert all(r["what"] != "GPU in use vs the kit's budget"
               for r in predicted_vs_actual(plan, plan["memory"], {}, None, None))


def test_budget_lines_per_gpu_of_each_recorded_server():
    from vramkit.dashboard.sources import budget_lines
    recs = [{"name": "vramkit-optimized", "gpu_indices": [0, 1], "vram_budget_bytes": 15 * GiB},
            {"name": "old", "gpu_indices": [2]}]
    assert budget_lines(recs) == {"0": {"bytes": 15 * GiB, "service": "vramkit-optimized"},
                                  "1": {"bytes": 15 * GiB, "service": "vramkit-optimized"}}


def test_a_running_moe_server_replans_with_the_cpu_decode_its_log_says_ran():
    """kt_cpu_decode is not an SGLang flag: the dashboard reads the adapter's lines in the server log. The committed
    evidence of the int4 run (moe-vs-llamacpp-int4/r3/) re-plans with the int4 decode, its twin without the variable
    with kt-kernel's, and a log where the kernel gave up on a layer with kt-kernel's too."""
    from vramkit.core import sglang_log
    run = REPO / "benchmarks/results/gpu/moe-vs-llamacpp-int4/r3"
    record = {"preset": "moe", "model": "qwen3-30b-a3b-gptq-int4"}
    for point, want in (("k16-preset-int4", "int4"), ("k16-preset", "kt")):
        figs = sglang_log.parse((run / f"{point}.evidence.txt").read_text()).values
        assert planning.running_params(record, None, figs)["kt_cpu_decode"] == want, point
    gave_up = ("Load weight end. elapsed=40.1 s, type=Qwen3MoeForCausalLM, avail mem=2.07 GB, mem usage=13.24 GB.\n"
               "vramkit_int4_experts: layer 0: no C compiler (cc) to build int4_experts.c: install gcc, or set CC; "
               "the CPU layers' decode stays on kt-kernel from here on")
    figs = sglang_log.parse(gave_up).values
    assert figs["int4_failed"] == 0 and planning.running_params(record, None, figs)["kt_cpu_decode"] == "kt"

