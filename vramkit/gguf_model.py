"""A GGUF file given as --model: read with the `gguf` library; planned where the kit has measured SGLang serving
it, refused with the reason (exit 21) where it has not.

What the pinned SGLang does with one (SGLang 0.5.15.post1's source; run on the GPU host for dense Qwen2):
- server_args.py: a path ending .gguf (or starting b"GGUF") sets --load-format gguf and quantization gguf;
- utils/hf_transformers/config.py: the model's config is asked of transformers (5.12.1, pinned with it) with
  gguf_file=..., which converts the file's metadata only for the architectures in its GGUF_CONFIG_MAPPING
  (transformers/integrations/ggml.py; `SGLANG_GGUF_ARCHITECTURES` below); any other is an error at start.
  The file gives no dtype, so SGLang serves it in float16 (ModelConfig: float32 -> float16);
- model_loader/loader.py GGUFModelLoader + layers/quantization/gguf.py: each matrix stays in its ggml type
  (Q4_K, Q6_K, Q8_0, ...) on the GPU and is multiplied by sgl-kernel's ggml kernels (CUDA only);
  core/model/arch.py lays the tensors out (`Quantization(method="gguf")`).
Planned: the architectures and ggml types in `PLANNED` (measured on the GPU host: benchmarks/gpu/run_gguf.sh,
benchmarks/results/gpu/gguf-qwen2.json). Every other GGUF SGLang loads is refused with what was read and why.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

from vramkit.core.model.spec import ModelSpec, Quantization
from vramkit.errors import Exit, VramkitError
from vramkit.units import bytes2human

# transformers 5.12.1's GGUF_CONFIG_MAPPING (the decoder models among its keys) and the llama.cpp spellings it
# renames (modeling_gguf_pytorch_utils.py: qwen2moe, qwen3moe, gpt-oss, minimax-m2); tests/integration checks
# this against the pinned transformers in .venv-sglang
SGLANG_GGUF_ARCHITECTURES = frozenset({
    "llama", "mistral", "qwen2", "qwen2_moe", "qwen2moe", "gpt_oss", "gpt-oss", "lfm2", "qwen3", "qwen3_moe",
    "qwen3moe", "falcon", "phi3", "bloom", "stablelm", "gpt2", "starcoder2", "mamba", "nemotron", "gemma2",
    "gemma3", "gemma4", "deci", "minimax_m2", "minimax-m2",
})


# what the kit plans: the architecture (llama.cpp's name) -> SGLang's, and the ggml types of the matrices
# (1-D tensors: F32, loaded into 16-bit parameters). Measured on the GPU host (benchmarks/results/gpu/
# gguf-qwen2.json): Qwen2.5-Coder-7B's shape in Q4_K_M (Q4_K + Q6_K), weights 4.61 GiB logged vs 4.605 planned,
# KV 142,976 tokens vs 143,091. Q8_0 (same code path, sizes checked against SGLang's own model built on the CPU)
# was not served on the GPU in that session: refused until it is.
PLANNED = {"qwen2": "Qwen2ForCausalLM"}
PLANNED_MATRIX_TYPES = frozenset({"Q4_K", "Q6_K"})


@dataclass(frozen=True)
class GgufTensor:
    name: str
    type: str
    shape: tuple[int, ...]                      # llama.cpp's ne order: the row (input) dimension first
    nbytes: int


@dataclass(frozen=True)
class GgufInfo:
    path: Path
    architecture: str
    name: str
    layers: int | None
    tensors: int
    tensor_bytes: int
    types: tuple[tuple[str, int], ...]          # (ggml type, tensors of it), most first
    metadata: tuple[tuple[str, object], ...] = ()   # the architecture's scalar fields ("block_count", ...)
    table: tuple[GgufTensor, ...] = ()


def is_gguf(path: Path) -> bool:
    """SGLang's test (check_gguf_file): a file named .gguf, or starting with the magic b"GGUF"."""
    if not path.is_file():
        return False
    if path.suffix == ".gguf":
        return True
    with path.open("rb") as f:
        return f.read(4) == b"GGUF"


def _field_text(reader, key: str) -> str | None:
    field = reader.fields.get(key)
    if field is None:
        return None
    value = field.contents()
    return value.decode() if isinstance(value, bytes) else str(value)


def read(path: Path) -> GgufInfo:
    try:
        import gguf  # noqa: PLC0415 - only for a GGUF file
    except ImportError:
        raise VramkitError(f"{path} is a GGUF file and reading one needs the gguf package",
                           "pip install gguf (or give the model's safetensors folder or Hub id)",
                           Exit.UNSUPPORTED_MODEL) from None
    try:
        reader = gguf.GGUFReader(str(path))
    except (ValueError, OSError, IndexError, KeyError) as e:     # a cut file runs the reader off its end
        raise VramkitError(f"{path} is not a readable GGUF file ({type(e).__name__}: {e})",
                           "check the file (a partial download?)", Exit.BAD_FILE) from None
    arch = _field_text(reader, "general.architecture") or "(none given)"
    layers = _field_text(reader, f"{arch}.block_count")
    types = Counter(t.tensor_type.name for t in reader.tensors)
    meta: list[tuple[str, object]] = []
    for key, field in reader.fields.items():
        if key.startswith(arch + ".") and len(field.types) == 1:      # a scalar (not an array) of this architecture
            value = field.contents()
            if isinstance(value, (int, float)):
                meta.append((key[len(arch) + 1:], value))
    table = tuple(GgufTensor(t.name, t.tensor_type.name, tuple(int(d) for d in t.shape), int(t.n_bytes))
                  for t in reader.tensors)
    return GgufInfo(path=path, architecture=arch, name=_field_text(reader, "general.name") or path.stem,
                    layers=int(layers) if layers and layers.isdigit() else None, tensors=len(reader.tensors),
                    tensor_bytes=sum(int(t.n_bytes) for t in reader.tensors), types=tuple(types.most_common()),
                    metadata=tuple(meta), table=table)


def _what(info: GgufInfo) -> str:
    return (f"{info.path}: GGUF of {info.name} ({info.architecture}, {info.layers or '?'} layers, {info.tensors} "
            f"tensors, {bytes2human(info.tensor_bytes, 'GiB' if info.tensor_bytes >= 1 << 30 else 'MiB')}: "
            + ", ".join(f"{n} {t}" for t, n in info.types[:4]) + (", ..." if len(info.types) > 4 else "") + ")")


def model_spec(info: GgufInfo) -> ModelSpec:
    """The ModelSpec SGLang builds from this file (transformers' GGUF config mapping, float16, tied when the file
    has no output.weight), its matrices priced in their ggml types; or the refusal, with the reason."""
    if info.architecture not in PLANNED:
        raise refusal(info)
    bad = sorted({t.type for t in info.table if len(t.shape) > 1 and t.type not in PLANNED_MATRIX_TYPES}
                 | {t.type for t in info.table if len(t.shape) == 1 and t.type != "F32"})
    if bad:
        raise refusal(info, f"its {', '.join(bad)} tensors are of ggml types the kit has not measured SGLang "
                            f"loading (planned: {', '.join(sorted(PLANNED_MATRIX_TYPES))} matrices, F32 vectors)")
    from vramkit.hf_config import parse_config  # noqa: PLC0415 - hf_config imports catalog's neighbours

    meta = dict(info.metadata)
    names = {t.name for t in info.table}
    where = f"{info.path} (GGUF metadata)"
    vocab = meta.get("vocab_size") or next((t.shape[1] for t in info.table if t.name == "token_embd.weight"), None)
    # transformers/integrations/ggml.py GGUF_CONFIG_MAPPING["qwen2"]: the HF field each GGUF key becomes
    cfg = {"architectures": [PLANNED[info.architecture]], "model_type": info.architecture,
           "hidden_size": meta.get("embedding_length"), "intermediate_size": meta.get("feed_forward_length"),
           "num_hidden_layers": meta.get("block_count"), "num_attention_heads": meta.get("attention.head_count"),
           "num_key_value_heads": meta.get("attention.head_count_kv"), "vocab_size": vocab,
           "max_position_embeddings": meta.get("context_length"), "rope_theta": meta.get("rope.freq_base"),
           "tie_word_embeddings": "output.weight" not in names}
    spec = parse_config({k: v for k, v in cfg.items() if v is not None}, name=info.path.stem, where=where)
    if spec.head_dim % 2 or "token_embd.weight" not in names:
        raise refusal(info, "it lacks token_embd.weight or has an odd head size")
    ggml = []
    for t in info.table:
        if len(t.shape) > 1 and t.name.endswith(".weight"):
            rows = 1
            for d in t.shape[1:]:
                rows *= d
            ggml.append((t.name[:-len(".weight")], t.type, t.nbytes // rows))
    expected = {"token_embd"} | ({"output"} if not spec.tie_word_embeddings else set()) | {
        f"blk.{i}.{n}" for i in range(spec.num_layers)
        for n in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")}
    missing = sorted(expected - {n for n, _, _ in ggml})
    if missing:
        raise refusal(info, f"it lacks {len(missing)} of the matrices a {PLANNED[info.architecture]} of "
                            f"{spec.num_layers} layers has (first: {missing[0]}.weight)")
    note = (f"GGUF {info.path.name}: " + ", ".join(f"{n} {t}" for t, n in info.types[:4])
            + "; served in float16 (SGLang: a GGUF gives no dtype)")
    notes = tuple(n for n in spec.notes if not n.startswith("dtype "))
    return replace(spec, hf_id="", config_dir=info.path.resolve(), dtype="float16", checkpoint_dtype="",
                   quantization=Quantization(method="gguf", bits=0, group_size=0, ggml=tuple(ggml)),
                   note=note, notes=(*notes, note))


def refusal(info: GgufInfo, why: str = "") -> VramkitError:
    """Exit 21 with the reason: SGLang cannot load this architecture from GGUF, or it can and the kit has not
    measured it doing so (an architecture outside PLANNED, or `why`)."""
    what = _what(info)
    if info.architecture not in SGLANG_GGUF_ARCHITECTURES:
        return VramkitError(f"{what}: SGLang 0.5.15.post1 cannot load it: it asks transformers 5.12.1 for a GGUF's "
                            f"config, which converts no '{info.architecture}' GGUF",
                            "use the model's safetensors build (its Hugging Face id or folder)",
                            Exit.UNSUPPORTED_MODEL)
    planned = ", ".join(f"{a} ({PLANNED[a]})" for a in sorted(PLANNED))
    reason = why or (f"the kit plans GGUFs only where it has measured SGLang serving them ({planned}; "
                     f"{', '.join(sorted(PLANNED_MATRIX_TYPES))} matrices), not '{info.architecture}'")
    return VramkitError(f"{what}: SGLang 0.5.15.post1 serves it (--load-format gguf: each weight stays in its ggml "
                        f"type, multiplied by ggml kernels), but {reason}, so the planner cannot say what fits",
                        "plan the same model's safetensors build by its Hugging Face id (e.g. a GPTQ or AWQ int4 "
                        "repository: vramkit plan --model owner/name)", Exit.UNSUPPORTED_MODEL)
