"""The one source of truth for models, GPUs, presets and pinned versions: config/*.toml and each
model's own config.json. Everything else (CLI, renderer, compose files, tests, README tables) reads
them through here. Unknown keys are refused, so a typo cannot silently become a default.
"""
from __future__ import annotations

import json
import sys
import tomllib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from vramkit.core import knobs as knob_decl
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
    sm_count: int | None = None     # streaming multiprocessors (marlin's workspace); None: not catalogued

    @property
    def pcie_bytes_s(self) -> float:
        """One direction, after line encoding (gen3+ 128b/130b): the copy ceiling."""
        per_lane_gbs = {3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}[self.pcie_gen]
        return per_lane_gbs * 1e9 * self.pcie_lanes


@dataclass(frozen=True)
class Preset:
    """A named set of knob values (config/presets.toml): only the keys the preset sets, each checked
    against its declaration (core/knobs.py) when the file is read. `Knobs(**preset.knobs)` is the raw request."""
    name: str
    description: str
    model: str = ""
    knobs: dict = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Versions:
    sglang_pip: str
    sglang_image: str
    torch_cpu: str              # the CPU torch wheel of .venv and .venv-sglang (make setup)


@dataclass(frozen=True)
class SglangFacts:
    """config/sglang.toml: how the kit runs SGLang."""
    port: int
    gpu_host_extra_args: tuple[str, ...]


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
    for name, entry in _tables("models.toml", "models").items():
        _refuse_unknown(entry, {"hf_id", "config_dir", "note"}, f"models.toml [{name}]")
        out[name] = read_model_config(CONFIG_DIR / entry["config_dir"], name, entry["hf_id"], entry.get("note", ""))
    return out


@cache
def gpus() -> dict[str, GpuSpec]:
    out = {}
    for name, e in _tables("gpus.toml", "gpus").items():
        _refuse_unknown(e, {"label", "memory_total_mib", "bandwidth_gbs", "pcie_gen", "pcie_lanes", "nvml_names",
                            "sm_count"}, f"gpus.toml [{name}]")
        try:
            out[name] = GpuSpec(name=name, label=str(e["label"]), memory_total_bytes=int(e["memory_total_mib"]) << 20,
                                bandwidth_bytes_s=float(e["bandwidth_gbs"]) * 1e9, pcie_gen=int(e["pcie_gen"]),
                                pcie_lanes=int(e["pcie_lanes"]), nvml_names=tuple(e.get("nvml_names", ())),
                                sm_count=int(e["sm_count"]))
        except KeyError as err:
            raise VramkitError(f"config/gpus.toml [gpus.{name}]: {err.args[0]} is missing", "add it (see the file's "
                               "header)", Exit.BAD_FILE) from None
        except (TypeError, ValueError) as err:
            raise VramkitError(f"config/gpus.toml [gpus.{name}]: a value is not a number ({err})", "fix it",
                               Exit.BAD_FILE) from None
        if out[name].pcie_gen not in (3, 4, 5, 6) or min(out[name].bandwidth_bytes_s, out[name].sm_count,
                                                           out[name].pcie_lanes, out[name].memory_total_bytes) <= 0:
            raise VramkitError(f"config/gpus.toml [gpus.{name}]: pcie_gen is not 3-6 or a size is not > 0", "fix it",
                               Exit.BAD_FILE)
    return out


PRESET_KEYS = {"description", "model"} | set(knob_decl.by_name())


@cache
def presets() -> dict[str, Preset]:
    out = {}
    for name, e in _tables("presets.toml", "presets").items():
        where = f"config/presets.toml [presets.{_toml_key(name)}]"
        e = dict(e)
        for key in ("description", "model"):
            if key in e and not isinstance(e[key], str):
                raise VramkitError(f"{where}: {key} = {e[key]!r} is not text", "quote it", Exit.BAD_FILE)
        description, model_name = e.pop("description", ""), e.pop("model", "")
        out[name] = Preset(name=name, description=description, model=model_name, knobs=preset_knobs(e, where))
    return out


def preset_knobs(entry: dict, where: str, cls: type = knob_decl.Knobs) -> dict:
    """A preset's knob values, each checked by its declaration; an old key (hicache_gib) is read with a
    warning. Anything else is one line naming the file and key, exit 65."""
    entry = dict(entry)
    for old, new in knob_decl.old_names(cls).items():
        if old in entry:
            if new in entry:
                raise VramkitError(f"{where}: both {old} and {new}", f"keep only {new}", Exit.BAD_FILE)
            print(f"vramkit: warning: {where}: {old} is now {new} (same value); rename it", file=sys.stderr)
            entry[new] = entry.pop(old)
    decl = knob_decl.by_name(cls)
    _refuse_unknown(entry, set(decl) | {"description", "model"}, where)
    out = {}
    for key, value in entry.items():
        spec = decl[key]
        try:
            out[key] = spec.parse(value, from_text=False)
        except ValueError as err:
            raise VramkitError(f"{where}: {key} = {value!r} {err}", f"give {key} {spec.range_text()}"
                               + (f", in {spec.unit}" if spec.unit else ""), Exit.BAD_FILE) from None
    return out


def _toml_key(name: str) -> str:
    return name if name.replace("_", "").replace("-", "").isalnum() and not name.isdigit() \
        and not name[0].isdigit() else f'"{name}"'


@cache
def versions() -> Versions:
    v = _load_toml("versions.toml")
    keys = ("sglang_pip", "sglang_image", "torch_cpu")
    _refuse_unknown(v, set(keys), "config/versions.toml")
    for key in keys:
        if not isinstance(v.get(key), str) or not v[key]:
            raise VramkitError(f"config/versions.toml: {key} is missing or not text", "restore it from git",
                               Exit.BAD_FILE)
    return Versions(**{k: v[k] for k in keys})


@cache
def sglang() -> SglangFacts:
    s = _load_toml("sglang.toml")
    _refuse_unknown(s, {"port", "gpu_host_extra_args"}, "config/sglang.toml")
    port, extra = s.get("port"), s.get("gpu_host_extra_args")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise VramkitError(f"config/sglang.toml: port = {port!r} is not a port (1-65535)", "fix it", Exit.BAD_FILE)
    if not isinstance(extra, list) or not all(isinstance(a, str) for a in extra):
        raise VramkitError("config/sglang.toml: gpu_host_extra_args is not a list of strings", "fix it",
                           Exit.BAD_FILE)
    return SglangFacts(port=port, gpu_host_extra_args=tuple(extra))


ENGINE_KEYS = ("cuda_context_mib", "driver_reserved_mib", "tp_comm_init_mib", "tp_comm_runtime_mib", "pre_kv_mib",
               "post_kv_misc_mib", "attention_backend_mib", "decode_graph_mib", "activation_factor",
               "runtime_margin_mib", "hicache_host_reserve_mib")


@cache
def engine_constants() -> dict:
    """Measured constants of SGLang's runtime (config/engine.toml), with their provenance there: every key
    present, none unknown, each a number >= 0 (else one line naming the key, exit 65)."""
    c = _load_toml("engine.toml")
    _refuse_unknown(c, set(ENGINE_KEYS), "config/engine.toml")
    for key in ENGINE_KEYS:
        value = c.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise VramkitError(f"config/engine.toml: {key} = {value!r} is not a number >= 0"
                               if key in c else f"config/engine.toml: {key} is missing",
                               "restore it from git (each value's provenance is beside it)", Exit.BAD_FILE)
    return c


def _tables(name: str, key: str) -> dict[str, dict]:
    """The [key.<name>] tables of a config file; any other top-level key, or an entry that is not a table,
    is refused (one line, exit 65)."""
    data = _load_toml(name)
    _refuse_unknown(data, {key}, f"config/{name}")
    tables = data.get(key)
    if not isinstance(tables, dict) or not tables or not all(isinstance(t, dict) for t in tables.values()):
        raise VramkitError(f"config/{name} has no [{key}.<name>] tables", "restore it from git", Exit.BAD_FILE)
    return tables


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
