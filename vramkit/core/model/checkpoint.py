"""The tensors of a Hugging Face checkpoint, named, shaped and typed from its config.json (pure: no I/O).

Used by tools/make_random_checkpoint.py to write random-weight checkpoints that SGLang (and KTransformers'
kt-kernel, which reads the CPU experts from the same files) load as if they were the real model: issue 12,
"weights that exist on the GPU host". Speed and memory of such a checkpoint are real; its text is noise.

Formats:
- ``bf16``: every tensor bfloat16, as the released Qwen3 MoE checkpoints.
- ``fp8``: block FP8 as Qwen's ``*-FP8`` releases: every Linear of the decoder (attention projections and
  each expert's gate/up/down) is float8_e4m3fn with a float32 ``weight_scale_inv`` of
  ceil(out/128) x ceil(in/128); embeddings, norms, the router (``mlp.gate``) and ``lm_head`` stay bf16.
  kt-kernel's ``FP8`` method reads these expert tensors directly (its ``FP8SafeTensorLoader``, "deepseek"
  naming: ``{layer}.mlp.experts.{e}.{gate,up,down}_proj.weight`` + ``weight_scale_inv``), so no KT
  conversion is needed for it.
- ``gptq``: 4-bit GPTQ as Qwen's ``*-GPTQ-Int4`` releases (AutoGPTQ's "gptq" checkpoint format, symmetric, no
  act-order): every Linear of the decoder is ``qweight`` int32 [in / 8, out] (eight 4-bit values along the input),
  ``qzeros`` int32 [in / group, out / 8], ``scales`` float16 [in / group, out] and ``g_idx`` int32 [in]; the rest
  float16 (the releases' torch_dtype). The group is the config's quantization_config group_size (128 otherwise).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FORMATS = ("bf16", "fp8", "gptq")
FP8_BLOCK = 128
GPTQ_BITS = 4
GPTQ_PACK = 32 // GPTQ_BITS      # 4-bit values in an int32
GPTQ_GROUP = 128
SUPPORTED_ARCHITECTURES = ("Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM", "Qwen3ForCausalLM", "Qwen2ForCausalLM")


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str            # "bf16" | "f16" | "fp8_e4m3" | "f32" | "i32"
    role: str             # "embed" | "norm" | "attn" | "router" | "expert" | "mlp" | "scale" | "head" | "zeros" |
    #                       "g_idx" (the last two GPTQ's; its qweight has its Linear's role, its scales "scale")

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * {"bf16": 2, "f16": 2, "fp8_e4m3": 1, "f32": 4, "i32": 4}[self.dtype]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def quantization_config(fmt: str, group: int = GPTQ_GROUP) -> dict[str, Any] | None:
    """What config.json carries for the format (Qwen's FP8 releases: dynamic activations, 128x128 blocks; its
    GPTQ-Int4 releases: 4 bits, symmetric, no act-order)."""
    if fmt == "fp8":
        return {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                "weight_block_size": [FP8_BLOCK, FP8_BLOCK]}
    if fmt == "gptq":
        return {"bits": GPTQ_BITS, "group_size": group, "desc_act": False, "sym": True, "quant_method": "gptq",
                "damp_percent": 0.01, "true_sequential": True, "static_groups": False, "checkpoint_format": "gptq"}
    return None


def gptq_group(cfg: dict[str, Any]) -> int:
    """The GPTQ group a config asks for (its quantization_config's group_size where it is GPTQ), else GPTQ_GROUP. A
    checkpoint this writer cannot make (another bit width, act-order, zero points) is a ValueError."""
    q = cfg.get("quantization_config") or {}
    if q.get("quant_method") != "gptq":
        return GPTQ_GROUP
    if int(q.get("bits", GPTQ_BITS)) != GPTQ_BITS or q.get("desc_act") or not q.get("sym", True):
        raise ValueError(f"GPTQ {q.get('bits')} bits, desc_act {q.get('desc_act')}, sym {q.get('sym')}: this writer "
                         "makes 4-bit symmetric GPTQ without act-order")
    return int(q.get("group_size", GPTQ_GROUP))


def float_dtype(fmt: str) -> str:
    """The unquantized tensors' dtype: float16 beside GPTQ (its releases' torch_dtype), else bfloat16."""
    return "f16" if fmt == "gptq" else "bf16"


def _linear(name: str, out_f: int, in_f: int, role: str, fmt: str, group: int = GPTQ_GROUP) -> list[TensorSpec]:
    if fmt == "fp8":
        return [TensorSpec(f"{name}.weight", (out_f, in_f), "fp8_e4m3", role),
                TensorSpec(f"{name}.weight_scale_inv", (_ceil_div(out_f, FP8_BLOCK), _ceil_div(in_f, FP8_BLOCK)),
                           "f32", "scale")]
    if fmt == "gptq":
        if in_f % group or in_f % GPTQ_PACK or out_f % GPTQ_PACK:
            raise ValueError(f"{name} [{out_f}, {in_f}]: GPTQ needs the input a multiple of the group ({group}) and "
                             f"both sides of {GPTQ_PACK}")
        return [TensorSpec(f"{name}.qweight", (in_f // GPTQ_PACK, out_f), "i32", role),
                TensorSpec(f"{name}.qzeros", (in_f // group, out_f // GPTQ_PACK), "i32", "zeros"),
                TensorSpec(f"{name}.scales", (in_f // group, out_f), "f16", "scale"),
                TensorSpec(f"{name}.g_idx", (in_f,), "i32", "g_idx")]
    return [TensorSpec(f"{name}.weight", (out_f, in_f), "bf16", role)]


def layer_tensors(cfg: dict[str, Any], i: int, fmt: str) -> list[TensorSpec]:
    """One decoder layer's tensors, in the names transformers and SGLang's qwen2/qwen3(_moe) loaders use."""
    h = int(cfg["hidden_size"])
    n_q, n_kv = int(cfg["num_attention_heads"]), int(cfg.get("num_key_value_heads", cfg["num_attention_heads"]))
    hd = int(cfg.get("head_dim") or h // n_q)
    p = f"model.layers.{i}"
    fd, g = float_dtype(fmt), gptq_group(cfg) if fmt == "gptq" else GPTQ_GROUP

    def linear(name: str, out_f: int, in_f: int, role: str) -> list[TensorSpec]:
        return _linear(name, out_f, in_f, role, fmt, g)
    out = [TensorSpec(f"{p}.input_layernorm.weight", (h,), fd, "norm"),
           TensorSpec(f"{p}.post_attention_layernorm.weight", (h,), fd, "norm")]
    for proj, o in (("q_proj", n_q * hd), ("k_proj", n_kv * hd), ("v_proj", n_kv * hd)):
        out += linear(f"{p}.self_attn.{proj}", o, h, "attn")
        if cfg.get("qkv_bias") or cfg.get("model_type") in ("qwen2", "qwen2_moe"):
            out.append(TensorSpec(f"{p}.self_attn.{proj}.bias", (o,), fd, "attn"))
    out += linear(f"{p}.self_attn.o_proj", h, n_q * hd, "attn")
    if cfg.get("model_type", "").startswith("qwen3"):
        out += [TensorSpec(f"{p}.self_attn.q_norm.weight", (hd,), fd, "norm"),
                TensorSpec(f"{p}.self_attn.k_norm.weight", (hd,), fd, "norm")]
    if is_moe_layer(cfg, i):
        n_e, inter = int(cfg["num_experts"]), int(cfg["moe_intermediate_size"])
        out.append(TensorSpec(f"{p}.mlp.gate.weight", (n_e, h), fd, "router"))
        for e in range(n_e):
            q = f"{p}.mlp.experts.{e}"
            out += linear(f"{q}.gate_proj", inter, h, "expert")
            out += linear(f"{q}.up_proj", inter, h, "expert")
            out += linear(f"{q}.down_proj", h, inter, "expert")
        shared = int(cfg.get("shared_expert_intermediate_size") or 0)
        if shared:
            for proj, o, n in (("gate_proj", shared, h), ("up_proj", shared, h), ("down_proj", h, shared)):
                out += linear(f"{p}.mlp.shared_expert.{proj}", o, n, "mlp")
            out.append(TensorSpec(f"{p}.mlp.shared_expert_gate.weight", (1, h), fd, "router"))
    else:
        inter = int(cfg["intermediate_size"])
        for proj, o, n in (("gate_proj", inter, h), ("up_proj", inter, h), ("down_proj", h, inter)):
            out += linear(f"{p}.mlp.{proj}", o, n, "mlp")
    return out


def is_moe_layer(cfg: dict[str, Any], i: int) -> bool:
    if not cfg.get("num_experts"):
        return False
    step = int(cfg.get("decoder_sparse_step") or 1)
    return i not in (cfg.get("mlp_only_layers") or []) and (i + 1) % step == 0


def checkpoint_tensors(cfg: dict[str, Any], fmt: str) -> list[TensorSpec]:
    """Every tensor of the checkpoint, in file order (embeddings, layers, final norm, lm_head)."""
    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r}: one of {', '.join(FORMATS)}")
    arch = (cfg.get("architectures") or ["?"])[0]
    if arch not in SUPPORTED_ARCHITECTURES:
        raise ValueError(f"architecture {arch}: this writer knows {', '.join(SUPPORTED_ARCHITECTURES)}")
    h, vocab, fd = int(cfg["hidden_size"]), int(cfg["vocab_size"]), float_dtype(fmt)
    out = [TensorSpec("model.embed_tokens.weight", (vocab, h), fd, "embed")]
    for i in range(int(cfg["num_hidden_layers"])):
        out += layer_tensors(cfg, i, fmt)
    out.append(TensorSpec("model.norm.weight", (h,), fd, "norm"))
    if not cfg.get("tie_word_embeddings"):
        out.append(TensorSpec("lm_head.weight", (vocab, h), fd, "head"))
    return out


def shard(tensors: list[TensorSpec], max_shard_bytes: int) -> list[list[TensorSpec]]:
    """Consecutive groups of at most max_shard_bytes (a tensor larger than that gets a shard of its own)."""
    shards: list[list[TensorSpec]] = [[]]
    size = 0
    for t in tensors:
        if shards[-1] and size + t.nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(t)
        size += t.nbytes
    return shards


def shard_name(k: int, n: int) -> str:
    return f"model-{k + 1:05d}-of-{n:05d}.safetensors"


# kt-kernel's RAWINT4 kernel's scale group (groups of 128 give NaN: benchmarks/results/gpu/kt-rawint4/)
RAWINT4_GROUP = 32


def rawint4_problem(method: str, bits: int, group: int, sym: bool, desc_act: bool) -> str | None:
    """Why a checkpoint's quantization has no RAWINT4 form (None: core/model/kt_repack.py repacks it): the planner
    (--kt-method RAWINT4) and the repack (its checkpoint's config) ask this one rule."""
    if method != "gptq" or bits != 4:
        return f"RAWINT4 is made from a 4-bit GPTQ checkpoint; this one is {method} at {bits} bits"
    why = ("zero points" if not sym else "act-order" if desc_act else
           f"group size {group}" if group <= 0 or group % RAWINT4_GROUP else None)
    return None if why is None else (f"GPTQ with {why} has no RAWINT4 form (symmetric int4, no act-order, groups of "
                                     f"a multiple of {RAWINT4_GROUP})")
