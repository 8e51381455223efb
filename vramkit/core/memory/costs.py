"""What a model costs on a GPU, per tensor-parallel rank: weights by component, SGLang's KV pool layout,
the activations of a prefill step and the bytes a decode step reads. Pure; core/plan/planner.py combines them
with the card and the knobs into a plan. Each formula follows SGLang 0.5.15.post1's code, cited where used.
"""
from __future__ import annotations

from dataclasses import dataclass

from vramkit.core.model.arch import bytes_by_role, expected_distinct_experts, weight_layout
from vramkit.core.model.spec import ModelSpec

KV_DTYPE_BYTES = {"fp8_e5m2": 1, "fp8_e4m3": 1, "bf16": 2, "bfloat16": 2, "fp4_e2m1": 0.5}


def weight_components(model: ModelSpec, tp: int = 1, mxfp4_backend: str = "triton_kernels",
                      gpu_experts: int | tuple[int, ...] | None = None) -> dict[str, int]:
    """Checkpoint bytes per TP rank by component (core/model/arch.py lists every tensor). Column-parallel linears
    split their outputs, row-parallel their inputs, the vocabulary is split; norms, routers are replicated;
    every routed expert is on every rank with its intermediate size split (the hybrid MoE mode: the
    `gpu_experts` of each layer the GPU holds)."""
    roles = bytes_by_role(weight_layout(model, tp, 1, mxfp4_backend=mxfp4_backend, gpu_experts=gpu_experts))
    out = {"embed_tokens": roles.get("embed", 0), "lm_head": roles.get("lm_head", 0),
           "attention": roles.get("attention", 0), "mlp": roles.get("mlp", 0), "norms": roles.get("norm", 0)}
    if model.moe is not None:
        out |= {"experts": roles.get("experts", 0), "shared_experts": roles.get("shared", 0),
                "router": roles.get("router", 0)}
    return out


@dataclass(frozen=True)
class KvLayout:
    """SGLang's KV pool for a model: bytes per token of each kind of layer, and how many of each.

    Full-attention layers (MHA: kv_heads_per_rank * (head_dim + v_head_dim) * element size; MLA:
    (kv_lora_rank + qk_rope_head_dim) * element size, not split by tp) hold every token. With the hybrid
    SWA pool (gpt-oss) the sliding layers get swa_full_tokens_ratio (0.8) as many tokens
    (model_executor/pool_configurator.py DefaultPoolConfigurator / HybridSWAPoolConfigurator)."""

    full_per_token: int          # one layer
    full_layers: int
    swa_per_token: int = 0
    swa_layers: int = 0
    swa_ratio: float = 0.8

    @property
    def cell(self) -> float:
        """Bytes per token of max_total_num_tokens (the full pool's token count)."""
        return self.full_per_token * self.full_layers + self.swa_ratio * self.swa_per_token * self.swa_layers

    def tokens(self, available_bytes: float) -> int:
        return max(0, int(available_bytes // self.cell)) if available_bytes > 0 else 0

    def pool_bytes(self, tokens: int) -> int:
        swa_tokens = int(tokens * self.swa_ratio) if self.swa_layers else 0
        return tokens * self.full_per_token * self.full_layers + swa_tokens * self.swa_per_token * self.swa_layers


def kv_layout(model: ModelSpec, kv_dtype: str, tp: int = 1) -> KvLayout:
    elem = model.dtype_bytes if kv_dtype == "auto" else KV_DTYPE_BYTES[kv_dtype]
    if model.mla is not None:
        return KvLayout(int((model.mla.kv_lora_rank + model.mla.qk_rope_head_dim) * elem), model.num_layers)
    per_layer = int(max(1, model.num_kv_heads // tp) * 2 * model.head_dim * elem)
    if model.sliding is not None and model.sliding.hybrid_pool:
        swa = sum(model.sliding.swa_layers)
        return KvLayout(per_layer, model.num_layers - swa, per_layer, swa)
    return KvLayout(per_layer, model.num_layers)


def kv_bytes_per_token(model: ModelSpec, kv_dtype: str, tp: int = 1) -> int:
    """SGLang's cell_size per rank: kv_heads_per_rank * (head_dim + v_head_dim) * layers * element size.
    kv_heads_per_rank = max(1, kv_heads // tp) (heads are replicated when tp > kv_heads); MLA and the
    hybrid SWA pool as in KvLayout."""
    return int(kv_layout(model, kv_dtype, tp).cell)


def activation_bytes(model: ModelSpec, chunk_tokens: int, tp: int, factor: float) -> int:
    """Largest prefill step's live tensors, first principles in the model dtype (a few hidden-state
    copies, q/k/v, MLP gate+up and its activation), times a calibrated factor. MoE layers: fused_moe's
    intermediate caches, top_k x (2I + I + H) per token (fused_moe_triton), plus the shared expert's MLP and
    the router logits (float32). MLA: q, the latent kv and kv_b's expanded keys/values. Derived from source;
    the factor is calibrated on dense points."""
    h = model.hidden_size
    if model.mla is not None:
        a = model.mla
        heads = model.num_heads // tp
        qkv = heads * (a.qk_nope_head_dim + a.qk_rope_head_dim) + a.kv_lora_rank + a.qk_rope_head_dim \
            + heads * (a.qk_nope_head_dim + a.v_head_dim)
    else:
        qkv = (model.num_heads + 2 * model.num_kv_heads) * model.head_dim // tp
    moe = model.moe
    if moe is None:
        mlp = 3 * (model.intermediate_size // tp)
    else:
        i_rank = moe.expert_intermediate // tp
        mlp = moe.top_k * (3 * i_rank + h) + 3 * (moe.shared_intermediate // tp) + 2 * moe.num_experts
        if not all(moe.moe_layers):
            mlp = max(mlp, 3 * (model.intermediate_size // tp))
    per_token = (4 * h + qkv + mlp) * model.dtype_bytes
    return int(chunk_tokens * per_token * factor)


def decode_read_bytes(model: ModelSpec, live_by_role: dict[str, int], batch: int, tp: int = 1) -> int:
    """Bytes one decode step reads from GPU memory per rank for `batch` streams: every resident weight but
    the embedding table (a lookup; read in full only when tied to lm_head) and the rope cache, with the
    routed experts counted only for the experts the batch touches: E * (1 - (1 - k/E)^batch) per layer."""
    read: float = sum(v for r, v in live_by_role.items() if r not in ("embed", "rope", "experts"))
    if model.tie_word_embeddings:
        read += live_by_role.get("embed", 0)
    experts = live_by_role.get("experts", 0)
    if model.moe is not None and experts:
        moe = model.moe
        read += experts * expected_distinct_experts(moe.num_experts, moe.top_k, batch) / moe.num_experts
    return int(read)
