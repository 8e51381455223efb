"""What SGLang 0.5.15.post1 will allocate for a model on a GPU, and whether a target fits.

Pure: plain values in (a ModelSpec, a GpuSpec or a free-memory figure, the knobs), a Plan out. It
follows SGLang's own code, step by step:

1. Free memory at start (`pre_model_load_memory`, the log's "Load weight begin. avail mem"): the card
   minus what others hold minus the server's CUDA context and, tp > 1, NCCL (measured, config/engine.toml).
2. Weights (per TP rank): every tensor of the checkpoint as SGLang keeps it, minus `--cpu-offload-gb`
   (OffloaderV1 moves decoder-layer parameters to pinned host RAM until that many GiB), as the caching
   allocator reserves them: SGLang's allocations replayed (core/weight_load.py, core/torch_alloc.py).
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
from dataclasses import asdict, dataclass, field, replace

from vramkit.catalog import GpuSpec, ModelSpec
from vramkit.core.checks import Reason
from vramkit.core.knobs import Knobs
from vramkit.core.weight_load import CALIBRATION_HOST_SMS, LoadShape, replay_load
from vramkit.units import GiB, MiB, bytes2human

KV_DTYPE_BYTES = {"fp8_e5m2": 1, "fp8_e4m3": 1, "bf16": 2, "bfloat16": 2, "fp4_e2m1": 0.5}
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

    def startup_overhead(self, tp: int) -> int:
        """GPU memory the server process takes before its weights (SGLang's pre_model_load_memory is the
        card's free memory minus this)."""
        return self.cuda_context + (self.tp_comm_init if tp > 1 else 0)

    @classmethod
    def from_config(cls, c: dict) -> Engine:
        return cls(
            cuda_context=int(c["cuda_context_mib"] * MiB), driver_reserved=int(c["driver_reserved_mib"] * MiB),
            tp_comm_init=int(c["tp_comm_init_mib"] * MiB), tp_comm_runtime=int(c["tp_comm_runtime_mib"] * MiB),
            pre_kv=int(c["pre_kv_mib"] * MiB), post_kv_misc=int(c["post_kv_misc_mib"] * MiB),
            attention_backend=int(c["attention_backend_mib"] * MiB), decode_graph=int(c["decode_graph_mib"] * MiB),
            activation_factor=float(c["activation_factor"]), runtime_margin=int(c["runtime_margin_mib"] * MiB),
            hicache_host_reserve=int(c["hicache_host_reserve_mib"] * MiB),
        )


@dataclass(frozen=True)
class Target:
    """Where it runs: a GPU (per rank) and the host."""

    gpu: GpuSpec | None
    gpu_free_bytes: int | None = None          # measured free memory at start, overrides the estimate
    other_used_bytes: int = 0                  # memory other processes hold on the card
    host_ram_available_bytes: int | None = None


@dataclass
class Alternative:
    change: str                 # what to change, in words
    knobs: dict                 # the knob values that make the change
    fits: bool
    decode_tok_s_ceiling: float | None
    cost: str                   # what it costs


@dataclass
class Plan:
    model: str
    gpu: str
    knobs: Knobs                # every knob resolved (mem_fraction, chunked_prefill, ... never None)
    free_at_start_bytes: int
    weights_bytes: int          # on the GPU, per rank, as SGLang's "Load weight end ... mem usage"
    weights_by_component: dict
    weights_offloaded_bytes: int
    kv_bytes_per_token: int
    kv_pool_bytes: int
    kv_pool_tokens: int
    context_len: int            # what SGLang's ModelConfig derives (with YaRN when asked)
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
    host_ram_bytes: int         # pinned host RAM the server takes (hicache pool + offloaded weights)
    fits: bool
    reasons: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    alternatives: list = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


# ----------------------------------------------------------------------------------------------
# weights
# ----------------------------------------------------------------------------------------------
def _linear_bytes(model: ModelSpec, n_in: int, n_out: int) -> dict[str, int]:
    """One linear layer's tensors as the checkpoint stores them (GPTQ: qweight, qzeros, scales, g_idx)."""
    q = model.quantization
    if q is None or q.method not in ("gptq", "awq"):
        return {"weight": n_in * n_out * model.dtype_bytes}
    groups = math.ceil(n_in / q.group_size) if q.group_size > 0 else 1
    return {
        "qweight": n_in * n_out * q.bits // 8,
        "scales": groups * n_out * 2,
        "qzeros": groups * (n_out * q.bits // 32) * 4,
        "g_idx": n_in * 4 if q.method == "gptq" else 0,
    }


def weight_components(model: ModelSpec, tp: int = 1) -> dict[str, int]:
    """Bytes per TP rank by component. Column-parallel (qkv, gate_up) split their outputs, row-parallel
    (o, down) their inputs, the vocabulary is split across ranks; norms are replicated."""
    h, i, hd = model.hidden_size, model.intermediate_size, model.head_dim
    q_out, kv_out = model.num_heads * hd, model.num_kv_heads * hd
    kv_out_rank = max(1, model.num_kv_heads // tp) * hd if tp > model.num_kv_heads else kv_out // tp
    per_layer_attn = (sum(_linear_bytes(model, h, q_out // tp + 2 * kv_out_rank).values())
                      + sum(_linear_bytes(model, q_out // tp, h).values()))
    if model.attention_bias:
        per_layer_attn += (q_out // tp + 2 * kv_out_rank) * model.dtype_bytes
    per_layer_mlp = sum(_linear_bytes(model, h, 2 * i // tp).values()) + sum(_linear_bytes(model, i // tp, h).values())
    vocab_rank = math.ceil(model.vocab_size / tp / 64) * 64     # VocabParallelEmbedding pads to 64
    embed = vocab_rank * h * model.dtype_bytes
    return {
        "embed_tokens": embed,
        "lm_head": 0 if model.tie_word_embeddings else embed,
        "attention": per_layer_attn * model.num_layers,
        "mlp": per_layer_mlp * model.num_layers,
        "norms": (2 * model.num_layers + 1) * h * model.dtype_bytes,
    }


def kv_bytes_per_token(model: ModelSpec, kv_dtype: str, tp: int = 1) -> int:
    """SGLang's cell_size per rank: kv_heads_per_rank * (head_dim + v_head_dim) * layers * element size.
    kv_heads_per_rank = max(1, kv_heads // tp) (heads are replicated when tp > kv_heads)."""
    kv_heads_rank = max(1, model.num_kv_heads // tp)
    elem = model.dtype_bytes if kv_dtype == "auto" else KV_DTYPE_BYTES[kv_dtype]
    return int(kv_heads_rank * 2 * model.head_dim * model.num_layers * elem)


def load_shape(model: ModelSpec) -> LoadShape:
    q = model.quantization
    quantized = q is not None and q.method in ("gptq", "awq")
    return LoadShape(hidden=model.hidden_size, intermediate=model.intermediate_size, layers=model.num_layers,
                     heads=model.num_heads, kv_heads=model.num_kv_heads, head_dim=model.head_dim,
                     vocab=model.vocab_size, tie_embeddings=model.tie_word_embeddings,
                     attention_bias=model.attention_bias, dtype_bytes=model.dtype_bytes,
                     quant_group=q.group_size if quantized else None, quant_bits=q.bits if quantized else 4,
                     quant_g_idx=bool(quantized and q.method == "gptq"))


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


def activation_bytes(model: ModelSpec, chunk_tokens: int, tp: int, factor: float) -> int:
    """Largest prefill step's live tensors, first principles in the model dtype (a few hidden-state
    copies, q/k/v, MLP gate+up and its activation), times a calibrated factor."""
    h, i = model.hidden_size, model.intermediate_size // tp
    qkv = (model.num_heads + 2 * model.num_kv_heads) * model.head_dim // tp
    per_token = (4 * h + qkv + 3 * i) * model.dtype_bytes
    return int(chunk_tokens * per_token * factor)


def plan(model: ModelSpec, target: Target, knobs: Knobs, engine: Engine, *, with_alternatives: bool = True,
         candidates: tuple[ModelSpec, ...] = ()) -> Plan:
    """The plan; when it does not fit, `alternatives` re-plans each change (and each of `candidates`,
    other models the user could run instead)."""
    reasons: list[Reason] = []
    notes: list[str] = []
    tp = max(1, knobs.tp)
    gpu = target.gpu
    total = gpu.memory_total_bytes if gpu else None

    # 1. free at start (per rank)
    if target.gpu_free_bytes is not None:
        free = int(target.gpu_free_bytes)
    elif gpu is not None:
        free = gpu.memory_total_bytes - engine.driver_reserved - target.other_used_bytes - engine.startup_overhead(tp)
    else:
        raise ValueError("plan needs a GPU or a free-memory figure")
    card_total = total if total is not None else free + engine.startup_overhead(tp)

    # resolve SGLang's defaults from the TARGET card, never from the machine it runs on
    chunk = knobs.chunked_prefill or sglang_default_chunked_prefill(card_total)
    graph_bs = knobs.cuda_graph_max_bs
    if graph_bs is None:
        graph_bs = sglang_default_cuda_graph_max_bs(card_total, tp)
    # the kit always renders --disable-prefill-cuda-graph (core/render.py): SGLang's default reserve without them
    frac = knobs.mem_fraction if knobs.mem_fraction is not None else sglang_default_mem_fraction(
        card_total, chunk, graph_bs, tp, prefill_cuda_graph=False)
    context_len, yarn = context_and_yarn(model, knobs.context)

    # 2. weights
    comps = weight_components(model, tp)
    layer_bytes = comps["attention"] + comps["mlp"] + 2 * model.num_layers * model.hidden_size * model.dtype_bytes
    # rope cos/sin cache: context positions x head_dim, fp32 on CUDA (sglang rotary_embedding/base.py)
    rope_bytes = context_len * model.head_dim * 4
    shape = load_shape(model)
    sms = gpu.sm_count if gpu is not None and gpu.sm_count else CALIBRATION_HOST_SMS
    offload_req = knobs.cpu_offload_gib
    cell = kv_bytes_per_token(model, knobs.kv_dtype, tp)
    if offload_req == "auto":
        # what the load reserves with nothing offloaded: tensors, rope cache and the allocator's slack
        on_gpu = replay_load(shape, tp, rope_bytes, sm_count=sms).gpu_reserved_bytes
        offload_req = _auto_offload_gib(free, frac, on_gpu + engine.pre_kv, cell, knobs, layer_bytes)
    offload_req = int(offload_req)
    load = replay_load(shape, tp, rope_bytes, min(offload_req * GiB, layer_bytes), sm_count=sms)
    offloaded = load.offloaded_bytes
    weights_gpu = load.gpu_reserved_bytes

    # 3. KV pool
    rest = (free - weights_gpu - engine.pre_kv) - free * (1 - frac)
    kv_tokens = max(0, int(rest // cell)) if rest > 0 else 0
    if rest <= 0:
        need = 1 - (free - weights_gpu - engine.pre_kv) / free
        reasons.append(Reason("weights", f"the weights ({bytes2human(weights_gpu)}) leave no room for a KV cache at "
                       f"mem_fraction_static {frac}: SGLang refuses to start (needs > {need:.3f})"))
    kv_pool_bytes = kv_tokens * cell

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
    # beside the eager prefill's activations. Derived from the source; no calibration point ran with offload.
    offload_transient = min(offloaded, layer_bytes // model.num_layers)
    graphs = engine.decode_graph + offload_transient if graph_bs > 0 else 0
    act = activation_bytes(model, chunk, tp, engine.activation_factor) + offload_transient
    used_after_start = weights_gpu + engine.pre_kv + kv_pool_bytes + req_to_token + engine.post_kv_misc \
        + engine.attention_backend + graphs
    startup_free = free - used_after_start
    headroom = startup_free - act
    comm_runtime = engine.tp_comm_runtime if tp > 1 else 0
    headroom -= comm_runtime
    peak = engine.startup_overhead(tp) + used_after_start + act + comm_runtime

    # verdicts
    if model.num_heads % tp or (model.num_kv_heads % tp and tp % model.num_kv_heads):
        reasons.append(Reason("tp", f"tensor parallel size {tp} does not divide the model's {model.num_heads} "
                              f"attention heads / {model.num_kv_heads} KV heads: SGLang asserts it at load"))
    if kv_tokens > 0 and kv_tokens < knobs.context:
        reasons.append(Reason(
            "kv", f"one {knobs.context:,}-token request needs {bytes2human(knobs.context * cell)} of KV cache "
            f"({'fp8' if cell_is_fp8(knobs.kv_dtype) else 'fp16/bf16'}, {cell:,} B/token); the pool holds "
            f"{kv_tokens:,} tokens ({bytes2human(kv_pool_bytes)}), so SGLang refuses prompts of "
            f"{max_request + 1:,} tokens or more"))
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

    # host RAM
    hicache_bytes = int(knobs.hicache_gb * 1e9)
    host_ram, host_reserve = host_ram_need(hicache_bytes, offloaded, engine)
    avail = target.host_ram_available_bytes
    if host_ram and avail is not None and host_ram > avail - host_reserve:
        if hicache_bytes:
            reasons.append(Reason(
                "host_ram", f"hierarchical cache of {knobs.hicache_gb:g} GB"
                + (f" plus {bytes2human(offloaded)} of offloaded weights" if offloaded else "")
                + f" needs that much pinned host RAM and SGLang keeps {bytes2human(host_reserve, digits=0)} free: "
                  f"only {bytes2human(avail)} is available"))
        else:
            reasons.append(Reason("host_ram", f"weight offload pins {bytes2human(offloaded)} of host RAM; only "
                                  f"{bytes2human(avail)} is available"))
    if hicache_bytes and hicache_bytes // cell <= kv_tokens:
        notes.append("the host cache is not larger than the GPU pool: SGLang warns and it adds little")

    # 7. decode ceilings
    ceiling, ceiling_batch = None, None
    if gpu is not None:
        # the GPU-resident tensors after marlin conversion, less the rope cache and the embedding table
        # (a lookup, not a matmul; read in full only when tied to lm_head)
        read_per_step = load.gpu_tensor_bytes - rope_bytes - (0 if model.tie_word_embeddings else comps["embed_tokens"])
        t_weights = max(read_per_step, 0) / gpu.bandwidth_bytes_s + offloaded / gpu.pcie_bytes_s
        t_kv = cell * knobs.context / gpu.bandwidth_bytes_s     # one stream's KV at the full target context
        ceiling = 1.0 / (t_weights + t_kv)
        n = max(1, min(knobs.concurrency, conc or 1))
        ceiling_batch = n / (t_weights + n * t_kv)
        if offloaded:
            notes.append(f"{bytes2human(offloaded)} of weights cross PCIe gen{gpu.pcie_gen} x{gpu.pcie_lanes} "
                         f"({gpu.pcie_bytes_s / 1e9:.1f} GB/s) every decode step")

    resolved = replace(knobs, mem_fraction=frac, chunked_prefill=chunk, cuda_graph_max_bs=graph_bs,
                       max_running=max_running, cpu_offload_gib=offload_req)
    p = Plan(
        model=model.name, gpu=gpu.name if gpu else "given-free-memory", knobs=resolved,
        free_at_start_bytes=free, weights_bytes=weights_gpu, weights_by_component=comps,
        weights_offloaded_bytes=offloaded, kv_bytes_per_token=cell, kv_pool_bytes=kv_pool_bytes,
        kv_pool_tokens=kv_tokens, context_len=context_len, yarn_factor=yarn, max_request_tokens=max_request,
        max_concurrent_requests=conc, req_to_token_bytes=req_to_token, activation_bytes=act,
        peak_vram_bytes=peak, startup_free_bytes=startup_free, headroom_bytes=headroom,
        decode_tok_s_ceiling=ceiling, decode_tok_s_ceiling_batch=ceiling_batch, host_ram_bytes=host_ram,
        fits=not reasons, reasons=reasons, notes=notes,
    )
    if with_alternatives and not p.fits:
        p.alternatives = alternatives(model, target, knobs, engine, p, candidates)
    return p


def host_ram_need(hicache_bytes: int, offloaded_bytes: int, engine: Engine) -> tuple[int, int]:
    """(pinned host RAM, what SGLang keeps free beside it): the host cache checks RAM minus its reserve after the
    offloaded weights are pinned; no cache, no reserve. The planner and launch/checks.py both use this."""
    return hicache_bytes + offloaded_bytes, engine.hicache_host_reserve if hicache_bytes else 0


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


def max_mem_fraction(model: ModelSpec, target: Target, knobs: Knobs, engine: Engine) -> float:
    """The largest mem_fraction_static (step 0.01, at most 0.90: the highest measured to start and serve on
    the emulated 16 GB card, benchmarks/calibration/fp8-f090-16g.json) that keeps the runtime margin."""
    best = None
    for f100 in range(50, 91):
        p = plan(model, target, replace(knobs, mem_fraction=f100 / 100), engine, with_alternatives=False)
        if p.kv_pool_tokens > 0 and p.headroom_bytes >= engine.runtime_margin:
            best = f100 / 100
    return best or 0.5


def alternatives(model: ModelSpec, target: Target, knobs: Knobs, engine: Engine, base: Plan,
                 candidates: tuple[ModelSpec, ...] = ()) -> list[Alternative]:
    """Changes that make it fit, cheapest first: each is re-planned, never guessed."""
    out: list[Alternative] = []

    def trial(change: str, cost: str, **kw) -> Plan:
        p = plan(model, target, replace(knobs, **kw), engine, with_alternatives=False)
        tok_s = "n/a" if p.decode_tok_s_ceiling is None else f"{p.decode_tok_s_ceiling:.1f}"
        out.append(Alternative(change=change, knobs=kw, fits=p.fits, decode_tok_s_ceiling=p.decode_tok_s_ceiling,
                               cost=cost.format(p=p, tok_s=tok_s)))
        return p

    if knobs.kv_dtype == "auto":
        trial("fp8 KV cache (--kv-cache-dtype fp8_e5m2)",
              "halves KV bytes: pool {p.kv_pool_tokens:,} tokens; decode ceiling {tok_s} tok/s "
              "(faster: fewer bytes read); small accuracy risk from 5-bit-mantissa keys/values", kv_dtype="fp8_e5m2")
    kv = "fp8_e5m2" if knobs.kv_dtype == "auto" else knobs.kv_dtype
    best_frac = max_mem_fraction(model, target, replace(knobs, kv_dtype=kv), engine)
    if knobs.mem_fraction is None or best_frac > knobs.mem_fraction + 1e-9:
        trial(f"raise --mem-fraction-static to {best_frac} (largest that keeps the runtime margin)",
              "pool {p.kv_pool_tokens:,} tokens; no speed cost; less slack for activations",
              kv_dtype=kv, mem_fraction=best_frac)
    if base.max_concurrent_requests < knobs.concurrency and base.max_concurrent_requests >= 1:
        trial(f"serve {base.max_concurrent_requests} request(s) of this context at once",
              "others queue; no per-request speed cost", concurrency=base.max_concurrent_requests)
    # the longest context that fits with fp8 KV and the best fraction
    fitted = _longest_context(model, target, replace(knobs, kv_dtype=kv, mem_fraction=best_frac), engine)
    if fitted and fitted < knobs.context:
        trial(f"a shorter context: {fitted:,} tokens (fp8 KV, fraction {best_frac})",
              "requests longer than that are refused; decode ceiling {tok_s} tok/s",
              kv_dtype=kv, mem_fraction=best_frac, context=fitted)
    if knobs.cpu_offload_gib in (0, "0"):
        off = plan(model, target, replace(knobs, kv_dtype=kv, cpu_offload_gib="auto"), engine, with_alternatives=False)
        if int(off.knobs.cpu_offload_gib) > 0:
            trial(f"move {off.knobs.cpu_offload_gib} GiB of weights to host RAM (--cpu-offload-gb, fp8 KV)",
                  "those weights cross PCIe every token: decode ceiling {tok_s} tok/s; pins that much host RAM",
                  kv_dtype=kv, cpu_offload_gib=int(off.knobs.cpu_offload_gib))
    if knobs.tp == 1:
        trial("two GPUs with tensor parallelism (--tp-size 2)",
              "needs a second card of this size; weights and KV split per rank; decode ceiling "
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
    out.sort(key=lambda a: (not a.fits, -(a.decode_tok_s_ceiling or 0)))
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
