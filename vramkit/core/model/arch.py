"""Every tensor SGLang 0.5.15.post1 allocates for a model's weights, per tensor-parallel rank, in module order.

Pure: a ModelSpec in, plain tuples out. Derived from SGLang's model and layer code (read in the pinned
0.5.15.post1 wheel, .venv-sglang): models/{llama,qwen2,qwen3,gemma2,gemma3_causal,qwen2_moe,qwen3_moe,
mixtral,olmoe,deepseek_v2,gpt_oss}.py and layers/quantization/{unquant,fp8,mxfp4,gptq/*,awq/*,gguf}.py.

A GGUF file (model_loader/loader.py GGUFModelLoader, layers/quantization/gguf.py): every linear and the
embedding keep the file's bytes (a uint8 `qweight` of rows x the type's bytes per row, and a uint8 `qweight_type`
per shard); a fused linear (qkv_proj, gate_up_proj) gets its shards at load in host memory and, after loading,
one zero-padded GPU tensor of all their rows x the widest shard's row (a Q4_K_M layer whose attn_v is Q6_K pads
q and k to Q6_K's width). The vocabulary is the file's rows (no padding to 64); a tied head is the embedding.

A layer is a tuple of `Param(role, name, nbytes, group)`; `ops` are what each quantization method does
after loading (marlin repacks allocate the new tensor before the old is freed; GPTQ's g_idx and qzeros
become empty). core/memory/weight_load.py replays both through the caching-allocator model.

Roles: embed, lm_head, attention, mlp (dense), experts (routed), shared (shared experts), router, norm, rope.

Parallelism (no expert parallelism): column-parallel linears split their outputs, row-parallel their
inputs; FusedMoE keeps every expert on every rank and splits the expert intermediate size; routers,
MLA's kv_a projection and norms are replicated; the vocabulary is split and padded to 64.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cached_property

from vramkit.core.model.spec import ModelSpec, Quantization

# marlin_make_workspace: one int32 per SM of the card (its count: config/gpus.toml sm_count). Without a
# catalogued card (a bare --gpu-free-gib), the calibration host's H100 count: 132 x 4 B, under 1 KiB a layer.
CALIBRATION_HOST_SMS = 132
FP32, HALF = 4, 2
SCALE_PERM_BYTES = 64 * 8   # marlin_permute_scales' permutation: 64 int64, on the GPU for each call


@dataclass(frozen=True)
class Param:
    role: str
    name: str
    nbytes: int
    group: int = -1             # the linear/expert block it belongs to, for the post-load ops


@dataclass(frozen=True)
class Op:
    group: int
    kind: str                   # "alloc" (new tensor kept), "free" (param dropped), "replace" (new, then old freed)
    name: str
    nbytes: int = 0
    temp: tuple[int, ...] = ()  # a replace's work tensors: allocated in order once the new tensor is, then freed in
                                # order, before the old one is (a per-expert loop's buffers: the loop repeats the
                                # same sizes, which the allocator hands back to the same blocks, so one pass stands
                                # for all)


@dataclass(frozen=True)
class WeightLayout:
    head: tuple[Param, ...]                 # embed_tokens
    layers: tuple[tuple[Param, ...], ...]   # decoder layers (what --cpu-offload-gb can move)
    tail: tuple[Param, ...]                 # final norm, lm_head
    ops: tuple[Op, ...]                     # after loading, in module order
    rope_first_layer: int                   # bytes of the rotary cache, built inside the first layer
    rope_after: int = 0                     # ... right after this many of its parameters (the projections)
    rope_second: tuple[int, int] = (0, 0)   # (layer, bytes): a second rotary cache (Gemma 3's other rope base)
    rope_temps: tuple[int, ...] = ()        # the cache's build tensors (CachingAllocator.run) before it, freed after

    # A layout holds ~10^3 Params and is a cache key (weight_load.replay_load): its hash is computed once, and
    # what every plan reads of it (bytes by role, each layer's bytes) once per layout (the instance's __dict__:
    # frozen fields stay frozen).
    def __hash__(self) -> int:
        h = self.__dict__.get("_hash")
        if h is None:
            h = self.__dict__["_hash"] = hash((self.head, self.layers, self.tail, self.ops, self.rope_first_layer,
                                               self.rope_after, self.rope_second, self.rope_temps))
        return h

    @cached_property
    def layer_bytes(self) -> tuple[int, ...]:
        """Each decoder layer's parameters, bytes per rank."""
        return tuple(sum(p.nbytes for p in layer) for layer in self.layers)

    @cached_property
    def role_bytes(self) -> tuple[tuple[str, int], ...]:
        """What the checkpoint's tensors take per rank, by role (before the post-load conversions)."""
        out: dict[str, int] = {}
        roles: dict[int, str] = {}
        for p in (*self.head, *(q for layer in self.layers for q in layer), *self.tail):
            out[p.role] = out.get(p.role, 0) + p.nbytes
            roles.setdefault(p.group, p.role)
        for op in self.ops:              # a GGUF fused linear's weight exists only once loaded (its padded tensor)
            if op.kind == "alloc" and op.name == "qweight":
                out[roles[op.group]] = out.get(roles[op.group], 0) + op.nbytes
        return tuple(out.items())


def vocab_rank(model: ModelSpec, tp: int) -> int:
    return math.ceil(model.vocab_size / tp / 64) * 64       # VocabParallelEmbedding pads to 64


# gpt-oss's MXFP4 experts, as SGLang lays them out per MoE runner backend (layers/quantization/mxfp4.py
# Mxfp4MoEMethod.create_weights): (intermediate, hidden) padded up to multiples of these.
MXFP4_PADDING = {
    "triton_kernels": (64, 1),    # Hopper (and any card) with the triton_kernels package: the override's default
    "marlin": (128, 256),         # SM120 (RTX 50): then prepare_moe_mxfp4_layer_for_marlin repacks, same sizes
    "flashinfer": (256, 256),     # SM100 (B200): flashinfer_mxfp4
}


def mxfp4_backend_for(compute_capability: tuple[int, int] | None) -> str:
    """The MoE runner SGLang's gpt-oss override (arg_groups/overrides.py) picks for MXFP4 on this card."""
    major = compute_capability[0] if compute_capability else None
    return "marlin" if major == 12 else "flashinfer" if major == 10 else "triton_kernels"


class _Builder:
    def __init__(self, model: ModelSpec, tp: int, sm_count: int = CALIBRATION_HOST_SMS,
                 mxfp4_backend: str = "triton_kernels", gpu_experts: int | tuple[int, ...] | None = None):
        self.m, self.tp, self.sms = model, max(1, tp), sm_count
        self.gpu_experts = gpu_experts
        self.mxfp4 = mxfp4_backend
        self.group = 0
        self.ops: list[Op] = []
        self.q = model.quantization
        self.rope_after = 0

    def _new_group(self) -> int:
        self.group += 1
        return self.group

    def quantized(self, path: str) -> Quantization | None:
        """The layer's quantization, or None when the method leaves it in 16-bit (modules_to_not_convert)."""
        q = self.q
        if q is None or q.method == "mxfp4":         # mxfp4 quantizes the experts only
            return None
        for pat in q.ignored:
            rx = re.escape(pat).replace(r"\*", r"[^.]*")
            if re.match(rf"^(model\.)?{rx}(\.|$)", path) or re.search(rf"(^|\.){rx}(\.|$)", path):
                return None
        return q

    def linear(self, role: str, path: str, k: int, n: int, bias: bool = False, bias_dtype_bytes: int = 0,
               quant: bool = True) -> list[Param]:
        """One LinearBase: k inputs, n outputs (already per rank)."""
        m = self.m
        g = self._new_group()
        q = self.quantized(path) if quant else None
        if q is None:
            out = [Param(role, "weight", k * n * m.dtype_bytes, g)]
        elif q.method in ("gptq", "awq"):
            groups = math.ceil(k / q.group_size) if q.group_size > 0 else 1
            qweight = k * n * q.bits // 8
            scales = groups * n * HALF
            qzeros = groups * (n * q.bits // 32) * 4
            if q.method == "gptq":       # GPTQLinearMethod: qweight, g_idx, qzeros, scales
                out = [Param(role, "qweight", qweight, g), Param(role, "g_idx", k * 4, g),
                       Param(role, "qzeros", qzeros, g), Param(role, "scales", scales, g)]
                # GPTQMarlinLinearKernel.process_weights_after_loading
                self.ops += [Op(g, "alloc", "workspace", self.sms * 4), Op(g, "free", "g_idx"),
                             Op(g, "free", "qzeros"), Op(g, "replace", "qweight", qweight),
                             Op(g, "replace", "scales", scales)]
            else:                        # AWQMarlinLinearMethod: qweight, qzeros, scales; zero points converted
                out = [Param(role, "qweight", qweight, g), Param(role, "qzeros", qzeros, g),
                       Param(role, "scales", scales, g)]
                self.ops += [Op(g, "alloc", "workspace", self.sms * 4),
                             Op(g, "replace", "qweight", qweight), Op(g, "replace", "scales", scales),
                             Op(g, "replace", "qzeros", qzeros)]
        elif q.method == "gguf":
            out = self._gguf_linear(role, path, n, g)
        elif q.method == "fp8":          # Fp8LinearMethod.create_weights: fp8 weight + float32 scales
            if q.weight_block:
                bn, bk = q.weight_block
                out = [Param(role, "weight", k * n, g),
                       Param(role, "weight_scale_inv", math.ceil(n / bn) * math.ceil(k / bk) * FP32, g)]
            else:
                out = [Param(role, "weight", k * n, g), Param(role, "weight_scale", FP32, g)]
        else:                            # hf_config refuses every other method before we get here
            raise ValueError(f"unmodelled quantization {q.method}")
        if bias:
            out.append(Param(role, "bias", n * (bias_dtype_bytes or m.dtype_bytes), g))
        return out

    def _gguf_linear(self, role: str, path: str, n: int, g: int) -> list[Param]:
        """GGUFLinearMethod: the shards' rows (per rank) x each shard's bytes per row, from the file."""
        m = self.m
        layer, kind = re.match(r"model\.layers\.(\d+)\.\w+\.(\w+)$", path).groups()  # type: ignore[union-attr]
        kv = max(1, m.num_kv_heads // self.tp) * m.head_dim
        shards = {"qkv_proj": (("attn_q", n - 2 * kv), ("attn_k", kv), ("attn_v", kv)),
                  "gate_up_proj": (("ffn_gate", n // 2), ("ffn_up", n // 2)),
                  "o_proj": (("attn_output", n),), "down_proj": (("ffn_down", n),)}[kind]
        rows = [(r, gguf_row_bytes(self.q, f"blk.{layer}.{name}", self.tp, kind in ("o_proj", "down_proj")))
                for name, r in shards]
        types = Param(role, "qweight_type", len(rows), g)
        if len(rows) == 1:               # materialized at load with the file's shape
            return [types, Param(role, "qweight", rows[0][0] * rows[0][1], g)]
        # fused: _create_padded_weight_param after loading, in module order
        self.ops.append(Op(g, "alloc", "qweight", sum(r for r, _ in rows) * max(b for _, b in rows)))
        return [types]

    def experts(self, path: str, num: int, h: int, i_rank: int) -> list[Param]:
        """FusedMoE's fused tensors for one layer: w13 [E, 2*I, H] and w2 [E, H, I] in the method's layout."""
        m, q = self.m, self.q
        g = self._new_group()
        moe = m.moe
        if q is not None and q.method == "mxfp4":
            # Mxfp4MoEMethod.create_weights: uint8 weights (two values a byte), one uint8 scale per 32, bf16
            # biases, at the backend's padded sizes; marlin then repacks each into a new tensor of the same size
            pad_i, pad_h = MXFP4_PADDING[self.mxfp4]
            i_pad = math.ceil(i_rank / pad_i) * pad_i
            h = math.ceil(h / pad_h) * pad_h
            tensors = (("w13_weight", num * 2 * i_pad * h // 2), ("w13_weight_scale", num * 2 * i_pad * (h // 32)),
                       ("w13_weight_bias", num * 2 * i_pad * HALF), ("w2_weight", num * h * i_pad // 2),
                       ("w2_weight_scale", num * h * (i_pad // 32)), ("w2_weight_bias", num * h * HALF))
            if self.mxfp4 == "marlin":
                # marlin_make_workspace(device, 4): 4 int32 per SM, kept on the layer
                self.ops.append(Op(g, "alloc", "workspace", self.sms * 4 * 4))
                # prepare_moe_mxfp4_layer_for_marlin's order: both weights, both scales, both biases
                self.ops += [Op(g, "replace", *tensors[k]) for k in (0, 3, 1, 4, 2, 5)]
            return [Param("experts", n, b, g) for n, b in tensors]
        qq = self.quantized(path)
        if qq is None:                   # UnquantizedFusedMoEMethod
            out = [Param("experts", "w13_weight", num * 2 * i_rank * h * m.dtype_bytes, g),
                   Param("experts", "w2_weight", num * h * i_rank * m.dtype_bytes, g)]
            if moe is not None and moe.expert_bias:
                out.insert(1, Param("experts", "w13_weight_bias", num * 2 * i_rank * FP32, g))
                out.append(Param("experts", "w2_weight_bias", num * h * FP32, g))
            return out
        if qq.method == "fp8":           # Fp8MoEMethod.create_weights
            if qq.weight_block:
                bn, bk = qq.weight_block
                s13 = num * math.ceil(2 * i_rank / bn) * math.ceil(h / bk) * FP32
                s2 = num * math.ceil(h / bn) * math.ceil(i_rank / bk) * FP32
            else:
                s13, s2 = num * 2 * FP32, num * FP32
            return [Param("experts", "w13_weight", num * 2 * i_rank * h, g),
                    Param("experts", "w2_weight", num * h * i_rank, g),
                    Param("experts", "w13_weight_scale", s13, g), Param("experts", "w2_weight_scale", s2, g)]
        if qq.moe_kernel == "wna16":     # moe_wna16.py MoeWNA16Method.create_weights: the checkpoint's packing as
            # uint8, scales in the model dtype, zero points only when asymmetric (AWQ, or GPTQ sym=false); the
            # group halves until it divides both widths; nothing is repacked after loading
            gs = qq.group_size if qq.group_size > 0 else h
            while i_rank % gs or h % gs:
                gs //= 2
            per = 8 // qq.bits
            out = [Param("experts", "w13_qweight", num * 2 * i_rank * (h // per), g),
                   Param("experts", "w2_qweight", num * h * (i_rank // per), g),
                   Param("experts", "w13_scales", num * 2 * i_rank * (h // gs) * m.dtype_bytes, g),
                   Param("experts", "w2_scales", num * h * (i_rank // gs) * m.dtype_bytes, g)]
            if qq.method == "awq" or not qq.sym:
                out += [Param("experts", "w13_qzeros", num * (2 * i_rank // per) * (h // gs), g),
                        Param("experts", "w2_qzeros", num * (h // per) * (i_rank // gs), g)]
            return out
        # GPTQ / AWQ marlin MoE (gptq/schemes/gptq_moe.py GPTQMarlinMoEMethod; awq AWQMoEMethod)
        gs = qq.group_size if qq.group_size > 0 else h
        g13, g2 = max(1, h // gs), max(1, i_rank * self.tp // gs)    # w2 scales span the full intermediate
        q13 = num * h * 2 * i_rank * qq.bits // 8
        q2 = num * i_rank * h * qq.bits // 8
        s13, s2 = num * g13 * 2 * i_rank * HALF, num * g2 * h * HALF
        if qq.method == "gptq":
            z13 = num * g13 * (2 * i_rank * qq.bits // 32) * m.dtype_bytes
            z2 = num * g2 * (h * qq.bits // 32) * m.dtype_bytes
            out = [Param("experts", "w13_qweight", q13, g), Param("experts", "w2_qweight", q2, g),
                   Param("experts", "w13_scales", s13, g), Param("experts", "w2_scales", s2, g),
                   Param("experts", "w13_qzeros", z13, g), Param("experts", "w2_qzeros", z2, g),
                   Param("experts", "w13_g_idx", num * h * 4, g), Param("experts", "w2_g_idx", num * i_rank * 4, g),
                   Param("experts", "w13_g_idx_sort_indices", num * h * 4, g),
                   Param("experts", "w2_g_idx_sort_indices", num * i_rank * 4, g)]
            self.ops += [Op(g, "free", n) for n in ("w13_g_idx", "w2_g_idx", "w13_g_idx_sort_indices",
                                                     "w2_g_idx_sort_indices")]
            # gptq_marlin_moe_repack and marlin_moe_permute_scales loop over the experts: each expert's repacked
            # weight, and its permuted scales beside the 64-entry int64 permutation, is a work tensor copied into
            # the new tensor and freed (recorded: benchmarks/results/gpu/moe-vs-llamacpp-gptq/h200-stagesnap-j/)
            def one(n: int) -> tuple[int, ...]:     # one expert's work tensor
                return (n // num,) if num else ()
            perm = (SCALE_PERM_BYTES,) if num else ()
            self.ops += [Op(g, "replace", "w13_qweight", q13, one(q13)), Op(g, "replace", "w2_qweight", q2, one(q2)),
                         Op(g, "replace", "w13_scales", s13, perm + one(s13)),
                         Op(g, "replace", "w2_scales", s2, perm + one(s2))]
            return out
        z13, z2 = num * g13 * 2 * i_rank * qq.bits // 8, num * g2 * h * qq.bits // 8
        self.ops += [Op(g, "replace", "w13_qweight", q13), Op(g, "replace", "w2_qweight", q2),
                     Op(g, "replace", "w13_scales", s13), Op(g, "replace", "w2_scales", s2),
                     Op(g, "replace", "w13_qzeros", z13), Op(g, "replace", "w2_qzeros", z2)]
        return [Param("experts", "w13_qweight", q13, g), Param("experts", "w2_qweight", q2, g),
                Param("experts", "w13_scales", s13, g), Param("experts", "w2_scales", s2, g),
                Param("experts", "w13_qzeros", z13, g), Param("experts", "w2_qzeros", z2, g)]

    def norm(self, n: int) -> Param:
        return Param("norm", "weight", n * self.m.dtype_bytes)


def _attention(b: _Builder, i: int) -> list[Param]:
    m, tp = b.m, b.tp
    h, hd = m.hidden_size, m.head_dim
    p = f"model.layers.{i}.self_attn"
    if m.mla is not None:                        # DeepseekV2AttentionMLA
        a = m.mla
        heads = m.num_heads // tp
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        out: list[Param] = []
        if a.q_lora_rank:
            out += b.linear("attention", f"{p}.q_a_proj", h, a.q_lora_rank)
            out.append(Param("attention", "q_a_layernorm", a.q_lora_rank * m.dtype_bytes))
            out += b.linear("attention", f"{p}.q_b_proj", a.q_lora_rank, heads * qk)
        else:
            out += b.linear("attention", f"{p}.q_proj", h, heads * qk)
        out += b.linear("attention", f"{p}.kv_a_proj_with_mqa", h, a.kv_lora_rank + a.qk_rope_head_dim)
        out.append(Param("attention", "kv_a_layernorm", a.kv_lora_rank * m.dtype_bytes))
        kv_b = b.linear("attention", f"{p}.kv_b_proj", a.kv_lora_rank, heads * (a.qk_nope_head_dim + a.v_head_dim))
        out += kv_b
        out += b.linear("attention", f"{p}.o_proj", heads * a.v_head_dim, h)
        # post_load_weights: w_kc and w_vc are contiguous copies of kv_b_proj's two halves
        # (deepseek_common/deepseek_weight_loader.py), kept beside it, on kv_b_proj's device: in host RAM when
        # --cpu-offload-gb moved kv_b_proj there (which is why SGLang cannot serve MLA with it: planner.py)
        b.ops.append(Op(kv_b[0].group, "alloc", "w_kc_w_vc", kv_b[0].nbytes))
        b.rope_after = len(out)
        return out
    q_rank = m.num_heads * hd // tp
    kv_rank = max(1, m.num_kv_heads // tp) * hd
    out = b.linear("attention", f"{p}.qkv_proj", h, q_rank + 2 * kv_rank, bias=m.attention_bias)
    out += b.linear("attention", f"{p}.o_proj", q_rank, h, bias=m.o_bias)
    b.rope_after = len(out)
    if m.attention_sinks:                        # gpt_oss.py: one value per local head (bf16 unless trtllm_mha)
        out.append(Param("attention", "sinks", (m.num_heads // tp) * HALF))
    if m.qk_norm:
        if m.architecture == "OlmoeForCausalLM":  # OLMoE normalises the whole q and k projections
            out += [Param("norm", "q_norm", q_rank * m.dtype_bytes), Param("norm", "k_norm", kv_rank * m.dtype_bytes)]
        else:
            out += [b.norm(hd), b.norm(hd)]
    return out


def _mlp(b: _Builder, i: int) -> list[Param]:
    m, tp = b.m, b.tp
    h = m.hidden_size
    p = f"model.layers.{i}.mlp"
    moe = m.moe
    if moe is None or not moe.moe_layers[i]:
        inter = m.intermediate_size // tp
        return b.linear("mlp", f"{p}.gate_up_proj", h, 2 * inter) + b.linear("mlp", f"{p}.down_proj", inter, h)
    # the router: ReplicatedLinear(quant_config=None) in every family, 16-bit (gpt-oss: with a bias);
    # DeepseekV2MoE builds its MoEGate before the experts, the Qwen/Mixtral blocks after them
    router = b.linear("router", f"{p}.gate", h, moe.num_experts, bias=moe.router_bias, quant=False)
    # SGLang's KTransformers path (kt_ep_wrapper.KTEPWrapperMethod.create_weights): the wrapped GPU method
    # creates the fused tensors for experts 0..N-1 only; the router still scores all of them
    # (whole layers, the kit's adapter: one count per decoder layer, all or none)
    num = moe.num_experts if b.gpu_experts is None else \
        b.gpu_experts[i] if isinstance(b.gpu_experts, tuple) else b.gpu_experts
    experts = b.experts(f"{p}.experts", num, h, moe.expert_intermediate // tp)
    out = router + experts if m.mla is not None else experts + router
    if moe.shared_intermediate:
        s = moe.shared_intermediate // tp
        out += b.linear("shared", f"{p}.shared_expert.gate_up_proj", h, 2 * s)
        out += b.linear("shared", f"{p}.shared_expert.down_proj", s, h)
        if moe.shared_gate:
            out += b.linear("router", f"{p}.shared_expert_gate", h, 1, quant=False)
    return out


def gguf_row_bytes(q: Quantization | None, tensor: str, tp: int = 1, row_parallel: bool = False) -> int:
    """Bytes per row of a GGUF matrix (its input dimension in the file's ggml type); a row-parallel linear's
    rank holds 1/tp of each row."""
    rows = {name: b for name, _, b in (q.ggml if q is not None else ())}
    if tensor not in rows:
        raise ValueError(f"the GGUF has no {tensor}.weight")
    return rows[tensor] // tp if row_parallel else rows[tensor]


def _gguf_head(model: ModelSpec, tensor: str, role: str) -> tuple[Param, ...]:
    """GGUFEmbeddingMethod: the file's rows (the vocabulary, unpadded) x bytes per row, and its type byte."""
    return (Param(role, "qweight_type", 1), Param(role, "qweight", model.vocab_size * gguf_row_bytes(
        model.quantization, tensor)))


def rope_cache_bytes(model: ModelSpec, context_len: int) -> int:
    """The rotary cos/sin cache: positions x rotary dim, float32 on CUDA (rotary_embedding/base.py)."""
    rot = model.mla.qk_rope_head_dim if model.mla is not None else model.head_dim
    return context_len * rot * FP32


def rope_build_temps(model: ModelSpec, context_len: int) -> tuple[int, ...]:
    """The rotary cos/sin cache's work tensors, as CachingAllocator.run encodes them, before the cache is allocated;
    whatever they leave allocated is freed once it is built. RotaryEmbedding._compute_cos_sin_cache
    (rotary_embedding/base.py): the positions (float32), their products with the inverse frequencies, and those
    products' cos and sin, half the cache each (recorded: h200-stagesnap*/, Qwen3-MoE). YaRN's (yarn.py) scales cos
    and sin by mscale, each product a new tensor and the unscaled one freed at once (derived from source). Other
    scaled classes (Llama 3, linear, dynamic, DeepSeek's YaRN, ...) are not replayed: ()."""
    scaling = model.rope_scaling or {}
    kind = scaling.get("rope_type") or scaling.get("type")
    if model.mla is not None or (scaling and kind != "yarn") or context_len <= 0:
        return ()
    half = rope_cache_bytes(model, context_len) // 2
    if not scaling:
        return (context_len * FP32, half, half, half)
    return (context_len * FP32, half, half, half, -3, half, half, -5)


# weight_layout is pure and its inputs are frozen: one build per (model, tp, context, card, backend, N). A plan
# asks for the same layout many times (weights, alternatives, the hybrid split's search), a test run ~10^4 times.
_LAYOUTS: dict[tuple[object, ...], WeightLayout] = {}
_LAYOUTS_MAX = 2048


def weight_layout(model: ModelSpec, tp: int, context_len: int, sm_count: int = CALIBRATION_HOST_SMS,
                  mxfp4_backend: str = "triton_kernels",
                  gpu_experts: int | tuple[int, ...] | None = None) -> WeightLayout:
    """Every parameter per rank, in module order. `gpu_experts`: the KTransformers hybrid mode's N (routed
    experts per MoE layer on the GPU; None = all of them), or one count per decoder layer (whole layers).
    Memoized: ModelSpec holds a dict (rope_scaling), so the key is its repr, which spells every field."""
    key = (repr(model), tp, context_len, sm_count, mxfp4_backend, gpu_experts)
    layout = _LAYOUTS.get(key)
    if layout is None:
        if len(_LAYOUTS) >= _LAYOUTS_MAX:
            _LAYOUTS.clear()
        layout = _LAYOUTS[key] = _build_layout(model, tp, context_len, sm_count, mxfp4_backend, gpu_experts)
    return layout


def _build_layout(model: ModelSpec, tp: int, context_len: int, sm_count: int, mxfp4_backend: str,
                  gpu_experts: int | tuple[int, ...] | None) -> WeightLayout:
    b = _Builder(model, tp, sm_count, mxfp4_backend, gpu_experts)
    h = model.hidden_size
    emb = vocab_rank(model, b.tp) * h * model.dtype_bytes
    layers = []
    rope_after = 0
    for i in range(model.num_layers):
        layer = _attention(b, i)
        rope_after = rope_after or b.rope_after
        layer += _mlp(b, i)
        layer += [b.norm(h) for _ in range(model.norms_per_layer)]
        layers.append(tuple(layer))
    tail = [b.norm(h)] + ([] if model.tie_word_embeddings else [Param("lm_head", "weight", emb)])
    head: tuple[Param, ...] = (Param("embed", "weight", emb),)
    if model.quantization is not None and model.quantization.method == "gguf":
        head = _gguf_head(model, "token_embd", "embed")
        tail = [b.norm(h)] + ([] if model.tie_word_embeddings else list(_gguf_head(model, "output", "lm_head")))
    # get_rope caches one RotaryEmbedding per (dims, base, ...): Gemma 3's sliding layers use another base than
    # its global ones, so the first layer of the other kind builds a second cos/sin cache of the same size
    second = (0, 0)
    sw = model.sliding
    if sw is not None and sw.local_rope_theta is not None and sw.local_rope_theta != model.rope_theta \
            and len(set(sw.swa_layers)) == 2:
        second = (sw.swa_layers.index(not sw.swa_layers[0]), rope_cache_bytes(model, context_len))
    return WeightLayout(head=head, layers=tuple(layers), tail=tuple(tail),
                        ops=tuple(b.ops), rope_first_layer=rope_cache_bytes(model, context_len),
                        rope_after=rope_after, rope_second=second, rope_temps=rope_build_temps(model, context_len))


# The architectures whose SGLang model class defines get_model_config_for_expert_location (the ones modelled here):
# ModelRunner.initialize builds their expert-location maps on the GPU before "Load weight begin" (what the server holds
# before its weights besides its CUDA context: weight_load.prelude_bytes)
EXPERT_LOCATION_ARCHS = frozenset({"Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM", "DeepseekV2ForCausalLM",
                                   "DeepseekV3ForCausalLM", "GptOssForCausalLM"})
INT64, BOOL = 8, 1


def expert_location_prelude(model: ModelSpec) -> tuple[int, ...]:
    """SGLang 0.5.15.post1's expert-location maps, allocated on the GPU before the weights (srt/eplb/expert_location.py,
    ExpertLocationMetadata.init_trivial -> init_by_mapping -> _init_raw; every rank, ep_size 1, no redundant experts),
    as allocator operations in order: n > 0 allocates n bytes, -k frees the k-th allocation (1-based). int64 [L, E]
    physical_to_logical_map (kept); the logical->physical map [L, E, 1] (freed when init_by_mapping returns); F.pad of
    it to [L, E, E] (kept); its `!= -1` mask, bool [L, E, E], freed once count_nonzero's int64 [L, E] is out (kept).
    L: num_hidden_layers, E: the routed experts. Qwen3-Coder-30B-A3B's padded map is 6.3 MB: a 20 MiB segment of the
    large pool, which is why its servers saw 15.31 GiB at "Load weight begin" where every other model saw 15.33 on the
    same 16 GiB (benchmarks/calibration/, benchmarks/results/gpu/)."""
    if model.moe is None or model.architecture not in EXPERT_LOCATION_ARCHS:
        return ()
    n_l, n_e = model.num_layers, model.moe.num_experts
    return (n_l * n_e * INT64, n_l * n_e * INT64, n_l * n_e * n_e * INT64, n_l * n_e * n_e * BOOL,
            n_l * n_e * INT64, -4, -2)


def bytes_by_role(layout: WeightLayout) -> dict[str, int]:
    """What the checkpoint's tensors take per rank, by role (before the post-load conversions)."""
    return dict(layout.role_bytes)


# ----------------------------------------------------------------------------------------------
# expert routing
# ----------------------------------------------------------------------------------------------
def expected_distinct_experts(num_experts: int, top_k: int, batch: int) -> float:
    """Experts one MoE layer touches for `batch` tokens routed independently and uniformly:
    E * (1 - (1 - k/E)^n). Real routers are skewed, so this is an upper estimate of the bytes read."""
    if batch <= 0:
        return 0.0
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** batch)
