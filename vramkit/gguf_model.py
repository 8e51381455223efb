"""A GGUF file given as --model: read with the `gguf` library, and refused with the reason (exit 21).

What the pinned SGLang does with one (derived from SGLang 0.5.15.post1's source, not run on a GPU here):
- server_args.py: a path ending .gguf (or starting b"GGUF") sets --load-format gguf and quantization gguf;
- utils/hf_transformers/config.py: the model's config is asked of transformers (5.12.1, pinned with it) with
  gguf_file=..., which converts the file's metadata only for the architectures in its GGUF_CONFIG_MAPPING
  (transformers/integrations/ggml.py; `SGLANG_GGUF_ARCHITECTURES` below); any other is an error at start;
- model_loader/loader.py GGUFModelLoader + layers/quantization/gguf.py: each weight stays in its ggml type
  (Q4_K, Q6_K, Q8_0, ...) on the GPU and is dequantized per matmul by sgl-kernel's ggml kernels (CUDA only).
vramkit's planner models safetensors checkpoints (vramkit/hf_config.py): a GGUF's GPU-resident size per ggml
type, the dequantization workspaces and the output head's layout are not modelled, so a GGUF is refused with
what was read from it and the way to a plan (the same model's safetensors build by its Hub id).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

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


@dataclass(frozen=True)
class GgufInfo:
    path: Path
    architecture: str
    name: str
    layers: int | None
    tensors: int
    tensor_bytes: int
    types: tuple[tuple[str, int], ...]          # (ggml type, tensors of it), most first


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
    return GgufInfo(path=path, architecture=arch, name=_field_text(reader, "general.name") or path.stem,
                    layers=int(layers) if layers and layers.isdigit() else None, tensors=len(reader.tensors),
                    tensor_bytes=sum(int(t.n_bytes) for t in reader.tensors), types=tuple(types.most_common()))


def refusal(info: GgufInfo) -> VramkitError:
    """Exit 21 with the reason: SGLang cannot load this architecture from GGUF, or it can and the planner does
    not model GGUF weights."""
    what = (f"{info.path}: GGUF of {info.name} ({info.architecture}, {info.layers or '?'} layers, {info.tensors} "
            f"tensors, {bytes2human(info.tensor_bytes, 'GiB' if info.tensor_bytes >= 1 << 30 else 'MiB')}: "
            + ", ".join(f"{n} {t}" for t, n in info.types[:4]) + (", ..." if len(info.types) > 4 else "") + ")")
    if info.architecture not in SGLANG_GGUF_ARCHITECTURES:
        return VramkitError(f"{what}: SGLang 0.5.15.post1 cannot load it: it asks transformers 5.12.1 for a GGUF's "
                            f"config, which converts no '{info.architecture}' GGUF",
                            "use the model's safetensors build (its Hugging Face id or folder)",
                            Exit.UNSUPPORTED_MODEL)
    return VramkitError(f"{what}: SGLang 0.5.15.post1 serves it (--load-format gguf: each weight stays in its ggml "
                        "type, dequantized per matmul), but the planner models safetensors checkpoints, not the "
                        "GPU-resident size of ggml types, so it cannot say what fits",
                        "plan the same model's safetensors build by its Hugging Face id (e.g. a GPTQ or AWQ int4 "
                        "repository: vramkit plan --model owner/name)", Exit.UNSUPPORTED_MODEL)
