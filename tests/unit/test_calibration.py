"""The planner against every committed real-GPU run (benchmarks/calibration/*.json).

Each file is one configuration started through the kit's own launcher on the test GPU host
(benchmarks/gpu/run_calibration.sh): what SGLang logged (free memory at start, weights, KV tokens) and
the peak NVML saw. The planner gets only the inputs (free memory, model, knobs) and must land within
2 % on the KV pool and 5 % on the peak: a wrong formula or constant fails here.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramkit import catalog
from vramkit.core.plan.planner import Knobs, Target, plan
from vramkit.units import GiB

ROOT = Path(__file__).resolve().parents[2]
CAL_DIR = ROOT / "benchmarks" / "calibration"
POINTS = sorted(CAL_DIR.glob("*.json"))
REQUIRED = {"model", "gpu_free_gib_at_start", "mem_fraction_static", "kv_cache_dtype", "tp", "cpu_offload_gb",
            "measured", "device", "versions", "date"}


def _plan(d: dict):
    # a catalogued name, or (folder-model points) a folder in this repository
    model = catalog.model(str(ROOT / d["model"]) if (ROOT / d["model"]).is_dir() else d["model"])
    knobs = Knobs(context=d["context_length"] or model.max_position_embeddings, kv_dtype=d["kv_cache_dtype"],
                  mem_fraction=d["mem_fraction_static"], chunked_prefill=d["chunked_prefill_size"],
                  cuda_graph_max_bs=d["cuda_graph_max_bs_decode"], max_running=d["max_running_requests"],
                  hicache_gb=d["hicache_size_gb"], cpu_offload_gib=d["cpu_offload_gb"], tp=d["tp"],
                  kt_embed_host=d.get("kt_embed_host", "off"))
    # an MXFP4 point run with --moe-runner-backend marlin has the layout SGLang gives SM120 cards
    mxfp4 = {"marlin": "marlin"}.get(d.get("moe_runner_backend", "auto"))
    return plan(model, Target(gpu=None, gpu_free_bytes=int(d["gpu_free_gib_at_start"] * GiB), mxfp4_backend=mxfp4),
                knobs, catalog.engine(), with_alternatives=False)


def test_enough_calibration_data():
    data = [json.loads(p.read_text()) for p in POINTS]
    assert len(data) >= 8
    assert len({d["model"] for d in data}) >= 2
    assert {"fp8_e5m2", "auto"} <= {d["kv_cache_dtype"] for d in data}
    assert len({d["mem_fraction_static"] for d in data}) >= 3
    assert any(d["hicache_size_gb"] for d in data)


@pytest.mark.parametrize("path", POINTS, ids=[p.stem for p in POINTS])
def test_point_is_complete(path):
    d = json.loads(path.read_text())
    assert REQUIRED <= set(d), f"missing {REQUIRED - set(d)}"
    assert {"weights_bytes", "kv_pool_tokens", "peak_vram_bytes"} <= set(d["measured"])
    assert any(card in d["device"] for card in ("H100", "H200")) and d["versions"]["sglang"] == "0.5.15.post1"


@pytest.mark.parametrize("path", POINTS, ids=[p.stem for p in POINTS])
def test_kv_pool_within_2_percent(path):
    d = json.loads(path.read_text())
    measured = d["measured"]["kv_pool_tokens"]
    predicted = _plan(d).kv_pool_tokens
    assert abs(predicted - measured) / measured <= 0.02, f"predicted {predicted}, SGLang allocated {measured}"


@pytest.mark.parametrize("path", POINTS, ids=[p.stem for p in POINTS])
def test_weights_within_2_percent(path):
    d = json.loads(path.read_text())
    measured = d["measured"]["weights_bytes"]
    predicted = _plan(d).weights_bytes
    assert abs(predicted - measured) / measured <= 0.02 + 0.005 * GiB / measured   # log rounds to 0.01 GiB


WITH_PEAK = [p for p in POINTS if json.loads(p.read_text())["measured"]["peak_vram_bytes"]]


@pytest.mark.parametrize("path", WITH_PEAK, ids=[p.stem for p in WITH_PEAK])
def test_peak_within_5_percent(path):
    d = json.loads(path.read_text())
    measured = d["measured"]["peak_vram_bytes"]
    predicted = _plan(d).peak_vram_bytes
    assert abs(predicted - measured) / measured <= 0.05, f"predicted {predicted / GiB:.2f} GiB, NVML {measured / GiB:.2f}"


@pytest.mark.parametrize("path", POINTS, ids=[p.stem for p in POINTS])
def test_every_measured_start_is_predicted_safe(path):
    """Every configuration that started and served its long probe must not be called unsafe."""
    d = json.loads(path.read_text())
    if not d.get("survived"):
        pytest.skip("this point did not start")
    p = _plan(d)
    assert p.kv_pool_tokens > 0 and p.headroom_bytes > 0


def test_readme_accuracy_table_is_current():
    """README.md's per-point accuracy table is generated from these files (benchmarks/gpu/accuracy_table.py)."""
    from repo_modules import load_module
    mod = load_module("benchmarks/gpu/accuracy_table.py")
    assert mod.main(["--check"]) == 0, "run: python3 benchmarks/gpu/accuracy_table.py --write"


def test_free_at_load_begin_is_the_card_less_the_context_and_the_expert_maps():
    """Every tp-1 point ran on a card the ballast left at 16.00 or 24.00 GiB free: SGLang's "Load weight begin" read
    that less the CUDA context (config/engine.toml) and, for a MoE SGLang balances, its expert-location maps
    (arch.expert_location_prelude): 15.31 / 23.31 GiB for the Qwen3-30B-A3B shapes (their padded map, 6.3 MB, takes
    a 20 MiB segment) where every other model, gpt-oss's and Qwen1.5-MoE's small maps included, read 15.33 / 23.33.
    A planner that forgot the maps planned those MoE pools from 22 MiB that SGLang never had."""
    from vramkit.core.memory.weight_load import prelude_bytes
    from vramkit.core.model.arch import expert_location_prelude
    engine = catalog.engine()
    seen = set()
    for p in POINTS:
        d = json.loads(p.read_text())
        budget = 16 if p.stem.endswith("16g") else 24 if p.stem.endswith("24g") else None
        if budget is None or d["tp"] != 1:
            continue
        model = catalog.model(str(ROOT / d["model"]) if (ROOT / d["model"]).is_dir() else d["model"])
        expected = (budget * GiB - engine.startup_overhead(1) - prelude_bytes(model)) / GiB
        assert round(expected, 2) == d["gpu_free_gib_at_start"], p.stem
        seen.add((model.architecture, prelude_bytes(model) >> 20))
    assert ("Qwen3MoeForCausalLM", 22) in seen and ("GptOssForCausalLM", 2) in seen and ("Qwen2MoeForCausalLM", 2) in seen
    # the maps: int64 [L, E], [L, E, 1] and [L, E, E] (padded), bool [L, E, E] and int64 [L, E], the two temporaries freed
    qwen3 = catalog.model("qwen3-coder-30b-a3b-instruct")
    assert expert_location_prelude(qwen3) == (48 * 128 * 8, 48 * 128 * 8, 48 * 128 * 128 * 8, 48 * 128 * 128,
                                              48 * 128 * 8, -4, -2)
    assert prelude_bytes(catalog.model("qwen2.5-coder-14b-instruct-gptq-int4")) == 0
    # a plan from the card (no measured free figure) starts from the same 22 MiB less than a dense model would
    gpu = catalog.gpu("rtx-5060-ti-16gb")
    bare = plan(qwen3, Target(gpu=gpu), Knobs(context=32768), engine, with_alternatives=False)
    free = gpu.memory_total_bytes - engine.driver_reserved - engine.startup_overhead(1) - 22 * 2**20
    assert bare.startup_overhead_bytes == engine.startup_overhead(1) + bare.expert_maps_bytes == engine.startup_overhead(1) + 22 * 2**20
    assert bare.held_besides_server_bytes == engine.driver_reserved and bare.free_at_start_bytes == free
