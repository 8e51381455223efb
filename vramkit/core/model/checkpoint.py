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
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FORMATS = ("bf16", "fp8")
FP8_BLOCK = 128
SUPPORTED_ARCHITECTURES = ("Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM", "Qwen3ForCausalLM", "Qwen2ForCausalLM")


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str            # "bf16" | "fp8_e4m3" | "f32"
    role: str             # "embed" | "norm" | "attn" | "router" | "expert" | "mlp" | "scale" | "head"

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * {"bf16": 2, "fp8_e4m3": 1, "f32": 4}[self.dtype]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def quantization_config(fmt: str) -> dict[str, Any] | None:
    """What config.json carries for the format (Qwen's FP8 releases: dynamic activations, 128x128 blocks)."""
    if fmt == "fp8":
        return {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                "weight_block_size": [FP8_BLOCK, FP8_BLOCK]}
    return None


def _linear(name: str, out_f: int, in_f: int, role: str, fmt: str) -> list[TensorSpec]:
    if fmt == "fp8":
        return [TensorSpec(f"{name}.weight", (out_f, in_f), "fp8_e4m3", role),
                TensorSpec(f"{name}.weight_scale_inv", (_ceil_div(out_f, FP8_BLOCK), _ceil_div(in_f, FP8_BLOCK)),
                           "f32", "scale")]
    return [TensorSpec(f"{name}.weight", (out_f, in_f), "bf16", role)]


def layer_tensors(cfg: dict[str, Any], i: int, fmt: str) -> list[TensorSpec]:
    """One decoder layer's tensors, in the names transformers and SGLang's qwen2/qwen3(_moe) loaders use."""
    h = int(cfg["hidden_size"])
    n_q, n_kv = int(cfg["num_attention_heads"]), int(cfg.get("num_key_value_heads", cfg["num_attention_heads"]))
    hd = int(cfg.get("head_dim") or h // n_q)
    p = f"model.layers.{i}"
    out = [TensorSpec(f"{p}.input_layernorm.weight", (h,), "bf16", "norm"),
           TensorSpec(f"{p}.post_attention_layernorm.weight", (h,), "bf16", "norm")]
    for proj, o in (("q_proj", n_q * hd), ("k_proj", n_kv * hd), ("v_proj", n_kv * hd)):
        out += _linear(f"{p}.self_attn.{proj}", o, h, "attn", fmt)
        if cfg.get("qkv_bias") or cfg.get("model_type") in ("qwen2", "qwen2_moe"):
            out.append(TensorSpec(f"{p}.self_attn.{proj}.bias", (o,), "bf16", "attn"))
    out += _linear(f"{p}.self_attn.o_proj", h, n_q * hd, "attn", fmt)
    if cfg.get("model_type", "").startswith("qwen3"):
        out += [TensorSpec(f"{p}.self_attn.q_norm.weight", (hd,), "bf16", "norm"),
                TensorSpec(f"{p}.self_attn.k_norm.weight", (hd,), "bf16", "norm")]
    if is_moe_layer(cfg, i):
        n_e, inter = int(cfg["num_experts"]), int(cfg["moe_intermediate_size"])
        out.append(TensorSpec(f"{p}.mlp.gate.weight", (n_e, h), "bf16", "router"))
        for e in range(n_e):
            q = f"{p}.mlp.experts.{e}"
            out += _linear(f"{q}.gate_proj", inter, h, "expert", fmt)
            out += _linear(f"{q}.up_proj", inter, h, "expert", fmt)
            out += _linear(f"{q}.down_proj", h, inter, "expert", fmt)
        shared = int(cfg.get("shared_expert_intermediate_size") or 0)
        if shared:
            for proj, o, n in (("gate_proj", shared, h), ("up_proj", shared, h), ("down_proj", h, shared)):
                out += _linear(f"{p}.mlp.shared_expert.{proj}", o, n, "mlp", fmt)
            out.append(TensorSpec(f"{p}.mlp.shared_expert_gate.weight", (1, h), "bf16", "router"))
    else:
        inter = int(cfg["intermediate_size"])
        for proj, o, n in (("gate_proj", inter, h), ("up_proj", inter, h), ("down_proj", h, inter)):
            out += _linear(f"{p}.mlp.{proj}", o, n, "mlp", fmt)
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
    h, vocab = int(cfg["hidden_size"]), int(cfg["vocab_size"])
    out = [TensorSpec("model.embed_tokens.weight", (vocab, h), "bf16", "embed")]
    for i in range(int(cfg["num_hidden_layers"])):
        out += layer_tensors(cfg, i, fmt)
    out.append(TensorSpec("model.norm.weight", (h,), "bf16", "norm"))
    if not cfg.get("tie_word_embeddings"):
        out.append(TensorSpec("lm_head.weight", (vocab, h), "bf16", "head"))
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
