"""What the dashboard draws, from plain values: the plan's memory as stacked segments, the plan's
prediction beside what a running server reports, and the per-GPU history the live panel plots.

Pure: dicts in (a Plan's JSON, SGLang's /server_info and /v1/loads answers, snapshots), dicts out.
The page (vramkit/dashboard/static) only draws these; it computes nothing about memory itself.

Every segment and every row says where its number comes from (`source`):
- "planner": derived from SGLang's source by vramkit/core/plan/planner.py;
- "engine.toml": a constant measured on the GPU host (config/engine.toml), as the plan carries it;
- "SGLang": what the running server reports about itself; "NVML": what the driver says.
"""
from __future__ import annotations

from typing import Any

from vramkit.core.plan.knobs import specs

GIB = 1 << 30


def _seg(key: str, label: str, n: int, source: str, group: str) -> dict[str, Any]:
    return {"key": key, "label": label, "bytes": int(n), "source": source, "group": group}


def memory_segments(plan: dict[str, Any], card_total_bytes: int | None,
                    host_available_bytes: int | None = None) -> dict[str, Any]:
    """The plan as stacked segments of one GPU (per tensor-parallel rank) and of host RAM, every figure the
    plan's own (core/plan/planner.py `Plan`): nothing about memory is derived here.

    GPU segments add up to the card's total: driver reserve and other processes, the server's CUDA
    context, the weights by part (plus the load's own overhead: rope cache, marlin workspace, the
    caching allocator's rounding), the KV pool, buffers, decode CUDA graphs, the activations of the
    largest prefill step, and what stays free at that peak.
    """
    tp = int(plan["knobs"]["tp"])
    startup = int(plan["startup_overhead_bytes"])
    total = int(card_total_bytes) if card_total_bytes else int(plan["card_total_bytes"])
    held = int(plan["held_besides_server_bytes"])
    if total != int(plan["card_total_bytes"]):   # a plan for a free-memory figure, drawn on the card NVML names
        held = max(0, total - int(plan["free_at_start_bytes"]) - startup)
    gpu = [_seg("reserved", "driver reserve + other processes", held, "engine.toml", "other"),
           _seg("context", "CUDA context" + (" + NCCL" if tp > 1 else "")
                + (" + expert-location maps" if plan.get("expert_maps_bytes") else ""), startup, "engine.toml",
                "other")]
    parts = {k: int(v) for k, v in plan["weights_on_gpu_by_component"].items()}
    # the token embeddings moved to host RAM after the load (kt_embed_host): their allocator segment, the table
    # rounded up, leaves the GPU
    moved = int(plan.get("embed_freed_bytes") or 0)
    rounding = max(0, moved - parts.get("embed_tokens", 0))
    if moved:
        parts["embed_tokens"] = max(0, parts.get("embed_tokens", 0) - moved)
    for name, n in parts.items():
        gpu.append(_seg(f"weights.{name}", f"weights: {name}", n, "planner", "weights"))
    load_overhead = int(plan["weights_load_overhead_bytes"]) - rounding
    if load_overhead > 0:
        gpu.append(_seg("weights.load", "weights: load overhead (rope cache, allocator)", load_overhead,
                        "planner", "weights"))
    gpu += [_seg("kv", f"KV pool ({plan['kv_pool_tokens']:,} tokens)", int(plan["kv_pool_bytes"]), "planner", "kv"),
            _seg("buffers", "buffers (req_to_token, attention backend, host-cache mapping, misc)",
                 int(plan["buffers_bytes"]), "planner", "other"),
            _seg("graphs", "decode CUDA graphs", int(plan["graphs_bytes"]), "planner", "graphs")]
    if plan["comm_runtime_bytes"]:
        gpu.append(_seg("comm", "NCCL while serving", int(plan["comm_runtime_bytes"]), "engine.toml", "other"))
    gpu.append(_seg("activations", "activations (largest prefill step)", int(plan["activation_bytes"]), "planner",
                    "activations"))
    free = total - sum(s["bytes"] for s in gpu)
    gpu.append(_seg("free", "free at the peak" if free >= 0 else "over the card", free, "planner", "free"))
    host = []
    if plan["hicache_bytes"]:
        host.append(_seg("hicache", "hierarchical KV cache (pinned)", int(plan["hicache_bytes"]), "planner", "host"))
    if plan["weights_offloaded_bytes"]:
        # what they pin: each tensor rounded up to a power of two
        host.append(_seg("offload", "offloaded weights (pinned)", int(plan["weights_pinned_host_bytes"]), "planner",
                         "host"))
    if plan.get("host_embed_bytes"):
        host.append(_seg("embed", "token embeddings (pinned; the GPU reads a row a token)",
                         int(plan["host_embed_bytes"]), "planner", "host"))
    pinned = sum(s["bytes"] for s in host)
    if host and host_available_bytes:
        host.append(_seg("host-free", "host RAM left available (psutil, measured)", host_available_bytes - pinned,
                         "psutil", "free"))
    return {"gpu_total_bytes": total, "peak_bytes": int(plan["peak_vram_bytes"]), "gpu": gpu, "host": host,
            "host_pinned_bytes": pinned, "host_total_bytes": max(pinned, host_available_bytes or 0)}


# --- the running server: prediction beside what it reports ---------------------------------------

def knobs_from_server_info(info: dict[str, Any]) -> dict[str, Any]:
    """The knobs a running SGLang server was started with (its /server_info server args), named as
    vramkit's planner names them, so the prediction is for what runs, not for what a preset says.
    SGLang's server-args field of each knob is its flag's (core/plan/knobs.py `KnobSpec.server_arg`)."""
    knobs: dict[str, Any] = {}
    for spec in specs():
        value = info.get(spec.server_arg) if spec.server_arg else None
        if value is not None and value != "":
            knobs[spec.name] = spec.type(value) if spec.type in (int, float) and not isinstance(value, bool) \
                else value
    if info.get("disable_cuda_graph"):         # graphs off whatever the batch size says
        knobs["cuda_graph_max_bs"] = 0
    if not info.get("enable_hierarchical_cache"):
        knobs["hicache_gb"] = 0
    return knobs


def server_memory(server_info: dict | None, loads: dict | None) -> dict:
    """What the server says it holds, in bytes: /v1/loads?include=core,memory (rank 0: tokens used, requests,
    memory.weight_gb / kv_cache_gb / graph_gb), else /server_info's memory_usage_gb (weight, kvcache, graph).
    SGLang's "GB" there is GiB (it divides by 1 << 30)."""
    rows = (loads or {}).get("loads") or []
    first = rows[0] if rows else {}
    out = {k: first.get(k) for k in ("num_used_tokens", "max_total_num_tokens", "num_running_reqs",
                                     "num_waiting_reqs", "token_usage", "cache_hit_rate", "gen_throughput")}
    mem = first.get("memory") or {}
    info_mem = (server_info or {}).get("memory_usage_gb") or {}
    for ours, theirs, fallback in (("weights_bytes", "weight_gb", "weight"),
                                   ("kv_pool_bytes", "kv_cache_gb", "kvcache"),
                                   ("graphs_bytes", "graph_gb", "graph")):
        value = mem.get(theirs, info_mem.get(fallback))
        if value is not None:
            out[ours] = round(float(value) * GIB)
    return {k: v for k, v in out.items() if v is not None}


def _row(what: str, predicted, actual, unit: str, source: str) -> dict:
    diff = None
    if isinstance(predicted, (int, float)) and isinstance(actual, (int, float)) and actual:
        diff = round(100.0 * (predicted - actual) / actual, 2)
    return {"what": what, "predicted": predicted, "actual": actual, "unit": unit, "diff_pct": diff,
            "actual_source": source}


def predicted_vs_actual(plan: dict, segments: dict | None, server_info: dict | None, loads: dict | None,
                        server_gpu_bytes: int | None, gpu_in_use_bytes: int | None = None,
                        budget_bytes: int | None = None) -> list[dict]:
    """One row per figure the plan predicts and the server (or NVML) reports; diff_pct is
    (predicted - actual) / actual. Measured by NVML: `server_gpu_bytes`, the memory of the server's own
    processes (None when the driver does not list them, e.g. in a container); `gpu_in_use_bytes`, the whole
    card in use, set against the kit's recorded budget (`vram_budget_bytes`: what was in use before the
    start + the planned peak x 1.05, the line vram-safe guards)."""
    info = server_info or {}
    mem = server_memory(server_info, loads)
    graphs = next((s["bytes"] for s in (segments or {}).get("gpu", []) if s["key"] == "graphs"), None)
    rows = [
        _row("KV pool", plan["kv_pool_tokens"], info.get("max_total_num_tokens", mem.get("max_total_num_tokens")),
             "tokens", "SGLang /server_info max_total_num_tokens"),
        _row("longest prompt", plan["max_request_tokens"], info.get("max_req_input_len"), "tokens",
             "SGLang /server_info max_req_input_len"),
        _row("weights on the GPU", plan["weights_bytes"], mem.get("weights_bytes"), "bytes",
             "SGLang: weight load memory (GiB, 2 decimals)"),
        _row("KV pool memory", plan["kv_pool_bytes"], mem.get("kv_pool_bytes"), "bytes",
             "SGLang: KV cache memory (GiB, 2 decimals)"),
        _row("decode CUDA graphs", graphs, mem.get("graphs_bytes"), "bytes", "SGLang: graph memory (GiB, 2 decimals)"),
        _row("GPU memory of the server", plan["peak_vram_bytes"], server_gpu_bytes, "bytes",
             "NVML: the server's processes now (the prediction is the peak of the largest prefill step)"),
    ]
    if budget_bytes is not None:
        rows.append(_row("GPU in use vs the kit's budget", int(budget_bytes), gpu_in_use_bytes, "bytes",
                         "NVML: the whole card now; predicted = in use before the start + planned peak x 1.05"))
    return rows


# --- live history ----------------------------------------------------------------------------------

def history_point(snapshot_json: dict) -> dict:
    """One sample of the live panel's history: time and per GPU (by index) in-use bytes and percent."""
    return {"time_s": snapshot_json.get("time_s"),
            "gpus": {str(g["index"]): {"in_use_bytes": g.get("in_use_bytes"), "in_use_percent": g.get("in_use_percent"),
                                        "temperature_c": g.get("temperature_c")}
                     for g in snapshot_json.get("gpus", [])}}


def trim_history(points: list[dict], now_s: float, window_s: float, max_points: int) -> list[dict]:
    """The samples of the last `window_s` seconds, at most `max_points` (the newest)."""
    kept = [p for p in points if p.get("time_s") is not None and now_s - p["time_s"] <= window_s]
    return kept[-max_points:]
