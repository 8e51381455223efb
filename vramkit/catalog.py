"""The one source of truth for models, GPUs, presets and pinned versions: config/*.toml and each
model's own config.json. Everything else (CLI, renderer, compose files, tests, README tables) reads
them through here. Unknown keys are refused, so a typo cannot silently become a default.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from vramkit.core.model_spec import GpuSpec, ModelSpec, Quantization  # noqa: F401  (re-exported: the core owns them)
from vramkit.core.planner import Engine
from vramkit.errors import Exit, VramkitError
from vramkit.hf_config import read_model_config

CONFIG_DIR = Path(__file__).resolve().parent.parent / "config"

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
               "cuda_graph_max_bs", "max_running", "hicache_gib", "cpu_offload_gib"}


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


ENGINE_KEYS = {"cuda_context_mib", "driver_reserved_mib", "tp_comm_init_mib", "tp_comm_runtime_mib", "pre_kv_mib",
               "post_kv_misc_mib", "attention_backend_mib", "decode_graph_mib", "activation_factor",
               "runtime_margin_mib", "hicache_host_reserve_mib"}


@cache
def engine() -> Engine:
    """config/engine.toml as the core's Engine (bytes); unknown or missing keys are refused."""
    c = engine_constants()
    _refuse_unknown(c, ENGINE_KEYS, "engine.toml")
    missing = ENGINE_KEYS - set(c)
    if missing:
        raise VramkitError(f"engine.toml lacks {sorted(missing)}", "restore it from git", Exit.BAD_FILE)
    mib = 1 << 20
    return Engine(
        cuda_context=int(c["cuda_context_mib"] * mib), driver_reserved=int(c["driver_reserved_mib"] * mib),
        tp_comm_init=int(c["tp_comm_init_mib"] * mib), tp_comm_runtime=int(c["tp_comm_runtime_mib"] * mib),
        pre_kv=int(c["pre_kv_mib"] * mib), post_kv_misc=int(c["post_kv_misc_mib"] * mib),
        attention_backend=int(c["attention_backend_mib"] * mib), decode_graph=int(c["decode_graph_mib"] * mib),
        activation_factor=float(c["activation_factor"]), runtime_margin=int(c["runtime_margin_mib"] * mib),
        hicache_host_reserve=int(c["hicache_host_reserve_mib"] * mib),
    )


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
        # absolute: the path is SGLang's --model-path and the compose file's bind mount
        return read_model_config((p if p.is_dir() else p.parent).resolve())
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
