"""The core's value types for what runs where: a model's shape (ModelSpec and its parts) and a GPU (GpuSpec).

Plain frozen dataclasses, no file format: vramkit/hf_config.py turns a Hugging Face config.json into a
ModelSpec (and refuses what the planner does not model), vramkit/catalog.py reads config/*.toml.
Every field is what SGLang 0.5.15.post1's model code reads from the config (names follow transformers).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:     # a type only: core/plan/knobs.py declares it (its flags are spelled there)
    from vramkit.core.plan.knobs import Serving

DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}


@dataclass(frozen=True)
class Quantization:
    """A checkpoint's quantization_config, as far as the planner prices it.

    method: "gptq" | "awq" (int4/int8, marlin kernels), "fp8" (block or per-tensor; compressed-tensors
    fp8 maps here too), "mxfp4" (gpt-oss experts), "gguf" (a GGUF file: each matrix in its own ggml type).
    `ignored` lists module-name patterns left in 16-bit. `ggml` (gguf only): each matrix's llama.cpp tensor
    name (no ".weight"), ggml type and bytes per row, as the file has them (vramkit/gguf_model.py).
    `moe_kernel` (gptq/awq only): the GPU kernel SGLang runs the experts with, which sets their layout:
    "marlin" (its default: repacked for the marlin MoE kernel) or "wna16" (`--quantization moe_wna16`: the
    checkpoint's int4 packing kept, run by the triton MoE kernel). The planner picks it (core/plan/kt_hybrid.py
    `moe_kernel`); a checkpoint reads as marlin.
    """

    method: str
    bits: int = 4
    group_size: int = 128
    desc_act: bool = False
    sym: bool = True
    weight_block: tuple[int, int] | None = None      # fp8 block quantization [n, k]; None = per-tensor
    fp8_scheme: str = ""    # fp8 only: "dynamic" / "static" activation scales (quant_method fp8: weight_scale_inv
                            # tensors), or "compressed-tensors" (its own tensor names)
    ignored: tuple[str, ...] = ()
    ggml: tuple[tuple[str, str, int], ...] = ()
    moe_kernel: str = "marlin"


@dataclass(frozen=True)
class MoeSpec:
    """Routed experts (FusedMoE: w13 [E, 2*I, H] and w2 [E, H, I]), shared experts and the router."""

    num_experts: int
    top_k: int
    expert_intermediate: int
    moe_layers: tuple[bool, ...]           # per decoder layer: MoE (True) or dense MLP (False)
    shared_intermediate: int = 0           # total width of the shared expert MLP(s), 0 = none
    shared_gate: bool = False              # Qwen2-MoE: a sigmoid gate [1, H] on the shared expert
    router_bias: bool = False              # gpt-oss
    expert_bias: bool = False              # gpt-oss: w13/w2 biases

    @property
    def num_moe_layers(self) -> int:
        return sum(self.moe_layers)


@dataclass(frozen=True)
class MlaSpec:
    """DeepSeek-V2/V3 multi-head latent attention (deepseek_v2.py DeepseekV2AttentionMLA)."""

    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


@dataclass(frozen=True)
class SlidingWindow:
    """Sliding-window attention: which layers slide, and whether SGLang gives them a pool of their own."""

    window: int
    swa_layers: tuple[bool, ...]           # per decoder layer
    hybrid_pool: bool                      # SGLang's hybrid SWA pool (gpt-oss), or one full pool (Gemma 2/3)
    local_rope_theta: float | None = None  # Gemma 3: the sliding layers' own rope base (a second rotary cache)


@dataclass(frozen=True)
class ModelSpec:
    """A model's shape, read from its config.json (the numbers SGLang's ModelConfig and model code read)."""

    name: str
    hf_id: str
    config_dir: Path
    architecture: str
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int
    rope_theta: float
    tie_word_embeddings: bool
    dtype: str                      # what SGLang loads the unquantized tensors as (16-bit, never float32)
    attention_bias: bool            # Qwen2: q/k/v biases; gpt-oss: q/k/v and o biases
    rope_scaling: dict[str, Any] | None
    quantization: Quantization | None
    note: str = ""
    family: str = "dense"           # one of vramkit.hf_config.FAMILIES
    checkpoint_dtype: str = ""      # what config.json says (torch_dtype / dtype)
    qk_norm: bool = False           # Qwen3: RMSNorm(head_dim) on q and k
    norms_per_layer: int = 2        # Gemma 2/3: 4 (pre/post attention and MLP)
    o_bias: bool = False            # gpt-oss: o_proj has a bias
    attention_sinks: bool = False   # gpt-oss: one learned value per head
    moe: MoeSpec | None = None
    mla: MlaSpec | None = None
    sliding: SlidingWindow | None = None
    notes: tuple[str, ...] = field(default=(), compare=False)   # what the parser filled in, for the plan
    serving: Serving | None = field(default=None, compare=False)  # the catalog's serving settings (issue 21)

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def is_moe(self) -> bool:
        return self.moe is not None


@dataclass(frozen=True)
class GpuSpec:
    name: str
    label: str
    memory_total_bytes: int
    bandwidth_bytes_s: float
    pcie_gen: int
    pcie_lanes: int
    nvml_names: tuple[str, ...] = ()
    sm_count: int | None = None     # streaming multiprocessors (marlin's workspace); None: not catalogued
    compute_capability: tuple[int, int] | None = None   # None: not catalogued, and NVML did not say
    source: str = ""                # the spec page the catalogued figures come from ("" for a card read or given)

    @property
    def pcie_bytes_s(self) -> float:
        """One direction, after line encoding (gen3+ 128b/130b): the copy ceiling."""
        per_lane_gbs = {3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}[self.pcie_gen]
        return per_lane_gbs * 1e9 * self.pcie_lanes
