"""A Hugging Face config.json -> ModelSpec, the way SGLang 0.5.15.post1 reads it, or a refusal.

The gate of issue 9: a config the planner does not model (an architecture, a field value, a quantization
method) raises VramkitError(Exit.UNSUPPORTED_MODEL) naming it; it never becomes a number. Missing fields
are filled as transformers' config classes fill them (their defaults are noted where used).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vramkit.core.model.spec import MlaSpec, ModelSpec, MoeSpec, Quantization, SlidingWindow
from vramkit.errors import Exit, VramkitError

# architecture -> family; what `vramkit plan --list` and docs/models.md show
FAMILIES: dict[str, str] = {
    "LlamaForCausalLM": "dense", "MistralForCausalLM": "dense", "Qwen2ForCausalLM": "dense",
    "Qwen3ForCausalLM": "dense", "Gemma2ForCausalLM": "sliding-window", "Gemma3ForCausalLM": "sliding-window",
    "Qwen2MoeForCausalLM": "moe", "Qwen3MoeForCausalLM": "moe", "MixtralForCausalLM": "moe",
    "OlmoeForCausalLM": "moe", "DeepseekV2ForCausalLM": "moe+mla", "DeepseekV3ForCausalLM": "moe+mla",
    "GptOssForCausalLM": "moe+sliding-window",
}
QUANT_METHODS = ("gptq (int4/int8, marlin)", "awq (int4, marlin)", "fp8 (block or per-tensor)",
                 "compressed-tensors fp8", "mxfp4 (gpt-oss experts)")
# transformers' defaults for tie_word_embeddings where the config class overrides PretrainedConfig's True
TIE_DEFAULT = {"Gemma2ForCausalLM": True, "Gemma3ForCausalLM": True, "Qwen3MoeForCausalLM": False,
               "Qwen2MoeForCausalLM": False, "MixtralForCausalLM": False, "GptOssForCausalLM": False,
               "DeepseekV2ForCausalLM": False, "DeepseekV3ForCausalLM": False, "OlmoeForCausalLM": False,
               "Qwen3ForCausalLM": False, "Qwen2ForCausalLM": False, "LlamaForCausalLM": False,
               "MistralForCausalLM": False}
MULTIMODAL_HINT = {"Gemma3ForConditionalGeneration": "Gemma3ForCausalLM",
                   "Mistral3ForConditionalGeneration": "MistralForCausalLM"}


def _refuse(what: str, todo: str = "") -> VramkitError:
    return VramkitError(what, todo or "see `vramkit plan --list` for what the planner models",
                        Exit.UNSUPPORTED_MODEL)


CONFIG_MAX_BYTES = 1 << 20     # the largest published configs we plan are under 20 KB


def read_model_config(config_dir: Path, name: str = "", hf_id: str = "", note: str = "") -> ModelSpec:
    path = Path(config_dir) / "config.json"
    try:
        size = path.stat().st_size
        if size > CONFIG_MAX_BYTES:      # a model's config is a few KB; 10 MB ones pinned the dashboard's core
            raise VramkitError(f"{path} is {size:,} bytes; a model's config.json is a few KB (the limit is "
                               f"{CONFIG_MAX_BYTES:,})", "give the model's published config.json", Exit.BAD_FILE)
        cfg = json.loads(path.read_text())
    except OSError as e:
        raise VramkitError(f"cannot read {path}: {e.strerror}",
                           "give a folder that holds the model's config.json", Exit.BAD_FILE) from None
    except ValueError as e:
        raise VramkitError(f"{path} is not valid JSON ({e})", "fix or re-download config.json", Exit.BAD_FILE) from None
    if not isinstance(cfg, dict):
        raise VramkitError(f"{path} is not a JSON object", "fix or re-download config.json", Exit.BAD_FILE)
    return parse_config(cfg, name=name or Path(config_dir).name, hf_id=hf_id, config_dir=Path(config_dir),
                        note=note, where=str(path))


def parse_config(cfg: dict, *, name: str, hf_id: str = "", config_dir: Path = Path("."), note: str = "",
                 where: str = "config.json") -> ModelSpec:
    _check_shapes(cfg, where)
    arch = (cfg.get("architectures") or [None])[0]
    if arch is None:
        raise VramkitError(f"{where}: field 'architectures' is missing; SGLang picks the model code by it",
                           "use the model's published config.json", Exit.BAD_FILE)
    if arch in MULTIMODAL_HINT:
        raise _refuse(f"{where}: {arch} carries a vision tower the planner does not model (its text model "
                      f"is under text_config)", f"plan the text-only {MULTIMODAL_HINT[arch]} checkpoint, or "
                      "see docs/models.md")
    if arch not in FAMILIES:
        raise _refuse(f"{where}: architecture {arch!r} is not modelled by the planner")
    nested = cfg.get("text_config")
    text: dict[str, Any] = nested if isinstance(nested, dict) else {}
    c = {**cfg, **text}            # a nested text_config wins, as SGLang's get_hf_text_config takes it
    filled: list[str] = []

    def need(key: str, *alts: str):
        for k in (key, *alts):
            if c.get(k) is not None:
                return c[k]
        raise VramkitError(f"{where}: field {key!r} is missing; SGLang's model code reads it",
                           "use the model's published config.json", Exit.BAD_FILE)

    def opt(key: str, default, why: str = ""):
        if c.get(key) is None:
            if why:
                filled.append(f"{key} = {default} ({why})")
            return default
        return c[key]

    try:
        hidden = int(need("hidden_size"))
        heads = int(need("num_attention_heads"))
        layers = int(need("num_hidden_layers"))
        kv_heads = int(opt("num_key_value_heads", heads, "transformers: defaults to the attention heads"))
        head_dim = int(c.get("head_dim") or hidden // heads)
        checkpoint_dtype = str(c.get("torch_dtype") or c.get("dtype") or "")
        q_cfg = c.get("quantization_config") or cfg.get("quantization_config") or {}
        dtype = _load_dtype(arch, checkpoint_dtype, q_cfg, filled)
        tie = bool(opt("tie_word_embeddings", TIE_DEFAULT[arch], "transformers' default for " + arch))
        if arch == "Gemma2ForCausalLM":
            tie = True             # gemma2.py: the logits always use embed_tokens (lm_head.weight is skipped)
        quant = _quantization(c.get("quantization_config") or cfg.get("quantization_config"), arch, where)
        spec = dict(
            name=name, hf_id=hf_id, config_dir=config_dir, architecture=arch, hidden_size=hidden,
            intermediate_size=int(c.get("intermediate_size") or 0), num_layers=layers, num_heads=heads,
            num_kv_heads=kv_heads, head_dim=head_dim, vocab_size=int(need("vocab_size")),
            max_position_embeddings=int(opt("max_position_embeddings", 2048, "transformers' default")),
            rope_theta=float(c.get("rope_theta") or (c.get("rope_parameters") or {}).get("rope_theta") or 10000.0),
            tie_word_embeddings=tie, dtype=dtype, checkpoint_dtype=checkpoint_dtype,
            attention_bias=_attention_bias(arch, c),
            rope_scaling=c.get("rope_scaling"), quantization=quant, note=note, family=FAMILIES[arch],
            qk_norm=arch in ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "Gemma3ForCausalLM", "OlmoeForCausalLM"),
            norms_per_layer=4 if arch in ("Gemma2ForCausalLM", "Gemma3ForCausalLM") else 2,
        )
        spec.update(_family_fields(arch, c, layers, where))
        _check_sizes(spec, where)
    except KeyError as e:
        raise VramkitError(f"{where}: field {e} is missing; SGLang's model code reads it",
                           "use the model's published config.json", Exit.BAD_FILE) from None
    except (TypeError, ValueError, AttributeError, ZeroDivisionError, OverflowError) as e:
        raise VramkitError(f"{where}: a field has the wrong type or value ({e})",
                           "use the model's published config.json", Exit.BAD_FILE) from None
    if not spec["intermediate_size"] and spec.get("moe") is None:
        raise VramkitError(f"{where}: field 'intermediate_size' is missing", "use the model's published config.json",
                           Exit.BAD_FILE)
    return ModelSpec(**spec, notes=tuple(filled))


# a field that must be a JSON object when present (issue 20 item 7: a list or a string here was a traceback)
_OBJECT_FIELDS = ("quantization_config", "rope_scaling", "rope_parameters", "text_config")
_COUNT_FIELDS = ("hidden_size", "num_attention_heads", "num_hidden_layers", "num_key_value_heads", "head_dim",
                 "vocab_size", "intermediate_size", "max_position_embeddings", "num_local_experts", "num_experts",
                 "num_experts_per_tok", "moe_intermediate_size", "n_routed_experts", "sliding_window")


def _check_shapes(cfg: dict, where: str) -> None:
    """The config's structure, before any field is read: a malformed file is one line, never a traceback."""
    archs = cfg.get("architectures")
    if archs is not None and not (isinstance(archs, list) and all(isinstance(a, str) for a in archs)):
        raise VramkitError(f"{where}: field 'architectures' must be a list of names, e.g. [\"LlamaForCausalLM\"]",
                           "use the model's published config.json", Exit.BAD_FILE)
    nested = cfg.get("text_config")
    scopes: list[dict[str, Any]] = [cfg, nested] if isinstance(nested, dict) else [cfg]
    for scope in scopes:
        for key in _COUNT_FIELDS:
            if isinstance(scope.get(key), bool):
                raise VramkitError(f"{where}: field {key!r} is {str(scope[key]).lower()}; it must be a whole "
                                   "number > 0", "use the model's published config.json", Exit.BAD_FILE)
        for key in _OBJECT_FIELDS:
            if scope.get(key) is not None and not isinstance(scope[key], dict):
                raise VramkitError(f"{where}: field {key!r} must be a JSON object, not "
                                   f"{type(scope[key]).__name__}", "use the model's published config.json",
                                   Exit.BAD_FILE)


def _check_sizes(spec: dict, where: str) -> None:
    """Every size the planner multiplies by is a whole number > 0 (a negative or zero size planned as FITS,
    issue 20 item 7); JSON's true/false are not numbers here."""
    sizes = {k: spec[k] for k in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim",
                                  "vocab_size", "max_position_embeddings")}
    if spec.get("moe") is None:
        sizes["intermediate_size"] = spec["intermediate_size"]
    moe, mla, sliding = spec.get("moe"), spec.get("mla"), spec.get("sliding")
    if moe is not None:
        sizes |= {"experts": moe.num_experts, "experts_per_token": moe.top_k,
                  "expert intermediate_size": moe.expert_intermediate}
    if mla is not None:
        sizes |= {"kv_lora_rank": mla.kv_lora_rank, "qk_nope_head_dim": mla.qk_nope_head_dim,
                  "qk_rope_head_dim": mla.qk_rope_head_dim, "v_head_dim": mla.v_head_dim}
    if sliding is not None:
        sizes["sliding_window"] = sliding.window
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise VramkitError(f"{where}: {name} is {value!r}; it must be a whole number > 0",
                               "use the model's published config.json", Exit.BAD_FILE)
    if spec["intermediate_size"] < 0:
        raise VramkitError(f"{where}: intermediate_size is {spec['intermediate_size']}; it must be >= 0",
                           "use the model's published config.json", Exit.BAD_FILE)


def _attention_bias(arch: str, c: dict) -> bool:
    """q/k/v biases: qwen2.py always (bias=True); qwen2_moe.py `getattr(config, "qkv_bias", True)`; the rest
    read attention_bias (transformers' default False); gpt-oss sets its own below."""
    if arch == "Qwen2ForCausalLM":
        return True
    if arch == "Qwen2MoeForCausalLM":
        return bool(c.get("qkv_bias", True))
    return bool(c.get("attention_bias", False))


def _load_dtype(arch: str, checkpoint: str, q_cfg: dict, filled: list[str]) -> str:
    """ModelConfig._get_and_verify_dtype with --dtype auto: 16-bit stays, float32 (or none) is served as
    float16 (Gemma: bfloat16); gpt-oss with mxfp4 is forced to bfloat16 (arg_groups/overrides.py)."""
    if arch == "GptOssForCausalLM" and str(q_cfg.get("quant_method", "")).lower() == "mxfp4":
        return "bfloat16"
    if checkpoint in ("float16", "bfloat16"):
        return checkpoint
    if checkpoint not in ("", "float32"):
        raise _refuse(f"checkpoint dtype {checkpoint!r} is not modelled")
    served = "bfloat16" if arch.startswith("Gemma") else "float16"
    filled.append(f"dtype {checkpoint or 'unset (float32)'} is served as {served} (SGLang --dtype auto)")
    return served


def _quantization(q: dict | None, arch: str, where: str) -> Quantization | None:
    if not q:
        return None
    method = str(q.get("quant_method", "")).lower()
    ignored = tuple(q.get("modules_to_not_convert") or q.get("ignored_layers") or q.get("ignore") or ())
    if method in ("gptq", "awq"):
        bits = int(q.get("bits", q.get("w_bit", 4)))
        group = int(q.get("group_size", q.get("q_group_size", 128)))
        if bits not in ((4, 8) if method == "gptq" else (4,)):
            raise _refuse(f"{where}: {method} with {bits}-bit weights is not modelled (SGLang's marlin path: "
                          f"{'4 or 8' if method == 'gptq' else '4'} bits)")
        if method == "awq" and not q.get("zero_point", True):
            raise _refuse(f"{where}: awq without zero points is not modelled")
        return Quantization(method=method, bits=bits, group_size=group, desc_act=bool(q.get("desc_act", False)),
                            sym=bool(q.get("sym", True)), ignored=ignored)
    if method == "fp8":
        block = q.get("weight_block_size")
        return Quantization(method="fp8", bits=8, group_size=0, weight_block=tuple(block) if block else None,
                            fp8_scheme=str(q.get("activation_scheme", "dynamic")), ignored=ignored)
    if method == "compressed-tensors":
        groups = list((q.get("config_groups") or {}).values())
        w = groups[0].get("weights") if len(groups) == 1 and isinstance(groups[0], dict) else None
        if w and w.get("type") == "float" and int(w.get("num_bits", 0)) == 8:
            strategy = w.get("strategy")
            block = tuple(w["block_structure"]) if strategy == "block" and w.get("block_structure") else None
            if strategy not in ("tensor", "channel", "block"):
                raise _refuse(f"{where}: compressed-tensors fp8 with strategy {strategy!r} is not modelled")
            return Quantization(method="fp8", bits=8, group_size=0, weight_block=block,
                                fp8_scheme="compressed-tensors", ignored=ignored)
        raise _refuse(f"{where}: this compressed-tensors scheme is not modelled (only fp8 weights are)")
    if method == "mxfp4":
        if arch != "GptOssForCausalLM":
            raise _refuse(f"{where}: mxfp4 is modelled for gpt-oss only (its experts), not {arch}")
        return Quantization(method="mxfp4", bits=4, group_size=32, ignored=ignored)
    raise _refuse(f"{where}: quantization method {method or '(none given)'!r} is not modelled",
                  "models: " + "; ".join(QUANT_METHODS))


def _family_fields(arch: str, c: dict, layers: int, where: str) -> dict:
    out: dict = {}
    if arch in ("Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM"):
        # qwen2_moe.py / qwen3_moe.py build EVERY layer sparse ("all layers are sparse"): a config that
        # asks for dense layers is not what SGLang serves
        if int(c.get("decoder_sparse_step", 1)) != 1 or c.get("mlp_only_layers"):
            raise _refuse(f"{where}: decoder_sparse_step={c.get('decoder_sparse_step')} / mlp_only_layers="
                          f"{c.get('mlp_only_layers')}: SGLang 0.5.15.post1 builds every {arch} layer as MoE")
        shared = int(c.get("shared_expert_intermediate_size") or 0)
        out["moe"] = MoeSpec(num_experts=int(c["num_experts"]), top_k=int(c["num_experts_per_tok"]),
                             expert_intermediate=int(c["moe_intermediate_size"]), moe_layers=(True,) * layers,
                             shared_intermediate=shared, shared_gate=shared > 0)
    elif arch in ("MixtralForCausalLM", "OlmoeForCausalLM"):
        n = int(c.get("num_local_experts") or c.get("num_experts") or 0)
        inter = int(c["intermediate_size"])
        out["moe"] = MoeSpec(num_experts=n, top_k=int(c["num_experts_per_tok"]), expert_intermediate=inter,
                             moe_layers=(True,) * layers)
    elif arch in ("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM"):
        first_dense = int(c.get("first_k_dense_replace", 0))
        freq = int(c.get("moe_layer_freq", 1))
        n = int(c["n_routed_experts"])
        moe_layers = tuple(i >= first_dense and i % freq == 0 for i in range(layers))
        shared = int(c.get("n_shared_experts") or 0) * int(c["moe_intermediate_size"])
        if arch == "DeepseekV3ForCausalLM" and n in (256, 384) and int(c.get("n_shared_experts") or 0) == 1:
            raise _refuse(f"{where}: DeepSeek-V3-sized models fuse the shared expert into the MoE kernel; "
                          "not modelled (and far beyond a 16-24 GB card)")
        out["moe"] = MoeSpec(num_experts=n, top_k=int(c["num_experts_per_tok"]),
                             expert_intermediate=int(c["moe_intermediate_size"]), moe_layers=moe_layers,
                             shared_intermediate=shared)
        out["mla"] = MlaSpec(q_lora_rank=c.get("q_lora_rank"), kv_lora_rank=int(c["kv_lora_rank"]),
                             qk_nope_head_dim=int(c["qk_nope_head_dim"]), qk_rope_head_dim=int(c["qk_rope_head_dim"]),
                             v_head_dim=int(c["v_head_dim"]))
    elif arch == "GptOssForCausalLM":
        types = c.get("layer_types") or []
        if len(types) != layers:
            raise VramkitError(f"{where}: layer_types must list {layers} layers", "use the published config.json",
                               Exit.BAD_FILE)
        out["moe"] = MoeSpec(num_experts=int(c["num_local_experts"]),
                             top_k=int(c.get("num_experts_per_tok") or c["experts_per_token"]),
                             expert_intermediate=int(c["intermediate_size"]), moe_layers=(True,) * layers,
                             router_bias=True, expert_bias=True)
        out["sliding"] = SlidingWindow(window=int(c["sliding_window"]), hybrid_pool=True,
                                       swa_layers=tuple(t == "sliding_attention" for t in types))
        out["attention_bias"] = True
        out["o_bias"] = True
        out["attention_sinks"] = True
    elif arch in ("Gemma2ForCausalLM", "Gemma3ForCausalLM"):
        window = int(c.get("sliding_window") or 4096)
        if arch == "Gemma2ForCausalLM":      # every other layer slides (gemma2.py: layer_id % 2 == 0)
            swa = tuple(i % 2 == 0 for i in range(layers))
        else:                                # gemma3: sliding_window_pattern (5 local : 1 global by default)
            pattern = int(c.get("sliding_window_pattern") or 6)
            swa = tuple((i + 1) % pattern != 0 for i in range(layers))
        # arg_groups/overrides.py: "Disable hybrid SWA memory for Gemma2ForCausalLM as it is not yet
        # supported": one full pool for every layer
        # gemma3_causal.py: sliding layers take rope_local_base_freq (default 10000), the others rope_theta
        local = float(c.get("rope_local_base_freq") or 10000.0) if arch == "Gemma3ForCausalLM" else None
        out["sliding"] = SlidingWindow(window=window, swa_layers=swa, hybrid_pool=False, local_rope_theta=local)
    return out
