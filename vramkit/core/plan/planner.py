"""What SGLang 0.5.15.post1 will allocate for a model on a GPU, and whether a target fits.

Pure: plain values in (a ModelSpec, a GpuSpec or a free-memory figure, the knobs), a Plan out. It
follows SGLang's own code, step by step:

1. Free memory at start (`pre_model_load_memory`, the log's "Load weight begin. avail mem"): the card
   minus what others hold minus the server's CUDA context and, tp > 1, NCCL (measured, config/engine.toml).
2. Weights (per TP rank): every tensor of the checkpoint as SGLang keeps it, minus `--cpu-offload-gb`
   (OffloaderV1 moves decoder-layer parameters to pinned host RAM until that many GiB), as the caching
   allocator reserves them: SGLang's allocations replayed (core/memory/weight_load.py, core/memory/torch_alloc.py).
3. KV pool (model_runner_kv_cache_mixin._profile_available_bytes + pool_configurator):
       rest   = avail_after_weights - pre_model_load_memory * (1 - mem_fraction_static)
       tokens = rest // cell_size,   cell_size = kv_heads_per_rank * (head_dim*2) * layers * kv_bytes
4. Longest request (tp_worker.get_worker_info): max_req_len = min(context_len - 1, tokens - 1) and
   max_req_input_len = max_req_len - 5; a prompt must be shorter than that.
5. After the pool: req_to_token ((max_running + 1) x (context_len + 4) int32), misc buffers, attention
   backend, decode CUDA graphs (measured), then activations of the largest prefill chunk.
6. Default `mem_fraction_static` when none is given: server_args._handle_gpu_memory_settings, from the
   card's TOTAL memory (so on a big card emulating a small one, SGLang's default is wrong: the kit
   always passes the fraction it resolved).
7. Decode ceiling: a decode step reads every GPU-resident weight once plus the KV of the context
   (bandwidth / bytes per token); offloaded weights cross PCIe every step (pcie / offloaded bytes).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from vramkit.core.checks import Reason
from vramkit.core.memory.costs import (  # noqa: F401
    KV_DTYPE_BYTES,
    KvLayout,
    activation_bytes,
    decode_read_bytes,
    kv_bytes_per_token,
    kv_layout,
    weight_components,
)
from vramkit.core.memory.weight_load import LoadResult, prelude_bytes, replay_load
from vramkit.core.model.arch import (
    CALIBRATION_HOST_SMS,
    MXFP4_PADDING,
    WeightLayout,
    bytes_by_role,
    mxfp4_backend_for,
    weight_layout,
)
from vramkit.core.model.spec import GpuSpec, ModelSpec
from vramkit.core.plan import kt_hybrid as kt
from vramkit.core.plan.knobs import Knobs, Serving, by_name
from vramkit.core.plan.kt_hybrid import HybridSection
from vramkit.errors import Exit, VramkitError
from vramkit.units import GiB, MiB, bytes2human

SGLANG_REQ_SLACK_TOKENS = 5          # max_req_input_len = max_req_len - 5 (tp_worker.get_worker_info)
REQ_TO_TOKEN_EXTRA_CONTEXT = 4       # ReqToTokenPool max_context_len = context_len + 4


@dataclass(frozen=True)
class Engine:
    """Measured runtime constants (config/engine.toml), in bytes."""

    cuda_context: int
    driver_reserved: int
    tp_comm_init: int           # per rank, tp > 1: NCCL communicators + custom all-reduce, before the weights
    tp_comm_runtime: int        # per rank, tp > 1: what the first large all-reduce adds while serving
    pre_kv: int
    post_kv_misc: int
    attention_backend: int
    decode_graph: int
    activation_factor: float
    runtime_margin: int
    hicache_host_reserve: int
    pinned_gpu_map_per_gib: int = 0   # GPU memory per GiB of pinned host memory (its page tables)
    kt: kt.KtConstants | None = None  # the hybrid MoE mode's estimate (fitted; config/engine.toml kt_*)

    def pinned_map(self, pinned_host_bytes: int) -> int:
        """GPU memory the mapping of this much pinned host memory takes."""
        return pinned_host_bytes * self.pinned_gpu_map_per_gib // GiB

    def startup_overhead(self, tp: int) -> int:
        """GPU memory the server process takes before its weights (SGLang's pre_model_load_memory is the
        card's free memory minus this)."""
        return self.cuda_context + (self.tp_comm_init if tp > 1 else 0)


@dataclass(frozen=True)
class Target:
    """Where it runs: a GPU (per rank) and the host."""

    gpu: GpuSpec | None
    gpu_free_bytes: int | None = None          # measured free memory at start, overrides the estimate
    other_used_bytes: int = 0                  # memory other processes hold on the card
    host_ram_available_bytes: int | None = None
    mxfp4_backend: str | None = None           # SGLang's MoE runner for MXFP4 (None: what it picks for the card)
    host: kt.HostCpu | None = None             # the CPU side, for the hybrid MoE mode (kt_method)
    pcie_bytes_s: float | None = None          # a measured host-to-GPU copy rate, else the card's link (spec)

    @property
    def link_bytes_s(self) -> float | None:
        return self.pcie_bytes_s or (self.gpu.pcie_bytes_s if self.gpu is not None else None)


@dataclass(frozen=True)
class Alternative:
    change: str                 # what to change, in words
    knobs: dict[str, Any]       # the knob values that make the change
    fits: bool
    decode_tok_s_ceiling: float | None
    cost: str                   # what it costs
    decode_tok_s_estimate: float | None = None   # a fitted estimate where there is no ceiling (hybrid MoE)
    why_not: str = ""           # when it does not fit either: the re-planned plan's reasons, in numbers

    @property
    def decode_rank(self) -> float:
        return self.decode_tok_s_estimate or self.decode_tok_s_ceiling or 0.0


@dataclass(frozen=True)
class Plan:
    model: str
    gpu: str
    knobs: Knobs                # every knob resolved: values, no None or "auto" (kt_method None: no hybrid mode;
                                # with it, launch/hybrid.py resolves kt_num_gpu_experts / kt_cpuinfer until core does)
    free_at_start_bytes: int
    weights_bytes: int          # on the GPU, per rank, as SGLang's "Load weight end ... mem usage"
    weights_by_component: dict[str, int]  # the checkpoint's parts, before any offload
    weights_offloaded_bytes: int
    weights_pinned_host_bytes: int  # the host RAM those pin: each tensor rounded up to a power of two
    kv_bytes_per_token: int
    kv_pool_bytes: int
    kv_pool_tokens: int
    context_len: int            # what SGLang serves (--context-length): the target, or the YaRN-scaled window
    yarn_factor: float | None
    max_request_tokens: int     # SGLang's max_req_input_len: prompts must be shorter
    max_concurrent_requests: int  # of the target context, all in the KV pool at once
    req_to_token_bytes: int
    activation_bytes: int
    peak_vram_bytes: int        # per GPU as nvidia-smi shows the server's use (context included)
    startup_free_bytes: int     # free GPU memory once the server is up (before any request)
    headroom_bytes: int         # free at the peak of the largest prefill step
    decode_tok_s_ceiling: float | None
    decode_tok_s_ceiling_batch: float | None
    weights_read_per_token_bytes: int  # GPU-resident weights one decode step reads (MoE: the experts it touches)
    host_ram_bytes: int         # pinned host RAM the server takes (hicache pool + offloaded weights; without the
                                # hybrid mode the token embeddings moved there too: host_embed_bytes)
    host_map_bytes: int         # GPU memory mapping the hierarchical cache's pinned pool (after the KV pool)
    fits: bool
    # the parts of the peak the plan's other fields do not name (the dashboard's memory bar draws them all):
    # peak = startup_overhead + weights + kv_pool + buffers + graphs + activations + comm_runtime
    card_total_bytes: int = 0   # the card (per rank); with only a free-memory figure: free + startup overhead
    held_besides_server_bytes: int = 0  # driver reserve + other processes: card - free at start - startup
    startup_overhead_bytes: int = 0   # before the weights: CUDA context (+ NCCL at tp > 1; engine.toml) + expert maps
    expert_maps_bytes: int = 0  # of it, SGLang's MoE expert-location maps (arch.expert_location_prelude; derived)
    buffers_bytes: int = 0      # pre-KV, req_to_token, post-KV misc, attention backend, host-cache mapping
    graphs_bytes: int = 0       # decode CUDA graphs' pool (with an offloaded layer's transient copy)
    comm_runtime_bytes: int = 0  # tp > 1: what the first large all-reduce adds while serving (engine.toml)
    weights_on_gpu_by_component: dict[str, int] = field(default_factory=dict)  # after --cpu-offload-gb
    weights_load_overhead_bytes: int = 0  # the load beyond its tensors: rope cache, workspaces, allocator rounding
    hicache_bytes: int = 0      # the hierarchical cache's pinned host pool (--hicache-size, GB)
    host_embed_bytes: int = 0   # the token embeddings pinned in host RAM (kt_embed_host; 0: they stay on the GPU)
    embed_freed_bytes: int = 0  # ... and the GPU memory their move gives back (in weights_bytes, as SGLang logs it)
    reasons: tuple[Reason, ...] = ()
    notes: tuple[str, ...] = ()
    alternatives: tuple[Alternative, ...] = ()
    hybrid: HybridSection | None = None   # the KT hybrid MoE mode (kt_method): its CPU side, planned in core
    serving: Serving | None = None        # the model's serving settings (names, parsers), as the catalog chose

    @property
    def decode_tok_s(self) -> float | None:
        """The plan's single-stream decode figure: the hybrid mode's fitted estimate, else the ceiling."""
        return self.hybrid.decode_tok_s if self.hybrid is not None else self.decode_tok_s_ceiling

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        if self.hybrid is not None:
            d["hybrid"] |= {"host_ram_bytes": self.hybrid.host_ram_bytes, "host_rss_bytes": self.hybrid.host_rss_bytes}
        return d


def weights_on_gpu(by_component: dict[str, int], offloaded_bytes: int) -> dict[str, int]:
    """Bytes of each weight component left on the GPU: --cpu-offload-gb moves decoder-layer tensors
    (attention, mlp) to host RAM, so the offloaded bytes come out of those two in proportion (derived)."""
    parts = {k: int(v) for k, v in by_component.items() if v}
    layers = parts.get("attention", 0) + parts.get("mlp", 0)
    if offloaded_bytes and layers:
        for k in ("attention", "mlp"):
            if k in parts:
                parts[k] -= round(offloaded_bytes * parts[k] / layers)
    return parts


# ----------------------------------------------------------------------------------------------
# SGLang's own defaults for a card (server_args._handle_gpu_memory_settings)
# ----------------------------------------------------------------------------------------------
def sglang_default_chunked_prefill(gpu_total_bytes: int) -> int:
    mib = gpu_total_bytes / MiB
    return 2048 if mib < 35 * 1024 else (4096 if mib < 60 * 1024 else (8192 if mib < 160 * 1024 else 16384))


def sglang_default_cuda_graph_max_bs(gpu_total_bytes: int, tp: int) -> int:
    mib = gpu_total_bytes / MiB
    if mib < 20 * 1024:
        return 8
    if mib < 35 * 1024:
        return 24 if tp < 4 else 80
    if mib < 60 * 1024:
        return 32 if tp < 4 else 160
    if mib < 160 * 1024:
        return 256 if tp < 4 else 512
    return 512


def _prefill_graph_sizes(max_bs: int) -> list[int]:
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
             + list(range(576, 1025, 64)) + list(range(1280, 4097, 256)) + list(range(4608, max_bs + 1, 512)))
    return [s for s in sizes if s <= max_bs]


def sglang_default_mem_fraction(gpu_total_bytes: int, chunked_prefill: int, cuda_graph_max_bs: int,
                                tp: int, prefill_cuda_graph: bool) -> float:
    """reserved_mem (MiB) = 512 + max(chunk, 2048) * 1.5 + graph max_bs * 2 + tp/8 * 1024
    (+ 8 per prefill graph size), floored at 10 GiB on cards over 60 GiB; fraction = 1 - reserved/total."""
    mib = gpu_total_bytes / MiB
    reserved = 512 + max(chunked_prefill, 2048) * 1.5
    if cuda_graph_max_bs > 0:
        reserved += cuda_graph_max_bs * 2
    reserved += tp / 8 * 1024
    if prefill_cuda_graph:
        reserved += len(_prefill_graph_sizes(chunked_prefill)) * 8
    if mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((mib - reserved) / mib, 3)


def sglang_default_max_running(kv_pool_tokens: int, context_len: int) -> int:
    """model_runner_kv_cache_mixin._resolve_max_num_reqs without a user value."""
    estimated = max(min(int(kv_pool_tokens / context_len * 512), 4096), 2048)
    return min(estimated, kv_pool_tokens // 2)


# ----------------------------------------------------------------------------------------------
# the plan
# ----------------------------------------------------------------------------------------------
def context_and_yarn(model: ModelSpec, context: int) -> tuple[int, float | None]:
    """The context SGLang will derive, and the YaRN factor needed to reach the target (None if native)."""
    native = model.max_position_embeddings
    if context <= native:
        return native, None
    factor = float(2 ** math.ceil(math.log2(context / native)))
    return int(native * factor), factor


def _as_roped(model: ModelSpec, rope_len: int) -> ModelSpec:
    """The model as SGLang builds its rotary cache: YaRN-scaled where the rope cache passes the native window (the
    kit's rope override, context_and_yarn), so the load replays YaRN's build tensors (arch.rope_build_temps)."""
    native = model.max_position_embeddings
    if rope_len <= native or model.rope_scaling:
        return model
    return replace(model, rope_scaling={"rope_type": "yarn", "factor": rope_len / native,
                                        "original_max_position_embeddings": native})


def unasked_context(model: ModelSpec, default: int) -> tuple[int, str | None]:
    """The context when neither --context nor the preset names one: the knob's default, but never beyond the
    model's native window (YaRN only when a context asks for it), with the note that says so."""
    native = model.max_position_embeddings
    if default <= native:
        return default, None
    _, factor = context_and_yarn(model, default)
    return native, (f"context {native:,} tokens, the model's native window: none was asked for, and the default "
                    f"{default:,} would need YaRN rope scaling x{factor:g} (ask for it with --context {default})")


def plan(model: ModelSpec, target: Target, knobs: Knobs, engine: Engine, *, with_alternatives: bool = True,
         candidates: tuple[ModelSpec, ...] = ()) -> Plan:
    """The plan; when it does not fit, `alternatives` re-plans each change (and each of `candidates`,
    other models the user could run instead)."""
    if knobs.kt_gpu_prefill == "auto":
        return _auto_prefill(model, target, knobs, engine, with_alternatives, candidates)
    if knobs.kt_embed_host == "auto":
        return _auto_embed(model, target, knobs, engine, with_alternatives, candidates)
    return _plan(model, target, knobs, engine, with_alternatives=with_alternatives, candidates=candidates)


def _plan(model: ModelSpec, target: Target, knobs: Knobs, engine: Engine, *, with_alternatives: bool,
          candidates: tuple[ModelSpec, ...]) -> Plan:
    """`plan` with kt_gpu_prefill resolved and kt_embed_host's auto taken as "on where the plan allows it"
    (_auto_embed then checks that the plan still fits and leaves host RAM free)."""
    reasons: list[Reason] = []
    notes: list[str] = []
    tp = max(1, knobs.tp)
    gpu = target.gpu
    total = gpu.memory_total_bytes if gpu else None

    # 1. free at start (per rank): when SGLang starts loading the weights ("Load weight begin"), after its CUDA context
    # (+ NCCL) and, for a MoE it balances, the expert-location maps (pre_load)
    pre_load = prelude_bytes(model)
    startup = engine.startup_overhead(tp) + pre_load    # what the server holds before its weights
    if target.gpu_free_bytes is not None:
        free = int(target.gpu_free_bytes)
    elif gpu is not None:
        free = gpu.memory_total_bytes - engine.driver_reserved - target.other_used_bytes - startup
    else:
        raise ValueError("plan needs a GPU or a free-memory figure")
    card_total = total if total is not None else free + startup

    # resolve SGLang's defaults from the TARGET card, never from the machine it runs on
    # --chunked-prefill-size -1 turns chunking off: the largest prefill step is a whole request
    chunk_flag = knobs.chunked_prefill or sglang_default_chunked_prefill(card_total)
    chunk = knobs.context if chunk_flag < 0 else chunk_flag
    graph_bs = knobs.cuda_graph_max_bs
    if graph_bs is None:
        graph_bs = sglang_default_cuda_graph_max_bs(card_total, tp)
    # the kit always renders --disable-prefill-cuda-graph (core/render/sglang.py): SGLang's default reserve without them
    frac = knobs.mem_fraction if knobs.mem_fraction is not None else sglang_default_mem_fraction(
        card_total, chunk_flag, graph_bs, tp, prefill_cuda_graph=False)
    # rope_len: the positions SGLang's rope cache covers (the model's window, YaRN-scaled when asked);
    # context_len: what it serves, the kit's --context-length (the target itself below the native window)
    rope_len, yarn = context_and_yarn(model, knobs.context)
    context_len = rope_len if yarn else min(knobs.context, rope_len)

    # 2. weights
    is_mxfp4 = model.quantization is not None and model.quantization.method == "mxfp4"
    if is_mxfp4 and target.mxfp4_backend is None and (gpu is None or gpu.compute_capability is None):
        # the experts' layout (and size) is the MoE runner's, which SGLang picks by compute capability: not guessed
        raise VramkitError(f"{model.name}: SGLang lays MXFP4 experts out by the card's compute capability, and "
                           f"{gpu.label if gpu else 'this card'} has none in config/gpus.toml",
                           "plan for a catalogued --gpu, or add this card with its compute_capability",
                           Exit.UNSUPPORTED_MODEL)
    mxfp4 = target.mxfp4_backend or mxfp4_backend_for(gpu.compute_capability if gpu is not None else None)
    sms = gpu.sm_count if gpu is not None and gpu.sm_count else CALIBRATION_HOST_SMS
    kv = kv_layout(model, knobs.kv_dtype, tp)
    cell = kv_bytes_per_token(model, knobs.kv_dtype, tp)
    offload_req = knobs.cpu_offload_gib
    # the hybrid MoE mode (SGLang's KTransformers path): experts 0..N-1 of each MoE layer on the GPU
    n_gpu_experts: int | None = None
    staging = 0
    if knobs.kt_gpu_prefill and not knobs.kt_method:
        notes.append(f"{by_name()['kt_gpu_prefill'].cli_flag} {knobs.kt_gpu_prefill} not used: it moves the hybrid "
                     "MoE mode's CPU layers to the GPU for prompts, and this plan has none")
    if knobs.kt_method:
        kt.check_model(model, knobs.kt_method)
        if str(offload_req) != "0":
            raise VramkitError(f"--kt-method {knobs.kt_method} with --cpu-offload-gb {offload_req}: the hybrid MoE "
                               "mode keeps the other weights on the GPU", "drop one of them", Exit.BAD_INPUT)
        # the GPU prompt path (kt_gpu_prefill): its staging set is allocated with the weights
        if knobs.kt_gpu_prefill:
            if (cannot := _prefill_problem(model, knobs)) is not None:
                reasons.append(Reason("kt_gpu_prefill", f"{by_name()['kt_gpu_prefill'].cli_flag} "
                                      f"{knobs.kt_gpu_prefill}: {cannot}; 0 leaves prompts on kt-kernel"))
            else:
                staging = kt.prefill_staging_bytes(model, knobs.kt_prefill_fp8)
        n_gpu_experts = _gpu_experts(model, knobs, tp, rope_len, sms, mxfp4, free, frac, engine, kv, staging)
        if knobs.kt_num_gpu_experts == "auto" and model.moe is not None and n_gpu_experts == model.moe.num_experts:
            # every expert fits beside the pool: the hybrid mode would only cost (kt-kernel still holds every
            # expert in host RAM, and SGLang's KT wrapper waits on the CPU once per MoE layer for no expert)
            notes.append(f"every expert fits on the GPU ({model.moe.num_experts} per MoE layer beside a KV pool "
                         f"for {max(1, knobs.concurrency)} x {knobs.context:,} tokens): planned without the hybrid "
                         f"MoE mode (--kt-method {knobs.kt_method} dropped: no kt-kernel, no CPU round trip per layer)")
            if knobs.kt_gpu_prefill:
                notes.append(f"{by_name()['kt_gpu_prefill'].cli_flag} {knobs.kt_gpu_prefill} not used: every "
                             "expert is on the GPU already")
            knobs = replace(knobs, kt_method=None, kt_cpuinfer="auto", kt_gpu_prefill=0)
            n_gpu_experts, staging = None, 0
    # the GPU kernel of GPTQ/AWQ experts (it sets their layout): moe_wna16 where a layer is split, as SGLang needs
    whole_layers = knobs.kt_gpu_layers == "auto"
    model, moe_kernel = kt.moe_kernel(model, knobs.moe_kernel, n_gpu_experts, whole_layers)
    if moe_kernel == "wna16":
        notes.append(kt.wna16_note(model, asked=knobs.moe_kernel == "wna16"))
    counts = None if n_gpu_experts is None or model.moe is None else kt.gpu_expert_counts(
        model, n_gpu_experts, whole_layers)
    comps = weight_components(model, tp, mxfp4, gpu_experts=counts)
    layout = weight_layout(_as_roped(model, rope_len), tp, rope_len, sms, mxfp4, gpu_experts=counts)
    layer_sizes = layout.layer_bytes
    layer_bytes = sum(layer_sizes)
    if offload_req == "auto":
        # what the load reserves with nothing offloaded: tensors, rope cache and the allocator's slack
        on_gpu = replay_load(layout).gpu_reserved_bytes
        offload_req = _auto_offload_gib(free, frac, on_gpu + engine.pre_kv, cell, knobs, layer_bytes)
    offload_req = int(offload_req)
    load = _replay(layout, min(offload_req * GiB, layer_bytes), model, counts, staging, knobs.kt_prefill_fp8)
    offloaded = load.offloaded_bytes
    # the pinned copies are mapped for the GPU while the weights load: their page tables count in "mem usage"
    weights_gpu = _weights_on_gpu(load, engine, _path_pinned(model, counts, staging, knobs))
    # kt_embed_host: the token embeddings leave the GPU after the load (counted in the weights, as SGLang logs them)
    hybrid_plan = n_gpu_experts is not None
    embed_freed, embed_pinned = _embed_freed(layout, knobs, model, tp, offloaded)
    resident = weights_gpu - embed_freed      # the weights the GPU keeps once the server is up
    if knobs.kt_embed_host != "off":
        flag, asked = by_name()["kt_embed_host"].cli_flag, knobs.kt_embed_host
        if (cannot := kt.embed_host_problem(model, tp, offloaded)) is not None:
            if asked == "on":
                reasons.append(Reason("kt_embed_host", f"{flag} on: {cannot}; off keeps the embeddings on the GPU"))
            else:     # auto: say why they stay
                notes.append(f"{flag} auto: the token embeddings stay on the GPU: {cannot}")
        elif embed_freed:
            notes.append(f"{flag} {asked}: the token embeddings ({bytes2human(embed_freed)}) move to pinned host RAM "
                         f"once the weights are loaded ({bytes2human(embed_pinned)} pinned: PyTorch's allocator rounds "
                         "to a power of two) and the GPU reads a token's row over the bus; the weights row counts them "
                         "as SGLang's \"Load weight end\" does, and the KV pool gets their GPU memory; "
                         + (kt.EMBED_HOST_MEASURED if hybrid_plan else kt.EMBED_HOST_DENSE))

    # 3. KV pool
    rest = _pool_room(free, pre_load, resident, engine, frac)
    kv_tokens = kv.tokens(rest)
    if rest <= 0:
        need = 1 - (free - resident - engine.pre_kv) / (free + pre_load)
        reasons.append(Reason("weights", f"the weights ({bytes2human(weights_gpu)}) leave no room for a KV cache at "
                       f"mem_fraction_static {frac}: SGLang refuses to start (needs > {need:.3f})"))
    kv_pool_bytes = kv.pool_bytes(kv_tokens)

    # 4. longest request, concurrency
    max_req_len = min(context_len - 1, kv_tokens - 1)
    max_request = max(0, max_req_len - SGLANG_REQ_SLACK_TOKENS)
    conc = kv_tokens // knobs.context if knobs.context > 0 else 0
    max_running = knobs.max_running or (sglang_default_max_running(kv_tokens, context_len) if kv_tokens > 1 else 1)

    # 5. after the pool
    req_to_token = (max_running + 1) * (context_len + REQ_TO_TOKEN_EXTRA_CONTEXT) * 4
    # --cpu-offload-gb: SGLang's OffloaderV1 copies a layer's offloaded parameters to the GPU on every forward
    # (srt/utils/offloader.py: `v.to(device)` over the layer's state_dict), so up to one decoder layer's worth
    # is on the GPU while that layer runs: once in the decode graphs' pool (the copies are captured) and once
    # beside the eager prefill's activations. Derived from the source; the two offload calibration points
    # (moe-offload-24g, folder-qwen3-8b-16g) put the peak within 0.2 %.
    offload_transient = min(offloaded, max(layer_sizes))
    graphs = engine.decode_graph + offload_transient if graph_bs > 0 else 0
    act = activation_bytes(model, chunk, tp, engine.activation_factor) + offload_transient
    hicache_bytes = int(knobs.hicache_gb * 1e9)
    host_map = engine.pinned_map(hicache_bytes)       # registered after the pool: counts after start-up
    used_after_start = resident + engine.pre_kv + kv_pool_bytes + req_to_token + engine.post_kv_misc \
        + engine.attention_backend + graphs + host_map
    startup_free = free - used_after_start
    headroom = startup_free - act
    comm_runtime = engine.tp_comm_runtime if tp > 1 else 0
    headroom -= comm_runtime
    peak = startup + used_after_start + act + comm_runtime

    # verdicts
    if model.num_heads % tp or (model.mla is None and model.num_kv_heads % tp and tp % model.num_kv_heads):
        reasons.append(Reason("tp", f"tensor parallel size {tp} does not divide the model's {model.num_heads} "
                              f"attention heads / {model.num_kv_heads} KV heads: SGLang asserts it at load"))
    if kv_tokens > 0 and kv_tokens < knobs.context:
        reasons.append(Reason(
            "kv", f"one {knobs.context:,}-token request needs {bytes2human(knobs.context * cell)} of KV cache "
            f"({'fp8' if cell_is_fp8(knobs.kv_dtype) else 'fp16/bf16'}, {cell:,} B/token); the pool holds "
            f"{kv_tokens:,} tokens ({bytes2human(kv_pool_bytes)}), so SGLang refuses prompts of "
            f"{max_request:,} tokens or more"))
    elif kv_tokens > 0 and conc < knobs.concurrency:
        reasons.append(Reason("concurrency", f"{knobs.concurrency} requests of {knobs.context:,} tokens need "
                       f"{knobs.concurrency * knobs.context:,} KV tokens; the pool holds {kv_tokens:,} "
                       f"({conc} at once)"))
    if kv_tokens > 0 and headroom < engine.runtime_margin:
        reasons.append(Reason(
            "headroom", f"after start-up only {bytes2human(startup_free)} stays free for activations "
            f"({bytes2human(act)} for a {chunk}-token prefill step"
            + (f", req_to_token table {bytes2human(req_to_token)}" if req_to_token > 256 * MiB else "")
            + f"): below the {bytes2human(engine.runtime_margin, 'MiB', 0)} margin, the first long prefill "
              f"or the graph capture can run out of memory; lower mem_fraction_static"))
    if yarn:
        notes.append(f"context {knobs.context:,} > the model's native {model.max_position_embeddings:,}: "
                     f"YaRN rope scaling x{yarn:g} (quality beyond the native window is the model's, "
                     f"not guaranteed)")

    notes.extend(model.notes)
    if is_mxfp4:
        why = {"marlin": "SM120's MoE runner", "flashinfer": "SM100's MoE runner",
               "triton_kernels": "needs the triton_kernels package, which SGLang's image has and a plain pip "
                                 "install lacks"}
        pad_i, pad_h = MXFP4_PADDING[mxfp4]
        notes.append(f"MXFP4 experts laid out for {mxfp4} ({why[mxfp4]}): intermediate padded to a multiple of "
                     f"{pad_i}" + (f", hidden to {pad_h}" if pad_h > 1 else ""))
    if model.sliding is not None and not model.sliding.hybrid_pool:
        notes.append(f"SGLang disables its hybrid sliding-window pool for {model.architecture}: every layer "
                     f"keeps every token (one full pool; window {model.sliding.window} not used for memory)")
    if model.sliding is not None and model.sliding.hybrid_pool:
        notes.append(f"hybrid sliding-window pool: {kv.full_layers} full-attention layers hold {kv_tokens:,} tokens, "
                     f"{kv.swa_layers} sliding layers {int(kv_tokens * kv.swa_ratio):,} (swa_full_tokens_ratio 0.8)")

    if offloaded and not sglang_can_offload(model):
        reasons.append(Reason(
            "sglang", f"SGLang 0.5.15.post1 cannot serve {model.architecture} (MLA) with --cpu-offload-gb: the "
            f"absorbed w_kc/w_vc copies stay in host RAM and the first forward fails ('Expected all tensors to be "
            f"on the same device', measured 2026-11-24); use fp8 KV, a shorter context or more GPUs"))

    if model.quantization is not None and model.quantization.method == "gguf" and (tp > 1 or offloaded):
        # measured on one GPU with every weight on it (benchmarks/results/gpu/gguf-qwen2.json); a fused GGUF
        # linear is built after loading, outside the offloader, and its rows split per rank in ggml blocks
        what = "tensor parallel" if tp > 1 else _flag("cpu_offload_gib")
        reasons.append(Reason("sglang", "the kit has measured SGLang serving a GGUF on one GPU with every weight on "
                              f"it, not {what}: it does not plan that; use one GPU and no weight offload, or the "
                              "model's safetensors build"))

    # host RAM (a hybrid plan counts the moved embeddings in its own section, with kt-kernel's experts)
    host_ram, host_reserve = host_ram_need(hicache_bytes, load.pinned_host_bytes, engine)
    host_ram += 0 if hybrid_plan else embed_pinned
    avail = target.host_ram_available_bytes
    if host_ram and avail is not None and host_ram > avail - host_reserve:
        if embed_pinned and not hybrid_plan and host_ram == embed_pinned:
            reasons.append(Reason("host_ram", f"the token embeddings pin {bytes2human(embed_pinned)} of host RAM "
                                  f"(--kt-embed-host on); only {bytes2human(avail)} is available"))
        elif hicache_bytes:
            reasons.append(Reason(
                "host_ram", f"hierarchical cache of {knobs.hicache_gb:g} GB"
                + (f" plus {bytes2human(offloaded)} of offloaded weights" if offloaded else "")
                + (f" plus {bytes2human(embed_pinned)} of token embeddings" if embed_pinned and not hybrid_plan else "")
                + f" needs that much pinned host RAM and SGLang keeps {bytes2human(host_reserve, digits=0)} free: "
                  f"only {bytes2human(avail)} is available"))
        else:
            reasons.append(Reason("host_ram", f"weight offload pins {bytes2human(load.pinned_host_bytes)} of host "
                                  f"RAM ({bytes2human(offloaded)} of weights, each tensor rounded up to a power of "
                                  f"two by PyTorch's pinned allocator); only {bytes2human(avail)} is available"))
    if hicache_bytes and hicache_bytes // cell <= kv_tokens:
        notes.append("the host cache is not larger than the GPU pool: SGLang warns and it adds little")

    # 7. decode ceilings (the hybrid mode: an estimate, fitted, in its own section)
    ceiling, ceiling_batch = None, None
    read_per_token = decode_read_bytes(model, load.live_by_role, 1, tp)
    hybrid = None
    if n_gpu_experts is not None:
        hybrid = _hybrid_section(model, target, knobs, engine, n_gpu_experts, load, cell, tp, reasons, notes,
                                 staging, step=chunk, embed_pinned=embed_pinned)
    elif gpu is not None:
        link = target.link_bytes_s or gpu.pcie_bytes_s
        # the GPU-resident tensors after conversion; MoE: only the experts a step touches
        t_weights = read_per_token / gpu.bandwidth_bytes_s + offloaded / link
        t_kv = cell * knobs.context / gpu.bandwidth_bytes_s     # one stream's KV at the full target context
        ceiling = 1.0 / (t_weights + t_kv)
        n = max(1, min(knobs.concurrency, conc or 1))
        t_weights_n = decode_read_bytes(model, load.live_by_role, n, tp) / gpu.bandwidth_bytes_s \
            + offloaded / link
        ceiling_batch = n / (t_weights_n + n * t_kv)
        if offloaded:
            notes.append(f"{bytes2human(offloaded)} of weights cross PCIe gen{gpu.pcie_gen} x{gpu.pcie_lanes} "
                         f"({link / 1e9:.1f} GB/s{', measured' if target.pcie_bytes_s else ''}) every decode step")

    resolved = replace(knobs, mem_fraction=frac, chunked_prefill=chunk_flag, cuda_graph_max_bs=graph_bs,
                       max_running=max_running, cpu_offload_gib=offload_req, moe_kernel=moe_kernel)
    if hybrid is not None:
        resolved = replace(resolved, kt_method=hybrid.kt_method, kt_num_gpu_experts=hybrid.num_gpu_experts,
                           kt_cpuinfer=hybrid.cpuinfer_threads)
    else:
        # no hybrid mode: every expert of every MoE layer is on the GPU and no CPU thread computes one
        resolved = replace(resolved, kt_num_gpu_experts=model.moe.num_experts if model.moe else 0, kt_cpuinfer=0)
    p = Plan(
        model=model.name, gpu=gpu.name if gpu else "given-free-memory", knobs=resolved,
        free_at_start_bytes=free, weights_bytes=weights_gpu, weights_by_component=comps,
        weights_offloaded_bytes=offloaded, weights_pinned_host_bytes=load.pinned_host_bytes,
        kv_bytes_per_token=cell, kv_pool_bytes=kv_pool_bytes,
        kv_pool_tokens=kv_tokens, context_len=context_len, yarn_factor=yarn, max_request_tokens=max_request,
        max_concurrent_requests=conc, req_to_token_bytes=req_to_token, activation_bytes=act,
        peak_vram_bytes=peak, startup_free_bytes=startup_free, headroom_bytes=headroom,
        decode_tok_s_ceiling=ceiling, decode_tok_s_ceiling_batch=ceiling_batch,
        weights_read_per_token_bytes=read_per_token, host_ram_bytes=host_ram,
        host_map_bytes=host_map, fits=not reasons,
        card_total_bytes=card_total,
        held_besides_server_bytes=max(0, card_total - free - startup),
        startup_overhead_bytes=startup, expert_maps_bytes=pre_load,
        weights_load_overhead_bytes=max(0, weights_gpu - sum(weights_on_gpu(comps, offloaded).values())),
        buffers_bytes=engine.pre_kv + req_to_token + engine.post_kv_misc + engine.attention_backend + host_map,
        graphs_bytes=graphs, comm_runtime_bytes=comm_runtime,
        weights_on_gpu_by_component=weights_on_gpu(comps, offloaded), hicache_bytes=hicache_bytes,
        host_embed_bytes=embed_pinned, embed_freed_bytes=embed_freed,
        reasons=tuple(reasons), notes=tuple(notes), hybrid=hybrid, serving=model.serving,
    )
    if with_alternatives and not p.fits:
        p = replace(p, alternatives=tuple(alternatives(model, target, knobs, engine, p, candidates)))
    return p



def _auto_prefill(model: ModelSpec, target: Target, knobs: Knobs, engine: Engine, with_alternatives: bool,
                  candidates: tuple[ModelSpec, ...]) -> Plan:
    """kt_gpu_prefill = "auto": the GPU prompt path from the CPU method's auto_prefill_tokens where it can run and the
    plan fits with it (its staging set on the GPU, its pinned copies in host RAM), else the plan without it and a
    note why."""
    off = replace(knobs, kt_gpu_prefill=0)
    if not knobs.kt_method:
        return plan(model, target, off, engine, with_alternatives=with_alternatives, candidates=candidates)
    tokens = kt.auto_prefill_tokens(knobs.kt_method)
    fmt = kt.prefill_format(model, knobs.kt_prefill_fp8)
    if (why := _prefill_problem(model, knobs)) is None and fmt not in kt.PREFILL_MEASURED:
        why = (f"its {fmt} experts' path has not run in a server on a GPU yet "
               f"({by_name()['kt_gpu_prefill'].cli_flag} {tokens} turns it on)")
    if why is None:
        on = plan(model, target, replace(knobs, kt_gpu_prefill=tokens), engine,
                  with_alternatives=False)
        ram = target.host_ram_available_bytes
        if on.hybrid is None or not on.hybrid.prefill_gpu_bytes:
            why = "the plan has no CPU layers"
        elif on.fits and ram is not None and on.hybrid.host_ram_bytes > (1 - kt.AUTO_PREFILL_HOST_HEADROOM) * ram:
            why = (f"with its {bytes2human(on.hybrid.host_prefill_bytes)} of pinned host RAM the server would hold "
                   f"{bytes2human(on.hybrid.host_ram_bytes)} of the {bytes2human(ram)} available, more than "
                   f"{100 * (1 - kt.AUTO_PREFILL_HOST_HEADROOM):.0f} % (auto leaves the rest to the desktop; "
                   f"{by_name()['kt_gpu_prefill'].cli_flag} {tokens} asks for it anyway)")
        elif on.fits:
            return _with_prefill_cost(on, plan(model, target, off, engine, with_alternatives=False))
        else:
            why = (f"the plan does not fit with its {bytes2human(on.hybrid.prefill_gpu_bytes)} on the GPU and "
                   f"{bytes2human(on.hybrid.host_prefill_bytes)} of pinned host RAM ({on.reasons[0]})")
    base = plan(model, target, off, engine, with_alternatives=with_alternatives, candidates=candidates)
    if base.hybrid is None:
        return base
    flag = by_name()["kt_gpu_prefill"].cli_flag
    return replace(base, notes=(*base.notes, f"the GPU prompt path ({flag} auto) is off: {why}; prompt chunks run on "
                                "kt-kernel"))


def _auto_embed(model: ModelSpec, target: Target, knobs: Knobs, engine: Engine, with_alternatives: bool,
                candidates: tuple[ModelSpec, ...]) -> Plan:
    """kt_embed_host = "auto": the token embeddings in pinned host RAM where the plan allows the move (else on the GPU
    with the reason in a note) and the plan fits with it, leaving a tenth of the available host RAM free as the GPU
    prompt path's auto does; else the plan with them on the GPU and a note why. Inside kt_gpu_prefill's auto, so the
    prompt path (the larger lever) keeps the host RAM first."""
    on = _plan(model, target, knobs, engine, with_alternatives=False, candidates=candidates)
    if not on.host_embed_bytes:      # not moved: the plan says why
        return on if on.fits or not with_alternatives else \
            _plan(model, target, knobs, engine, with_alternatives=True, candidates=candidates)
    ram = target.host_ram_available_bytes
    held = on.hybrid.host_ram_bytes if on.hybrid is not None else on.host_ram_bytes
    flag, moved = by_name()["kt_embed_host"].cli_flag, bytes2human(on.host_embed_bytes)
    if not on.fits:
        why = f"the plan does not fit with their {moved} pinned in host RAM ({on.reasons[0]})"
    elif ram is not None and held > (1 - kt.AUTO_PREFILL_HOST_HEADROOM) * ram:
        why = (f"with their {moved} pinned the server would hold {bytes2human(held)} of the "
               f"{bytes2human(ram)} available, more than {100 * (1 - kt.AUTO_PREFILL_HOST_HEADROOM):.0f} % (auto "
               f"leaves the rest to the desktop; {flag} on asks for it anyway)")
    else:
        return on
    off = _plan(model, target, replace(knobs, kt_embed_host="off"), engine, with_alternatives=with_alternatives,
                candidates=candidates)
    if not off.fits and not on.fits and not any(r.kind == "host_ram" for r in on.reasons):
        # short on the GPU either way: the plan with them moved is the nearer one, and its alternatives start there
        return _plan(model, target, knobs, engine, with_alternatives=with_alternatives, candidates=candidates)
    return replace(off, notes=(*off.notes, f"{flag} auto: the token embeddings stay on the GPU: {why}"))


def _prefill_problem(model: ModelSpec, knobs: Knobs) -> str | None:
    """Why the GPU prompt path cannot run with these knobs (kt.prefill_problem on the placement and MoE kernel they
    ask for), None where it can."""
    whole = knobs.kt_gpu_layers == "auto"
    return kt.prefill_problem(model, whole, kt.moe_kernel(model, knobs.moe_kernel, 0, whole)[1])


def _prefill_copy_words(model: ModelSpec, target: Target, cpu_layers: int, chunk: int, context: int,
                        fp8_as: str) -> str:
    """What the GPU prompt path copies over this card's link: each chunk the CPU layers' experts (derived)."""
    link = target.link_bytes_s
    if not link or chunk <= 0:
        return ""
    per_chunk = sum(kt.prefill_tensors(model, fp8_as)) * cpu_layers
    card = target.gpu.label if target.gpu else "the card"
    source = "measured" if target.pcie_bytes_s else \
        f"{card}'s spec; the H100 host's pinned copies ran 50.6 GB/s of its 63"
    return (f"; each {chunk:,}-token chunk copies {bytes2human(per_chunk)} over the link, ~{per_chunk / link:.2f} s at "
            f"{link / 1e9:.0f} GB/s ({source}): ~{math.ceil(context / chunk) * per_chunk / link:.1f} s of a "
            f"{context:,}-token prompt (derived)")


def _with_prefill_cost(on: Plan, off: Plan) -> Plan:
    """The auto-chosen GPU prompt path's plan with what it costs beside the same plan without it: the GPU layers its
    staging set takes and the decode estimates of both."""
    a, b = on.hybrid, off.hybrid
    if a is None or b is None or not off.fits or b.gpu_layers <= a.gpu_layers:
        return on
    lost, flag = b.gpu_layers - a.gpu_layers, by_name()["kt_gpu_prefill"].cli_flag
    return replace(on, notes=(*on.notes, f"the GPU prompt path ({flag} auto) costs {lost} GPU layer"
                              f"{'s' if lost > 1 else ''} for its staging set: decode ~{a.decode_tok_s:.0f} tok/s "
                              f"here against ~{b.decode_tok_s:.0f} with {flag} 0 (estimates, at "
                              f"{a.decode_context_tokens:,} tokens of context); 0 keeps the layer and prompts on "
                              "kt-kernel"))


def _replay(layout: WeightLayout, offload: int, model: ModelSpec, counts: int | tuple[int, ...] | None,
            staging: int, fp8_as: str) -> LoadResult:
    """The replayed load, with the GPU prompt path's staging set (`staging` > 0) allocated where the adapter does:
    while SGLang converts the first CPU layer's experts (whole layers: the first decoder layer without GPU experts),
    its block-FP8 set after emptying the cache, its GPTQ set in what the cache holds then."""
    cpu = _path_layers(counts, staging)
    if not cpu:
        return replay_load(layout, offload)
    return replay_load(layout, offload, staging=kt.prefill_tensors(model, fp8_as), staging_after_layer=cpu[0],
                       staging_fresh=kt.block_fp8(model), cpu_layers=cpu,
                       layer_work=kt.prefill_layer_work(model, fp8_as))


def _path_layers(counts: int | tuple[int, ...] | None, staging: int) -> tuple[int, ...]:
    """The CPU layers the GPU prompt path copies, where it is planned (`staging` > 0, whole layers): the decoder layers
    without GPU experts; () otherwise."""
    if not staging or not isinstance(counts, tuple):
        return ()
    return tuple(i for i, c in enumerate(counts) if not c)


def _weights_on_gpu(load: LoadResult, engine: Engine, path_pinned: int = 0) -> int:
    """SGLang's "Load weight end ... mem usage" for a replayed load (the GPU prompt path's staging set in it, _replay):
    its reserve and the page tables of the pinned copies mapped while the weights load, the offloaded weights' and the
    GPU prompt path's (`path_pinned`: the CPU layers' copies the adapter pins as it converts each). A marlin GPTQ MoE
    load's free space inside its segments is the replay's own (arch.py: the repack's per-expert work tensors; until
    2026-11-28 a measured 68 MiB allowance, marlin_moe_holes_mib, stood for it)."""
    return load.gpu_reserved_bytes + engine.pinned_map(load.pinned_host_bytes + path_pinned)


def _path_pinned(model: ModelSpec, counts: int | tuple[int, ...] | None, staging: int, knobs: Knobs) -> int:
    """The GPU prompt path's pinned copies (_weights_on_gpu): every CPU layer's, where the path is planned."""
    cpu = _path_layers(counts, staging)
    return kt.prefill_pinned_bytes(model, len(cpu), knobs.kt_prefill_pin, knobs.kt_prefill_fp8) if cpu else 0


def _embed_freed(layout: WeightLayout, knobs: Knobs, model: ModelSpec, tp: int, offloaded: int = 0) -> tuple[int, int]:
    """(GPU bytes freed, host bytes pinned) by kt_embed_host = "on" or "auto" where it can run
    (kt.embed_host_problem), else (0, 0): the adapter moves the token embeddings (the layout's head) after SGLang's
    "Load weight end", so they count in the weights as SGLang logs them, and their segment goes back before the KV
    pool is sized (SGLang empties the allocator's cache before it reads the free memory: get_available_gpu_memory)."""
    if knobs.kt_embed_host == "off" or kt.embed_host_problem(model, tp, offloaded) is not None:
        return 0, 0
    return kt.embed_host_bytes(sum(p.nbytes for p in layout.head))


def _pool_room(free: int, maps: int, weights: int, engine: Engine, frac: float) -> float:
    """What SGLang leaves its KV pool: the memory free at "Load weight begin" less the weights and the buffers it
    allocates before the pool, less its slack, a (1 - mem_fraction_static) share of what was free before the expert
    maps (model_runner_kv_cache_mixin: pre_model_load_memory)."""
    return (free - weights - engine.pre_kv) - (free + maps) * (1 - frac)


def _gpu_experts(model: ModelSpec, knobs: Knobs, tp: int, rope_len: int, sms: int, mxfp4: str, free: int,
                 frac: float, engine: Engine, kv: KvLayout, staging: int = 0) -> int:
    """The hybrid mode's N: the asked count, or ("auto") the largest whose KV pool still holds concurrency x
    context tokens, each candidate's weights replayed like any plan's (binary search: fewer GPU experts, more KV)."""
    assert model.moe is not None
    e = model.moe.num_experts
    if knobs.kt_num_gpu_experts != "auto":
        n = int(knobs.kt_num_gpu_experts)
        if n > e:
            raise VramkitError(f"--kt-num-gpu-experts {n}: {model.name} has {e} experts per MoE layer",
                               f"give 0-{e}, or auto", Exit.BAD_INPUT)
        return n
    need = knobs.context * max(1, knobs.concurrency)

    whole = knobs.kt_gpu_layers == "auto"
    maps = prelude_bytes(model)     # the expert maps: the same for every N (the layers and experts, not their format)

    def kv_tokens(n: int) -> int:
        priced, kernel = kt.moe_kernel(model, knobs.moe_kernel, n, whole)
        counts = kt.gpu_expert_counts(model, n, whole)
        layout = weight_layout(_as_roped(priced, rope_len), tp, rope_len, sms, mxfp4, gpu_experts=counts)
        load = _replay(layout, 0, priced, counts, staging, knobs.kt_prefill_fp8)
        weights = _weights_on_gpu(load, engine, _path_pinned(priced, counts, staging, knobs))
        freed = _embed_freed(layout, knobs, model, tp)[0]
        return kv.tokens(_pool_room(free, maps, weights - freed, engine, frac))

    lo, hi = 0, e
    if kv_tokens(0) < need:
        return 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if kv_tokens(mid) >= need else (lo, mid - 1)
    return lo


HYBRID_CONTEXTS = (512, 8192)     # besides the target context, where the decode estimate is also given
FOUR_STREAM_CONTEXT = 512 + 64     # the aggregate's depth: 512-token prompts, half of 128 decoded tokens (moe_probe.py)


def _hybrid_section(model: ModelSpec, target: Target, knobs: Knobs, engine: Engine, n: int, load: LoadResult,
                    cell: int, tp: int, reasons: list[Reason], notes: list[str], staging: int = 0,
                    step: int = 0, embed_pinned: int = 0) -> HybridSection:
    """The CPU side of a hybrid plan (its GPU figures are the plan's own): the method this CPU runs, the
    threads, host RAM as kt-kernel holds every expert, the decode estimate and layer offload beside it. `staging`: the
    GPU prompt path's staging set (0: none); `step`: the plan's largest prefill step, what the path copies for."""
    moe, host, k, gpu = model.moe, target.host, engine.kt, target.gpu
    assert moe is not None and knobs.kt_method
    if host is None or k is None:
        raise ValueError("the hybrid MoE plan needs Target.host (the CPU side) and Engine.kt (config/engine.toml)")
    if gpu is None:
        raise VramkitError("the hybrid MoE plan needs the card's bandwidth", "name a catalogued --gpu, or give "
                           "--gpu-bandwidth-gbs and --gpu-pcie", Exit.BAD_INPUT)
    asked = knobs.kt_method
    if host.isa is None:
        method, why = None, "this CPU has not even AVX2: no kt-kernel build runs on it"
    else:
        method, why = kt.resolve_method(model, asked, host.isa, host.kt_kernel)
    # none runs from a wheel: plan the one a build from source would run (its figures), the reason says so
    planned = method or (kt.source_build_method(model, host.isa) if host.isa else None) or asked
    threads = kt.cpuinfer_threads(host.physical_cores, k.reserved_cores) if knobs.kt_cpuinfer == "auto" \
        else int(knobs.kt_cpuinfer)
    if threads >= host.physical_cores > 1:
        raise VramkitError(kt.oversubscribed(threads, host.physical_cores, host.cores_source),
                           f"give --kt-cpuinfer {kt.cpuinfer_threads(host.physical_cores, k.reserved_cores)} or "
                           "less, or leave it to the plan", Exit.BAD_INPUT)
    each = kt.cpu_expert_bytes(model, planned)
    # whole layers (kt_gpu_layers = "auto"): the GPU's layers are built without KT, so kt-kernel holds the CPU's
    # layers only; split: every expert of every layer, the GPU's share included (ktransformers #2084). The GPU side
    # is planned as the adapter loads it (kt.gpu_expert_counts: all of a GPU layer's experts, none of a CPU
    # layer's), which the H100 host's loads follow: the GPTQ-Int4 one 0.04 GiB over the split's, the FP8 one 0.19
    # GiB under it, where N experts in every layer had planned FP8's pool 12 % short (kt-estimate.md)
    as_whole = kt.whole_moe_layers(model, n)
    gpu_layers = as_whole if knobs.kt_gpu_layers == "auto" else 0
    kt_layers = moe.num_moe_layers - gpu_layers
    staged = staging if kt_layers else 0        # the GPU prompt path, where a CPU layer is left to serve
    experts_host = moe.num_experts * kt_layers * each
    chunk = knobs.chunked_prefill if knobs.chunked_prefill and knobs.chunked_prefill > 0 else 8192
    pinned = 2 * 2 * chunk * model.hidden_size * 2 * 2      # KExpertsCPUBuffer: in + out, 2 slots, bf16
    meth = kt.KT_METHODS[planned]
    # the mapped pages (RSS, reclaimable): the checkpoint for the methods that read it; for a GGUF, kt-kernel's
    # GGUFLoader keeps its numpy memmap, so the expert tensors' pages, read once while the experts are copied,
    # stay mapped beside the copies (the H100-host runs: benchmarks/results/gpu/kt-llamafile/). As whole layers,
    # kt-kernel maps the CPU layers' expert files only: their pages, as it holds them (measured: --kt-method FP8
    # with 31 CPU layers held 17.4 GiB more shared RSS than AMXINT8 beside it, these 17.4; the whole checkpoint's
    # 29.0 had planned RSS 16 % over; benchmarks/results/gpu/moe-vs-llamacpp-q8/h200-fp8cpu/)
    checkpoint = experts_host if meth.gguf_type or (gpu_layers and meth.reads is not None) else \
        sum(bytes_by_role(weight_layout(model, 1, 1)).values()) if meth.reads is not None else 0
    live = load.live_by_role
    gpu_read = decode_read_bytes(model, live, 1, tp)
    gpu_expert_read = int(live.get("experts", 0) * moe.top_k / moe.num_experts)

    # the build the CPU experts run on: the wheel's, or the AVX2 kernels a source build would run; None for
    # llamafile's kernels, the same code in every build (no build factor applies to them)
    build = None if not meth.kt_kernels else kt.build_for(planned, host.isa, host.kt_kernel) if method and host.isa \
        else ("avx2" if host.isa == "avx2" and planned in kt.AVX2_SOURCE else None)

    # the CPU layers' decode on the kit's int4 kernel (kt_cpu_decode = "int4"): its bytes and its pace, no kt-kernel
    # build factor (its own code, measured on the AVX-512 / AMX host); refused where it cannot run
    no_int4 = kt.int4_decode_problem(model, bool(gpu_layers))
    int4 = knobs.kt_cpu_decode in ("int4", "auto") and no_int4 is None
    if knobs.kt_cpu_decode == "int4" and no_int4 is not None:
        reasons.append(Reason("kt_cpu_decode", f"{by_name()['kt_cpu_decode'].cli_flag} int4: {no_int4}; "
                              "kt keeps the decode on kt-kernel's method"))
    decode_each = kt.int4_decode_bytes(model) if int4 else each
    int4_pace = kt.INT4_DECODE + ("_AVX2" if host.isa == "avx2" else "")      # its AVX2 build on an AVX2-only host

    def estimate(context: int) -> kt.DecodeEstimate:
        return kt.decode_estimate(model, num_gpu_experts=n, cpu_expert_bytes_each=decode_each, threads=threads,
                                  context=context, kv_bytes_per_token=cell,
                                  gpu_non_expert_read=gpu_read - gpu_expert_read,
                                  gpu_expert_read=gpu_expert_read, gpu_bandwidth_bytes_s=gpu.bandwidth_bytes_s,
                                  host=host, k=k, build=None if int4 else build, gpu_layers=gpu_layers,
                                  method=int4_pace if int4 else planned)

    d = estimate(knobs.context)
    by_context = tuple((c, round(estimate(c).tok_s, 2)) for c in HYBRID_CONTEXTS if c < knobs.context)
    off_tok_s, off_gib = None, None
    if sglang_can_offload(model):
        off = plan(model, target, replace(knobs, kt_method=None, kt_num_gpu_experts="auto", kt_cpuinfer="auto",
                                          cpu_offload_gib="auto"), engine, with_alternatives=False)
        off_tok_s, off_gib = off.decode_tok_s_ceiling, int(off.knobs.cpu_offload_gib)
    # the requests SGLang runs at once (as a coding agent's parallel calls fill them), decoding together
    streams = int(knobs.max_running or 1)
    agg = estimate(FOUR_STREAM_CONTEXT).aggregate_tok_s(streams, moe.num_experts, moe.top_k) if streams > 1 else None
    pool = kt.starts_compile_pool(model, knobs.kt_gpu_layers == "auto", gpu_layers)
    own, own_source = kt.sglang_own_bytes(k.sglang_host_bytes, host.cpus, pool)
    # the other placement's (the plan's note on it): its own GPU MoE kernel, so its own compile pool or none
    other_whole = knobs.kt_gpu_layers != "auto"
    other_model, _ = kt.moe_kernel(model, knobs.moe_kernel, n, other_whole)
    other_pool = kt.starts_compile_pool(other_model, other_whole, as_whole if other_whole else 0)
    other_own = kt.sglang_own_bytes(k.sglang_host_bytes, host.cpus, other_pool)[0]
    hp = HybridSection(
        kt_method=planned, asked_method=asked, method_note=why, lossy=meth.lossy,
        num_gpu_experts=n, num_experts=moe.num_experts, moe_layers=moe.num_moe_layers, cpuinfer_threads=threads,
        cpu_isa=host.isa, cpu_isa_source=host.isa_source,
        kt_variant=kt.KT_VARIANT[kt.build_for(planned, host.isa, host.kt_kernel)] if method and host.isa else None,
        kt_kernel=host.kt_kernel,
        host_experts_bytes=experts_host, host_sglang_bytes=own, host_checkpoint_bytes=checkpoint,
        host_pinned_bytes=pinned, host_read_bytes_s=d.host_read_bytes_s, host_read_source=host.read_source,
        cpu_bytes_per_token=d.cpu_bytes_per_token, decode_gpu_s=d.gpu_s, decode_context_s=d.context_s,
        decode_gpu_experts_s=d.gpu_experts_s, decode_cpu_experts_s=d.cpu_experts_s, decode_sync_s=d.sync_s,
        decode_cpu_time_factor=d.cpu_time_factor,
        decode_tok_s=d.tok_s, decode_context_tokens=knobs.context, decode_tok_s_by_context=by_context,
        layer_offload_decode_tok_s=off_tok_s, layer_offload_gib=off_gib, cpu_cores=host.physical_cores,
        cpu_cores_source=host.cores_source, gpu_layers=gpu_layers, as_whole_layers=as_whole,
        host_sglang_source=own_source, compile_pool=pool, other_sglang_bytes=other_own,
        host_prefill_bytes=kt.prefill_pinned_bytes(model, kt_layers, knobs.kt_prefill_pin, knobs.kt_prefill_fp8)
        if staged else 0,
        prefill_gpu_bytes=staged, prefill_tokens=int(knobs.kt_gpu_prefill) if staged else 0,
        prefill_pin=knobs.kt_prefill_pin, prefill_fp8=knobs.kt_prefill_fp8, host_embed_bytes=embed_pinned,
        cpu_decode="int4" if int4 else "kt", host_int4_bytes=moe.num_experts * kt_layers * decode_each if int4 else 0,
        aggregate_streams=streams if agg is not None else 0, aggregate_tok_s=agg)
    if method is None:
        reasons.append(Reason("cpu", f"--kt-method {asked}: {why} ({host.isa_source})"))
    if (bad_split := kt.split_problem(model, n, bool(gpu_layers))) is not None:
        reasons.append(Reason("sglang", bad_split))
    if (bad_chunk := kt.chunk_problem(planned, knobs.chunked_prefill)) is not None:
        reasons.append(Reason("sglang", bad_chunk))
    if method is not None and method != asked:
        notes.append(why)
    if hp.lossy:
        notes.append(kt.lossy_note(planned, kt.checkpoint_format(model)))
    if pair := kt.pair_note(planned, kt.checkpoint_format(model)):
        notes.append(pair)
    if target.host_ram_available_bytes is not None and hp.host_ram_bytes > target.host_ram_available_bytes:
        reasons.append(Reason("host_ram", f"host RAM: kt-kernel holds all {moe.num_experts} experts of each "
                              + (f"of its {kt_layers} CPU layers" if gpu_layers else "MoE layer")
                              + f" ({bytes2human(experts_host)} as {planned}) + {bytes2human(own)} for SGLang's own"
                              + (f" + {bytes2human(hp.host_prefill_bytes)} pinned for the GPU prompt path"
                                 if hp.host_prefill_bytes else "")
                              + (f" + {bytes2human(hp.host_embed_bytes)} pinned for the token embeddings"
                                 if hp.host_embed_bytes else "")
                              + (f" + {bytes2human(hp.host_int4_bytes)} for the int4 decode's copies"
                                 if hp.host_int4_bytes else "")
                              + f" > {bytes2human(target.host_ram_available_bytes)} available"))
    short = "; ".join(f"~{t:.0f} at {c:,}" for c, t in by_context)
    mapped = "the CPU layers' expert files'" if gpu_layers and not meth.gguf_type else "the checkpoint's"
    notes.append(
        (f"hybrid MoE: whole layers, the last {gpu_layers} of {moe.num_moe_layers} MoE layers' experts on the GPU "
         f"(as {n} of {moe.num_experts} per layer would take), the other {kt_layers} layers' on {threads} CPU threads "
         if gpu_layers else
         f"hybrid MoE: {n} of {moe.num_experts} experts/layer on the GPU, the rest on {threads} CPU threads ")
        + (f"(of {host.physical_cores} physical cores, {host.cores_source}) " if host.cores_source else "") +
        f"({planned}{', lossy' if hp.lossy else ''}); host RAM {bytes2human(hp.host_ram_bytes)} (all experts as "
        "kt-kernel holds them" + (", the CPU layers' only" if gpu_layers else "") + " + SGLang's own"
        + (f"; {mapped} {bytes2human(checkpoint)} of pages come on top, reclaimable" if checkpoint else "")
        + f"); decode ~{d.tok_s:.0f} tok/s at {knobs.context:,} tokens of context" + (f" ({short})" if short else "")
        + f": an estimate (derived terms, fitted constants; host read {d.host_read_bytes_s / 1e9:.0f} GB/s at "
          f"{threads} threads, {host.read_source})"
        + (f"; whole layers' own term fitted on one run: held-out runs decoded {kt.WHOLE_LAYER_SPREAD[0]:.2f}-"
           f"{kt.WHOLE_LAYER_SPREAD[1]:.2f}x it, {kt.WHOLE_LAYER_SPREAD_NOTE} (benchmarks/results/gpu/kt-estimate.md)"
           if gpu_layers else
           f"; for {planned} it misses: held-out runs decoded {spread[0]:.2f}-{spread[1]:.2f}x it, "
           f"{meth.spread_note} (benchmarks/results/gpu/kt-estimate.md)" if (spread := meth.estimate_spread) else "")
        + (f", against a ~{off_tok_s:.1f} tok/s ceiling with layer offload ({off_gib} GiB over PCIe)"
           if off_tok_s else ""))
    if hp.prefill_gpu_bytes:
        done = kt.PREFILL_MEASURED.get(fmt := kt.prefill_format(model, knobs.kt_prefill_fp8) or "")
        notes.append(f"prompt chunks of {knobs.kt_gpu_prefill:,}+ tokens run the {kt_layers} CPU layers' experts on "
                     f"the GPU, copied in from pinned host RAM each chunk as llama.cpp does: a staging set of "
                     f"{bytes2human(hp.prefill_gpu_bytes)} with the weights, {bytes2human(hp.host_prefill_bytes)} of "
                     "pinned host RAM ("
                     + (f"measured on {done.host} at 16 GiB, its {fmt} experts: the first token after 30K in "
                        f"{done.path_s:.2f} s against "
                        + (f"{done.kt_kernel_s:.2f} with prompts on kt-kernel and " if done.kt_kernel_s else "")
                        + f"{done.llama_cpp_s:.2f} for llama.cpp's best ({done.how}); {done.where}"
                        + (f"; {done.accuracy}" if done.accuracy else "")
                        if done is not None else
                        f"its {fmt} experts: not run in a server on a GPU yet; the measured formats' runs are in "
                        "benchmarks/results/gpu/moe-gpu-prefill/")
                     + ")" + _prefill_copy_words(model, target, kt_layers, step, knobs.context, knobs.kt_prefill_fp8))
    if hp.host_int4_bytes:
        flag = by_name()["kt_cpu_decode"].cli_flag
        notes.append(f"the {kt_layers} CPU layers' decode on their GPTQ-Int4 values ({flag} {knobs.kt_cpu_decode}: "
                     "the kit's adapter, float32 on the checkpoint's own values, lossless against it; "
                     f"{bytes2human(hp.host_int4_bytes)} of host RAM for its copies; the estimate takes its kernel's "
                     "pace, measured without a server; needs a C compiler where the server starts); "
                     + kt.INT4_DECODE_MEASURED)
    if hp.aggregate_tok_s is not None:
        notes.append(kt.aggregate_note(hp.aggregate_streams, hp.aggregate_tok_s, planned, bool(gpu_layers),
                                       kt.distinct_expert_factor(moe.num_experts, moe.top_k, hp.aggregate_streams)))
    if meth.speed_note:
        notes.append(meth.speed_note)
    if gpu_layers and planned not in kt.WHOLE_LAYER_METHODS:
        *most, last = kt.WHOLE_LAYER_METHODS
        run = f"{', '.join(most)} and {last}"
        notes.append(f"whole layers with {planned} were not run on a GPU ({run} "
                     f"were: benchmarks/results/gpu/kt-estimate.md); {by_name()['kt_gpu_layers'].cli_flag} off gives "
                     f"the split, as {planned} was measured")
    if gpu_layers:      # the way back, with what it holds: kt-kernel keeps every layer's experts under the split
        notes.append(f"{by_name()['kt_gpu_layers'].cli_flag} off: the same GPU experts in every layer (SGLang's own "
                     f"split), host RAM {bytes2human(hp.other_placement[1])}; " + kt.SPLIT_SPEED)
    return hp

def gpu_known(target: Target) -> bool:
    return target.gpu is not None


def _kt_reader(model: ModelSpec) -> str | None:
    """The kt-kernel method that reads this MoE checkpoint as it is (None: a dense model, or one KT cannot serve)."""
    if model.moe is None:
        return None
    for m in kt.METHOD_PREFERENCE:
        try:
            kt.check_model(model, m)
        except VramkitError:
            continue
        if kt.KT_METHODS[m].reads is not None:
            return m
    return None


def sglang_can_offload(model: ModelSpec) -> bool:
    """Whether SGLang 0.5.15.post1 serves this model with --cpu-offload-gb: not MLA (deepseek_v2 keeps w_kc/w_vc
    beside kv_b_proj, in host RAM once offloaded; benchmarks/results/gpu/diag-mla-offload.txt)."""
    return model.mla is None


def host_ram_need(hicache_bytes: int, pinned_weights_bytes: int, engine: Engine) -> tuple[int, int]:
    """(pinned host RAM, what SGLang keeps free beside it): the host cache checks RAM minus its reserve after the
    offloaded weights are pinned; no cache, no reserve. The planner and launch/checks.py both use this.
    `pinned_weights_bytes` is what the offloaded weights pin (power-of-two rounded, core/memory/weight_load.py)."""
    return hicache_bytes + pinned_weights_bytes, engine.hicache_host_reserve if hicache_bytes else 0


def cell_is_fp8(kv_dtype: str) -> bool:
    return kv_dtype.startswith("fp8")


def _auto_offload_gib(free: int, frac: float, fixed_weights: int, cell: int, knobs: Knobs, layer_bytes: int) -> int:
    """Least whole GiB of --cpu-offload-gb for which the pool holds concurrency x context tokens."""
    need_kv = knobs.context * max(1, knobs.concurrency) + SGLANG_REQ_SLACK_TOKENS + 2
    room = free * frac - fixed_weights          # static budget left for KV before any offload
    short = need_kv * cell - room
    if short <= 0:
        return 0
    return min(math.ceil(short / GiB), math.ceil(layer_bytes / GiB))


def max_mem_fraction(model: ModelSpec, target: Target, knobs: Knobs, engine: Engine) -> float | None:
    """The largest mem_fraction_static (step 0.01, at most 0.90: the highest measured to start and serve on
    the emulated 16 GB card, benchmarks/calibration/fp8-f090-16g.json) that keeps the runtime margin."""
    for f100 in range(90, 49, -1):      # from the top: the first that keeps the margin is the largest
        p = plan(model, target, replace(knobs, mem_fraction=f100 / 100), engine, with_alternatives=False)
        if p.kv_pool_tokens > 0 and p.headroom_bytes >= engine.runtime_margin:
            return f100 / 100
    return None


def _flag(name: str) -> str:
    """A knob's SGLang flag, as core/plan/knobs.py declares it (the one place it is spelled)."""
    flag = by_name()[name].sglang_flag
    assert flag is not None, name
    return flag


CHANGE_WORDS: dict[str, Callable[[Any], str]] = {
    "kv_dtype": lambda v: f"KV cache {v} ({_flag('kv_dtype')} {v})",
    "mem_fraction": lambda v: f"{_flag('mem_fraction')} {v}",
    "concurrency": lambda v: f"{v} request(s) of this context at once",
    "context": lambda v: f"context {v:,} tokens",
    "cpu_offload_gib": lambda v: f"{v} GiB of weights in host RAM ({_flag('cpu_offload_gib')} {v})",
    "tp": lambda v: f"{v} GPUs with tensor parallelism ({_flag('tp')} {v})",
    "max_running": lambda v: f"{_flag('max_running')} {v}",
    "kt_method": lambda v: f"experts in host RAM ({_flag('kt_method')} {v}, {_flag('kt_num_gpu_experts')} auto)",
    "kt_gpu_layers": lambda v: ("whole layers on the GPU" if v == "auto" else "N experts in every layer")
    + f" ({by_name()['kt_gpu_layers'].cli_flag} {v})",
    "kt_embed_host": lambda v: f"the token embeddings in host RAM ({by_name()['kt_embed_host'].cli_flag} {v})",
}


def describe_change(knobs: Knobs, change: dict[str, Any]) -> str:
    """Every setting an alternative changes, in words and flags (those equal to the current value left out)."""
    parts = [CHANGE_WORDS[k](v) for k, v in change.items() if getattr(knobs, k) != v]
    return " + ".join(parts) if parts else "no change"


def alternatives(model: ModelSpec, target: Target, knobs: Knobs, engine: Engine, base: Plan,
                 candidates: tuple[ModelSpec, ...] = ()) -> list[Alternative]:
    """Changes that make it fit, cheapest first: each is re-planned, never guessed, and names every setting
    it changes (an alternative that also switches the KV dtype says so)."""
    out: list[Alternative] = []
    seen: set[tuple[tuple[str, Any], ...]] = set()
    asked = knobs
    # weight offload SGLang cannot run (plan()): every alternative drops the offload, and says so
    fixed: dict[str, Any] = ({"cpu_offload_gib": 0} if not sglang_can_offload(model)
                             and str(knobs.cpu_offload_gib) != "0" else {})
    knobs = replace(knobs, **fixed)

    def trial(cost: str, **kw: Any) -> Plan | None:
        kw = {**fixed, **kw}
        key = tuple(sorted((k, v) for k, v in kw.items() if getattr(asked, k) != v))
        if not key or key in seen:
            return None
        seen.add(key)
        p = plan(model, target, replace(asked, **kw), engine, with_alternatives=False)
        tok_s = "n/a" if p.decode_tok_s is None else f"{p.decode_tok_s:.1f}"
        out.append(Alternative(change=describe_change(asked, kw), knobs=dict(key), fits=p.fits,
                               decode_tok_s_ceiling=p.decode_tok_s_ceiling, cost=cost.format(p=p, tok_s=tok_s),
                               decode_tok_s_estimate=p.hybrid.decode_tok_s if p.hybrid is not None else None,
                               why_not="; ".join(p.reasons)))
        return p

    if fixed:
        trial("the weights stay on the GPU (SGLang cannot offload MLA layers): pool {p.kv_pool_tokens:,} tokens; "
              "decode ceiling {tok_s} tok/s")

    if knobs.kv_dtype == "auto":
        trial("halves KV bytes: pool {p.kv_pool_tokens:,} tokens; decode ceiling {tok_s} tok/s "
              "(faster: fewer bytes read); small accuracy risk from 5-bit-mantissa keys/values", kv_dtype="fp8_e5m2")
    frac_same_kv = max_mem_fraction(model, target, knobs, engine)
    if frac_same_kv is not None and (knobs.mem_fraction is None or frac_same_kv > knobs.mem_fraction + 1e-9):
        trial("largest fraction that keeps the runtime margin: pool {p.kv_pool_tokens:,} tokens; no speed cost; "
              "less slack for activations", mem_fraction=frac_same_kv)
    kv = "fp8_e5m2" if knobs.kv_dtype == "auto" else knobs.kv_dtype
    best_frac = max_mem_fraction(model, target, replace(knobs, kv_dtype=kv), engine) or knobs.mem_fraction
    if kv != knobs.kv_dtype and best_frac is not None:
        trial("pool {p.kv_pool_tokens:,} tokens; decode ceiling {tok_s} tok/s; fp8 keys/values",
              kv_dtype=kv, mem_fraction=best_frac)
    if knobs.max_running is None and base.req_to_token_bytes > 256 * MiB:
        # SGLang's default max_running_requests sizes req_to_token by the model's whole context
        trial("at most that many requests run at once; req_to_token shrinks to {p.req_to_token_bytes:,} B: pool "
              "{p.kv_pool_tokens:,} tokens", max_running=max(8, knobs.concurrency))
    if base.max_concurrent_requests < knobs.concurrency and base.max_concurrent_requests >= 1:
        trial("others queue; no per-request speed cost", concurrency=base.max_concurrent_requests)
    # the longest context that fits with fp8 KV and the best fraction
    fitted = _longest_context(model, target, replace(knobs, kv_dtype=kv, mem_fraction=best_frac), engine)
    if fitted and fitted < knobs.context:
        trial("requests longer than that are refused; decode ceiling {tok_s} tok/s",
              kv_dtype=kv, mem_fraction=best_frac, context=fitted)
    if knobs.cpu_offload_gib in (0, "0") and sglang_can_offload(model) and not knobs.kt_method:
        extra: dict[str, Any] = {}
        off = plan(model, target, replace(knobs, kv_dtype=kv, cpu_offload_gib="auto"), engine, with_alternatives=False)
        if not off.fits and knobs.max_running is None and off.req_to_token_bytes > 256 * MiB:
            # a long native context makes SGLang's default req_to_token table large: cap the requests too
            extra = {"max_running": max(8, knobs.concurrency)}
            off = plan(model, target, replace(knobs, kv_dtype=kv, cpu_offload_gib="auto", **extra), engine,
                       with_alternatives=False)
        if int(off.knobs.cpu_offload_gib) > 0:
            trial("those weights cross PCIe every token: decode ceiling {tok_s} tok/s; pins that much host RAM",
                  kv_dtype=kv, cpu_offload_gib=int(off.knobs.cpu_offload_gib), **extra)
    reader = _kt_reader(model)
    if reader and not knobs.kt_method and target.host is not None and engine.kt is not None and gpu_known(target):
        # the hybrid MoE mode: the method that reads this checkpoint (or what this CPU runs instead, noted)
        # a long native context makes SGLang's default req_to_token table large: cap the requests too, as above
        # (the hybrid mode keeps every other weight on the GPU: no --cpu-offload-gb beside it)
        cap: dict[str, Any] = {} if str(knobs.cpu_offload_gib) == "0" else {"cpu_offload_gib": 0}
        hy = plan(model, target, replace(knobs, kt_method=reader, **cap), engine, with_alternatives=False)
        if not hy.fits and knobs.max_running is None and hy.req_to_token_bytes > 256 * MiB:
            cap["max_running"] = max(8, knobs.concurrency)
        trial("experts beyond the GPU's share computed by the CPU from host RAM: decode ~{tok_s} tok/s (an estimate, "
              "fitted; {p.hybrid.method_note}); host RAM {p.hybrid.host_ram_bytes_text}; pool {p.kv_pool_tokens:,} "
              "tokens", kt_method=reader, **cap)
    if knobs.kt_method and knobs.kt_gpu_layers == "off" and base.hybrid is not None:
        # the same GPU experts as whole layers: kt-kernel then holds only the CPU's layers in host RAM
        trial("the same GPU experts as whole layers (the kit's kt-kernel adapter): only the CPU's layers sync; host "
              "RAM {p.hybrid.host_ram_bytes_text}; decode ~{tok_s} tok/s (an estimate, its own term fitted on one "
              "run); " + kt.WHOLE_LAYER_SPEED, kt_gpu_layers="auto")
    if not base.host_embed_bytes and kt.embed_host_problem(model, knobs.tp, base.weights_offloaded_bytes) is None:
        # the token embeddings in pinned host RAM (the kit's adapter): their GPU memory to the pool
        trial("the token embeddings in pinned host RAM, read by the GPU a row a token (the kit's SGLang adapter; "
              "lossless): pool {p.kv_pool_tokens:,} tokens; decode {tok_s} tok/s; "
              + (kt.EMBED_HOST_MEASURED if base.hybrid is not None else kt.EMBED_HOST_DENSE), kt_embed_host="on")
    if knobs.tp == 1:
        trial("needs a second card of this size; weights and KV split per rank; decode ceiling "
              "{tok_s} tok/s per rank-bandwidth", tp=2)
    own = sum(weight_components(model).values())
    for other in candidates:
        same_family = other.name.split("-")[:2] == model.name.split("-")[:2]     # e.g. qwen2.5-coder
        if other.name == model.name or not same_family or sum(weight_components(other).values()) >= own:
            continue
        p = plan(other, target, knobs, engine, with_alternatives=False)
        if p.fits:
            tok_s = "n/a" if p.decode_tok_s_ceiling is None else f"{p.decode_tok_s_ceiling:.1f}"
            out.append(Alternative(change=f"a smaller model: {other.name} (same knobs)", knobs={"model": other.name},
                                   fits=True, decode_tok_s_ceiling=p.decode_tok_s_ceiling,
                                   cost=f"a different model's quality; pool {p.kv_pool_tokens:,} tokens; decode "
                                        f"ceiling {tok_s} tok/s"))
    # fitting ones first, fastest first; non-fitting kept for the record at the end
    # fitting ones first, one-card ones before those that need more GPUs, fastest first
    out.sort(key=lambda a: (not a.fits, int(a.knobs.get("tp", 1)) > 1, -a.decode_rank))
    return out


def _longest_context(model: ModelSpec, target: Target, knobs: Knobs, engine: Engine) -> int | None:
    """Largest context (multiple of 1024) whose single request fits with these knobs."""
    lo, hi, best = 1024, knobs.context, None
    while lo <= hi:
        mid = (lo + hi) // 2 // 1024 * 1024 or 1024
        p = plan(model, target, replace(knobs, context=mid, concurrency=1), engine, with_alternatives=False)
        if p.fits:
            best, lo = mid, mid + 1024
        else:
            hi = mid - 1024
    return best
