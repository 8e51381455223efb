"""Which experts of each MoE layer the hybrid mode keeps on the GPU. Pure: routing counts in, a map out.

SGLang 0.5.15.post1's KTransformers path keeps PHYSICAL experts 0..N-1 of every layer on the GPU (the KT wrapper
masks the others to -1 for the GPU kernel; kt_ep_wrapper.py) and places the router's LOGICAL experts in physical
slots through its expert-location metadata: `--init-expert-location` with {"physical_to_logical_map": [[...]]} (one
row per layer, a permutation of the experts), which the GPU weight loader and kt-kernel's CPU weight loader follow
(eplb/expert_location.py, fused_moe_triton/layer.py, kt_kernel/utils/amx.py); the router's choice follows it only
where SGLang passes its static dispatch (below). Without it the map is trivial: logical e in slot e, so the GPU
takes experts 0..N-1 of every layer whatever the router prefers.

A request's decode rate depends on how much of its routing lands on the CPU (benchmarks/results/gpu/moe-budget.md:
the same seeded prompts on 6 servers, the fastest 1.65x the slowest at one depth; on SGLang's dummy weights, whose
layers all route alike, so wider than a trained model's). `hot_first` puts each layer's
most-routed experts in the lowest slots, from the counts SGLang's expert-distribution recorder dumps
(--expert-distribution-recorder-mode stat; `logical_count`, layers x experts); `gpu_share` says how much of that
routing the GPU then takes, against the trivial map's (derived from SGLang's source). Its speed: SPEED.

Where the router's choice goes through that map: SGLang maps the router's logical ids to physical slots only when
its MoE block passes ExpertLocationDispatchInfo to TopK. In 0.5.15.post1 Qwen3-MoE does so only on its DeepEP and
two-batch-overlap paths (qwen3_moe.py forward_deepep, op_select_experts); its normal forward (one GPU, the hybrid
mode's) calls TopK without it, so the weights would sit in the mapped slots while the router's ids index them
unmapped: every expert computed with another one's weights. The kit's kt-kernel adapter (services/sglang-kt/kt_compat)
hands TopK SGLang's own static dispatch there whenever a placement is loaded. `ADAPTER_DISPATCHED` names the
architectures where that was checked on a GPU, with the check; a placement is refused for any other, and for these
too where the adapter's dispatch is turned off (`vramkit up` stops at the check).
"""
from __future__ import annotations

import json
import math
from collections.abc import Sequence

from vramkit.errors import Exit, VramkitError

# Architecture -> how the adapter's dispatch was checked (the docstring). Measured, H100 host, 2026-11-27
# (benchmarks/results/gpu/moe-budget/hotcheck/): a random 4-layer FP8 checkpoint of Qwen3-Coder-30B-A3B's shape on disk,
# CPU experts read from the same file, 64 GPU experts a layer, every layer's experts reversed by the map; 8 greedy
# 32-token decodes against the unplaced server: the first token's log-probability moved 0.020 on average (0.047 at most)
# with the adapter's dispatch, 0.014 (0.031) when 32 experts only change between the GPU's and the CPU's kernels with no
# placement (rounding), 0.068 (0.108) with the placement and no dispatch (other experts' weights).
ADAPTER_DISPATCHED: dict[str, str] = {
    "Qwen3MoeForCausalLM": "outputs checked against the unplaced server at kernel rounding on a random-weight proxy "
                           "(benchmarks/results/gpu/moe-budget/hotcheck)",
}

# Measured, H100 host, 2026-11-27 (benchmarks/results/gpu/moe-budget.md, "The placement's speed"; a test holds the
# figures to moe-budget.json): the GPTQ split at 16 GiB, 88 GPU experts a layer, each request against the same one on
# the trivial map. In-sample it gained, out of sample it lost, so the map stays opt-in and the plan says this.
SPEED = ("decode with a placement, measured on a random-weight proxy whose layers all route alike: 1.44x the trivial "
         "map on the prompts it was recorded on, 0.84x on other prompts (benchmarks/results/gpu/moe-budget.md); "
         "record it on your own traffic")

Counts = Sequence[Sequence[float]]
Map = list[list[int]]


def check_counts(counts: Counts, layers: int, experts: int, where: str) -> list[list[float]]:
    """The counts as floats, one row per layer and a column per expert, each a finite number >= 0 and not all 0
    (else one line, exit 65: the file is not what the model's recorder writes)."""
    rows = [list(r) for r in counts]
    if len(rows) != layers or any(len(r) != experts for r in rows):
        shape = f"{len(rows)} x {sorted({len(r) for r in rows})}"
        raise VramkitError(f"{where}: routing counts of {shape}, not {layers} layers x {experts} experts",
                           "record them on a server of this model (SGLang's expert-distribution recorder)",
                           Exit.BAD_FILE)
    try:
        out = [[float(x) for x in r] for r in rows]
    except (TypeError, ValueError):
        raise VramkitError(f"{where}: a routing count is not a number", "use the recorder's dump as written",
                           Exit.BAD_FILE) from None
    if any(not math.isfinite(x) or x < 0 for r in out for x in r) or not any(x for r in out for x in r):
        raise VramkitError(f"{where}: routing counts must be finite, >= 0 and not all 0",
                           "record some requests first (POST /start_expert_distribution_record, then /dump_...)",
                           Exit.BAD_FILE)
    return out


def hot_first(counts: Counts) -> Map:
    """physical_to_logical_map: each layer's logical experts by routing count, most first (ties: lower id)."""
    def order(row: Sequence[float]) -> list[int]:
        return sorted(range(len(row)), key=lambda e: (-row[e], e))
    return [order(r) for r in counts]


def trivial(layers: int, experts: int) -> Map:
    return [list(range(experts)) for _ in range(layers)]


def check_map(mapping: object, layers: int, experts: int, where: str) -> Map:
    """A physical_to_logical_map for this model: one row per layer, each a permutation of 0..experts-1 (SGLang's
    ep_num_redundant_experts is 0 here, so no expert twice). Else one line, exit 65."""
    ok = isinstance(mapping, list) and len(mapping) == layers and all(
        isinstance(r, list) and len(r) == experts and all(isinstance(x, int) and not isinstance(x, bool) for x in r)
        and sorted(r) == list(range(experts)) for r in mapping)
    if not ok:
        raise VramkitError(f"{where}: not a physical_to_logical_map of {layers} layers, each a permutation of "
                           f"0..{experts - 1}", "write it with `vramkit kt-placement`", Exit.BAD_FILE)
    assert isinstance(mapping, list)
    return mapping


def gpu_share(counts: Counts, mapping: Map, num_gpu_experts: int) -> float:
    """The share of the counted routing that lands in physical slots 0..N-1 (on the GPU) under `mapping`."""
    on = sum(r[e] for r, m in zip(counts, mapping, strict=True) for e in m[:num_gpu_experts])
    return on / sum(sum(r) for r in counts)


def unapplied(architecture: str, adapter_dispatch: bool = True) -> str | None:
    """Why a placement would not reach this architecture's hybrid decode (None: it does, through the kit's adapter)."""
    if architecture in ADAPTER_DISPATCHED and adapter_dispatch:
        return None
    why = (f"SGLang 0.5.15.post1's {architecture} maps the router's experts through --init-expert-location only "
           "on its DeepEP / two-batch-overlap paths, not the one-GPU forward the hybrid mode runs: the experts "
           "would be loaded into slots the router does not index (wrong outputs)")
    if architecture in ADAPTER_DISPATCHED:
        return why + ", and the kit's adapter that maps them is turned off (VRAMKIT_KT_PLACEMENT_DISPATCH=0)"
    return why + "; the kit's adapter that maps them is checked only for " + ", ".join(sorted(ADAPTER_DISPATCHED))


def sglang_json(mapping: Map) -> str:
    """What --init-expert-location reads: only this key (SGLang passes every key to init_by_mapping)."""
    return json.dumps({"physical_to_logical_map": mapping}, separators=(",", ":")) + "\n"


def read_sglang_json(text: str, layers: int, experts: int, where: str) -> Map:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise VramkitError(f"{where}: not JSON ({e.msg}, line {e.lineno})", "write it with `vramkit kt-placement`",
                           Exit.BAD_FILE) from None
    if not isinstance(data, dict) or set(data) != {"physical_to_logical_map"}:
        raise VramkitError(f"{where}: SGLang reads one key, physical_to_logical_map",
                           "write it with `vramkit kt-placement`", Exit.BAD_FILE)
    return check_map(data["physical_to_logical_map"], layers, experts, where)
