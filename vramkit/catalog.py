"""The one source of truth for models, GPUs, presets and pinned versions: config/*.toml and each
model's own config.json. Everything else (CLI, renderer, compose files, tests, README tables) reads
them through here. Unknown keys are refused, so a typo cannot silently become a default.
"""
from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from vramkit.errors import Exit, VramkitError

CONFIG_DIR = Path(__file__).resolve().parent.parent / "config"

DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}


@dataclass(frozen=True)
class Quantization:
    method: str            # "gptq", "awq", ...
    bits: int
    group_size: int
    desc_act: bool = False
    sym: bool = True


@dataclass(frozen=True)
class ModelSpec:
    """A model's shape, read from its config.json (the numbers SGLang's ModelConfig reads)."""

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
    dtype: str                      # checkpoint dtype of the unquantized tensors
    attention_bias: bool            # Qwen2 has q/k/v biases
    rope_scaling: dict | None
    quantization: Quantization | None
    note: str = ""

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]


@dataclass(frozen=True)
class GpuSpec:
    name: str
    label: str
    memory_total_bytes: int
    bandwidth_bytes_s: float
    pcie_gen: int
    pcie_lanes: int
    nvml_names: tuple[str, ...] = ()

    @property
    def pcie_bytes_s(self) -> float:
        """One direction, after line encoding (gen3+ 128b/130b): the copy ceiling."""
        per_lane_gbs = {3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}[self.pcie_gen]
        return per_lane_gbs * 1e9 * self.pcie_lanes


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    context: int
    concurrency: int = 1
    kv_dtype: str = "auto"
    mem_fraction: float | None = None
    chunked_prefill: int | None = None
    cuda_graph_max_bs: int | None = None
    max_running: int | None = None
    hicache_gib: float = 0.0
    cpu_offload_gib: int | str = 0       # int GiB, or "auto"
    model: str = ""
    kt_method: str = ""                  # MoE experts beyond the GPU's share computed on the CPU (issue 12)
    kt_num_gpu_experts: int | str = "auto"
    knobs: dict = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Versions:
    sglang_pip: str
    sglang_image: str


def _load_toml(name: str) -> dict:
    path = CONFIG_DIR / name
    try:
        return tomllib.loads(path.read_text())
    except OSError as e:
        raise VramkitError(f"cannot read {path}: {e.strerror}", "restore it from git", Exit.BAD_FILE) from None
    except tomllib.TOMLDecodeError as e:
        raise VramkitError(f"{path} is not valid TOML: {e}", "fix the file", Exit.BAD_FILE) from None


def read_model_config(config_dir: Path, name: str = "", hf_id: str = "", note: str = "") -> ModelSpec:
    """Parse a Hugging Face config.json into a ModelSpec (any folder, not only catalogued ones)."""
    path = Path(config_dir) / "config.json"
    try:
        cfg = json.loads(path.read_text())
    except OSError as e:
        raise VramkitError(f"cannot read {path}: {e.strerror}",
                           "give a folder that holds the model's config.json", Exit.BAD_FILE) from None
    except ValueError as e:
        raise VramkitError(f"{path} is not valid JSON ({e})", "fix or re-download config.json", Exit.BAD_FILE) from None
    try:
        heads = int(cfg["num_attention_heads"])
        hidden = int(cfg["hidden_size"])
        q = cfg.get("quantization_config")
        quant = None
        if q:
            quant = Quantization(method=str(q.get("quant_method", "")).lower(), bits=int(q.get("bits", 4)),
                                 group_size=int(q.get("group_size", 128)), desc_act=bool(q.get("desc_act", False)),
                                 sym=bool(q.get("sym", True)))
        arch = (cfg.get("architectures") or ["?"])[0]
        return ModelSpec(
            name=name or Path(config_dir).name, hf_id=hf_id, config_dir=Path(config_dir), architecture=arch,
            hidden_size=hidden, intermediate_size=int(cfg["intermediate_size"]),
            num_layers=int(cfg["num_hidden_layers"]), num_heads=heads,
            num_kv_heads=int(cfg.get("num_key_value_heads", heads)),
            head_dim=int(cfg.get("head_dim") or hidden // heads), vocab_size=int(cfg["vocab_size"]),
            max_position_embeddings=int(cfg.get("max_position_embeddings", 4096)),
            rope_theta=float(cfg.get("rope_theta", 10000.0)),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            dtype=str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"),
            attention_bias=bool(cfg.get("attention_bias", arch.startswith("Qwen2"))),
            rope_scaling=cfg.get("rope_scaling"), quantization=quant, note=note,
        )
    except (KeyError, TypeError, ValueError) as e:
        raise VramkitError(f"{path} lacks a field the planner needs ({e})",
                           "use a decoder-only transformer config.json", Exit.BAD_FILE) from None


@cache
def models() -> dict[str, ModelSpec]:
    out = {}
    for name, entry in _load_toml("models.toml")["models"].items():
        _refuse_unknown(entry, {"hf_id", "config_dir", "note"}, f"models.toml [{name}]")
        out[name] = read_model_config(CONFIG_DIR / entry["config_dir"], name, entry["hf_id"], entry.get("note", ""))
    return out


@cache
def gpus() -> dict[str, GpuSpec]:
    out = {}
    for name, e in _load_toml("gpus.toml")["gpus"].items():
        _refuse_unknown(e, {"label", "memory_total_mib", "bandwidth_gbs", "pcie_gen", "pcie_lanes", "nvml_names"},
                        f"gpus.toml [{name}]")
        out[name] = GpuSpec(name=name, label=e["label"], memory_total_bytes=int(e["memory_total_mib"]) << 20,
                            bandwidth_bytes_s=float(e["bandwidth_gbs"]) * 1e9, pcie_gen=int(e["pcie_gen"]),
                            pcie_lanes=int(e["pcie_lanes"]), nvml_names=tuple(e.get("nvml_names", ())))
    return out


PRESET_KEYS = {"description", "model", "context", "concurrency", "kv_dtype", "mem_fraction", "chunked_prefill",
               "cuda_graph_max_bs", "max_running", "hicache_gib", "cpu_offload_gib",
               "kt_method", "kt_num_gpu_experts"}   # kt_*: the hybrid MoE mode (vramkit/launch/hybrid.py)


@cache
def presets() -> dict[str, Preset]:
    out = {}
    for name, e in _load_toml("presets.toml")["presets"].items():
        _refuse_unknown(e, PRESET_KEYS, f"presets.toml [{name}]")
        knobs = {k: v for k, v in e.items() if k not in ("description", "model")}
        out[name] = Preset(name=name, knobs=knobs, **e)
    return out


@cache
def versions() -> Versions:
    v = _load_toml("versions.toml")
    return Versions(sglang_pip=v["sglang_pip"], sglang_image=v["sglang_image"])


@cache
def engine_constants() -> dict:
    """Measured constants of SGLang's runtime (config/engine.toml), with their provenance there."""
    return _load_toml("engine.toml")


def _refuse_unknown(entry: dict, allowed: set[str], where: str) -> None:
    unknown = set(entry) - allowed
    if unknown:
        raise VramkitError(f"{where}: unknown key(s) {sorted(unknown)}",
                           f"use only {sorted(allowed)}", Exit.BAD_FILE)


def _pick(table: dict, name: str, kind: str):
    if name in table:
        return table[name]
    raise VramkitError(f"unknown {kind} '{name}'", f"use one of: {', '.join(sorted(table))}", Exit.BAD_INPUT)


def model(name_or_dir: str) -> ModelSpec:
    """A catalogued name, or a folder holding a config.json."""
    if name_or_dir in models():
        return models()[name_or_dir]
    p = Path(name_or_dir)
    if p.is_dir() or p.name == "config.json":
        return read_model_config(p if p.is_dir() else p.parent)
    return _pick(models(), name_or_dir, "model")


def gpu(name: str) -> GpuSpec:
    return _pick(gpus(), name, "GPU")


def preset(name: str) -> Preset:
    return _pick(presets(), name, "preset")


def gpu_by_nvml_name(nvml_name: str) -> GpuSpec | None:
    for g in gpus().values():
        if nvml_name in g.nvml_names:
            return g
    return None
