"""The one source of truth for models, GPUs, presets and pinned versions: config/*.toml and each
model's own config.json. Everything else (CLI, renderer, compose files, tests, README tables) reads
them through here. Unknown keys are refused, so a typo cannot silently become a default.
"""
from __future__ import annotations

import difflib
import sys
import tomllib
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path

from vramkit import gguf_model
from vramkit.core.model.spec import GpuSpec, ModelSpec, Quantization  # noqa: F401  (re-exported: the core owns them)
from vramkit.core.plan import knobs as knob_decl
from vramkit.core.plan.knobs import Serving
from vramkit.core.plan.kt_hybrid import INT4_DECODE, KtConstants
from vramkit.core.plan.planner import Engine
from vramkit.errors import Exit, VramkitError
from vramkit.hf_config import read_model_config

# vramkit/config: in a checkout a link to the repository's config/ (so CONFIG_DIR.parent is the checkout, where
# services/ and benchmarks/ are), in an installed package (pip install .) the copy the wheel carries
CONFIG_DIR = (Path(__file__).resolve().parent / "config").resolve()

@dataclass(frozen=True)
class Preset:
    """A named set of knob values (config/presets.toml): only the keys the preset sets, each checked
    against its declaration (core/plan/knobs.py) when the file is read. `Knobs(**preset.knobs)` is the raw request."""
    name: str
    description: str
    model: str = ""
    knobs: dict = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Versions:
    sglang_pip: str
    sglang_image: str
    torch_cpu: str              # the CPU torch wheel of .venv and .venv-sglang (make setup)
    kt_kernel_pip: str          # kt-kernel for the hybrid MoE mode (services/sglang-kt)
    kt_kernel_avx2_pip: str     # the release an AVX2-only CPU gets (the first whose avx2 build runs there)
    sglang_kt_image: str        # the image services/sglang-kt/Dockerfile builds
    torch_cpu_index: str        # where that wheel comes from without a local one (scripts/install_cpu_torch.sh)
    sglang_pip_min_driver: int  # NVIDIA driver major the sglang_pip wheel's CUDA needs (make setup-gpu)

    def kt_kernel_for(self, isa: str | None) -> str:
        """The kt-kernel release the kit installs for a CPU of this build level (core/plan/kt_hybrid.CPU_ISAS)."""
        return self.kt_kernel_avx2_pip if isa == "avx2" else self.kt_kernel_pip

    def sglang_kt_image_for(self, kt_kernel: str) -> str:
        """The KT image built with that release (services/sglang-kt/Dockerfile's KT_KERNEL build arg)."""
        return self.sglang_kt_image.rsplit("-kt", 1)[0] + f"-kt{kt_kernel}"


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


@dataclass(frozen=True)
class ServingFamily:
    """config/models.toml [serving.<family>]: one model family's serving settings (issue 21)."""
    name: str
    tool_call_parser: str | None
    reasoning_parser: str | None
    chat_template: str | None
    architectures: tuple[str, ...]      # a folder model naming one of these is of this family
    source: str                         # where the format and the parser names come from

    def for_model(self, served_model_name: str, how: str) -> Serving:
        return Serving(served_model_name=served_model_name, family=self.name, tool_call_parser=self.tool_call_parser,
                       reasoning_parser=self.reasoning_parser, chat_template=self.chat_template,
                       source=f"family {self.name} ({how}): {self.source}")


SERVING_KEYS = ("tool_call_parser", "reasoning_parser", "chat_template", "architectures", "source")


@cache
def serving_families() -> dict[str, ServingFamily]:
    out = {}
    for name, e in _tables("models.toml", "serving", also=("models",)).items():
        where = f"config/models.toml [serving.{_toml_key(name)}]"
        _refuse_unknown(e, set(SERVING_KEYS), where)
        text = {k: e.get(k) for k in ("tool_call_parser", "reasoning_parser", "chat_template", "source")}
        archs = e.get("architectures", [])
        if any(v is not None and (not isinstance(v, str) or not v) for v in text.values()) or not text["source"] \
                or not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
            raise VramkitError(f"{where}: a value is not text, source is missing, or architectures is not a list of "
                               "names", "see the file's header", Exit.BAD_FILE)
        out[name] = ServingFamily(name=name, architectures=tuple(archs), **text)  # type: ignore[arg-type]
    claimed: dict[str, str] = {}
    for fam in out.values():
        for arch in fam.architectures:
            if arch in claimed:
                raise VramkitError(f"config/models.toml: {arch} is claimed by serving families {claimed[arch]} and "
                                   f"{fam.name}", "list an architecture shared by two formats under neither",
                                   Exit.BAD_FILE)
            claimed[arch] = fam.name
    return out


@cache
def models() -> dict[str, ModelSpec]:
    out = {}
    families = serving_families()
    for name, entry in _tables("models.toml", "models", also=("serving",)).items():
        where = f"config/models.toml [models.{_toml_key(name)}]"
        _refuse_unknown(entry, {"hf_id", "config_dir", "note", "serving", "served_name"}, where)
        spec = read_model_config(CONFIG_DIR / entry["config_dir"], name, entry["hf_id"], entry.get("note", ""))
        served = entry.get("served_name")
        if not isinstance(served, str) or not served or ":" in served:
            raise VramkitError(f"{where}: served_name is missing or has a colon (SGLang refuses one)",
                               "give the short name clients type, e.g. qwen2.5-coder-14b", Exit.BAD_FILE)
        family = entry.get("serving")
        if family is None:
            serving = Serving(served_model_name=served, source=f"{where} names no serving family: its model card "
                                                                 "documents no tool-call format SGLang parses")
        elif family in families:
            serving = families[family].for_model(served, f"{where}")
        else:
            raise VramkitError(f"{where}: serving = {family!r} is not a [serving.<family>] table",
                               f"use one of: {', '.join(sorted(families))}", Exit.BAD_FILE)
        out[name] = replace(spec, serving=serving)
    return out


def serving_for_folder(spec: ModelSpec, folder: Path, served: str | None = None) -> Serving:
    """A folder model's serving settings: a catalogued model's config folder (or Hub id) gets that model's;
    otherwise the family that claims its architecture, if exactly one does; otherwise none, said so (never a
    guessed parser). The served name is `served`, else the folder's name (SGLang refuses a colon in it)."""
    for m in models().values():
        if m.serving is not None and Path(m.config_dir).resolve() == folder.resolve():
            return replace(m.serving, source=f"{folder} is {m.name}'s config folder; " + m.serving.source)
        if m.serving is not None and spec.hf_id and m.hf_id.casefold() == spec.hf_id.casefold():
            return replace(m.serving, source=f"{spec.hf_id} is {m.name}'s Hub id; " + m.serving.source)
    served = (served or folder.name).replace(":", "-") or "model"
    for fam in serving_families().values():
        if spec.architecture in fam.architectures:
            return fam.for_model(served, f"recognised from config.json's architectures: {spec.architecture}")
    return Serving(served_model_name=served, source=(
        f"no tool-call or reasoning parser: architecture {spec.architecture} is claimed by no single serving family "
        "in config/models.toml (shared by families with different formats, or unknown), and the kit does not "
        "guess one; if the model card names SGLang's parser, pass --extra-args '--tool-call-parser NAME'"))


def _compute_capability(text: str) -> tuple[int, int]:
    major, minor = text.split(".")        # "12.0"; anything else: ValueError, reported as a bad number
    return int(major), int(minor)


# where a card's memory_total_mib comes from (config/gpus.toml's header says what each means)
MEMORY_BASES = ("nvidia-smi on the test host", "nvidia-smi, as owners report it", "nominal", "nominal, ECC on")


@cache
def gpus() -> dict[str, GpuSpec]:
    out = {}
    for name, e in _tables("gpus.toml", "gpus").items():
        _refuse_unknown(e, {"label", "memory_total_mib", "memory_basis", "bandwidth_gbs", "pcie_gen", "pcie_lanes",
                            "nvml_names", "sm_count", "compute_capability", "source", "note"}, f"gpus.toml [{name}]")
        if e.get("memory_basis") not in MEMORY_BASES or not str(e.get("source", "")).startswith("https://"):
            raise VramkitError(f"config/gpus.toml [gpus.{name}]: memory_basis is not one of {list(MEMORY_BASES)} or "
                               "source is not the https:// spec page the figures come from", "fix it (see the "
                               "file's header)", Exit.BAD_FILE)
        try:
            out[name] = GpuSpec(name=name, label=str(e["label"]), memory_total_bytes=int(e["memory_total_mib"]) << 20,
                                bandwidth_bytes_s=float(e["bandwidth_gbs"]) * 1e9, pcie_gen=int(e["pcie_gen"]),
                                pcie_lanes=int(e["pcie_lanes"]), nvml_names=tuple(e.get("nvml_names", ())),
                                sm_count=int(e["sm_count"]),
                                compute_capability=_compute_capability(str(e["compute_capability"])),
                                source=str(e["source"]))
        except KeyError as err:
            raise VramkitError(f"config/gpus.toml [gpus.{name}]: {err.args[0]} is missing", "add it (see the file's "
                               "header)", Exit.BAD_FILE) from None
        except (TypeError, ValueError) as err:
            raise VramkitError(f"config/gpus.toml [gpus.{name}]: a value is not a number ({err})", "fix it",
                               Exit.BAD_FILE) from None
        if out[name].pcie_gen not in (3, 4, 5, 6) or min(out[name].bandwidth_bytes_s, out[name].sm_count or 0,
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
    keys = ("sglang_pip", "sglang_image", "torch_cpu", "torch_cpu_index", "kt_kernel_pip", "kt_kernel_avx2_pip",
            "sglang_kt_image")
    _refuse_unknown(v, {*keys, "sglang_pip_min_driver"}, "config/versions.toml")
    for key in keys:
        if not isinstance(v.get(key), str) or not v[key]:
            raise VramkitError(f"config/versions.toml: {key} is missing or not text", "restore it from git",
                               Exit.BAD_FILE)
    driver = v.get("sglang_pip_min_driver")
    if isinstance(driver, bool) or not isinstance(driver, int) or driver <= 0:
        raise VramkitError("config/versions.toml: sglang_pip_min_driver is missing or not a driver major version",
                           "restore it from git", Exit.BAD_FILE)
    return Versions(**{k: v[k] for k in keys}, sglang_pip_min_driver=driver)


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
               "runtime_margin_mib", "hicache_host_reserve_mib", "pinned_gpu_map_mib_per_gib",
               "kt_cpu_read_efficiency", "kt_layer_sync_us", "kt_attention_read_gbs", "kt_sglang_host_mib",
               "kt_whole_layer_step_us",
               "kt_reserved_cores", "kt_build_cpu_time_avx512", "kt_build_cpu_time_avx2", "kt_method_cpu_time_amxint8",
               "kt_method_cpu_time_amxint4", "kt_method_cpu_time_int4_decode",
               "kt_method_cpu_time_int4_decode_avx2")


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


@cache
def engine() -> Engine:
    """config/engine.toml as the core's Engine, in bytes (the catalog owns the file's format)."""
    c = engine_constants()
    mib = 1 << 20
    return Engine(
        cuda_context=int(c["cuda_context_mib"] * mib), driver_reserved=int(c["driver_reserved_mib"] * mib),
        tp_comm_init=int(c["tp_comm_init_mib"] * mib), tp_comm_runtime=int(c["tp_comm_runtime_mib"] * mib),
        pre_kv=int(c["pre_kv_mib"] * mib), post_kv_misc=int(c["post_kv_misc_mib"] * mib),
        attention_backend=int(c["attention_backend_mib"] * mib), decode_graph=int(c["decode_graph_mib"] * mib),
        activation_factor=float(c["activation_factor"]), runtime_margin=int(c["runtime_margin_mib"] * mib),
        hicache_host_reserve=int(c["hicache_host_reserve_mib"] * mib),
        pinned_gpu_map_per_gib=int(c["pinned_gpu_map_mib_per_gib"] * mib),
        kt=KtConstants(cpu_read_efficiency=float(c["kt_cpu_read_efficiency"]),
                       layer_sync_s=float(c["kt_layer_sync_us"]) * 1e-6,
                       attention_read_bytes_s=float(c["kt_attention_read_gbs"]) * 1e9,
                       sglang_host_bytes=int(c["kt_sglang_host_mib"] * mib),
                       whole_layer_step_s=float(c["kt_whole_layer_step_us"]) * 1e-6,
                       reserved_cores=int(c["kt_reserved_cores"]),
                       build_cpu_time=(("avx512", float(c["kt_build_cpu_time_avx512"])),
                                       ("avx2", float(c["kt_build_cpu_time_avx2"]))),
                       method_cpu_time=(("AMXINT8", float(c["kt_method_cpu_time_amxint8"])),
                                        ("AMXINT4", float(c["kt_method_cpu_time_amxint4"])),
                                        (INT4_DECODE, float(c["kt_method_cpu_time_int4_decode"])),
                                        (INT4_DECODE + "_AVX2", float(c["kt_method_cpu_time_int4_decode_avx2"])))),
    )


def _tables(name: str, key: str, also: tuple[str, ...] = ()) -> dict[str, dict]:
    """The [key.<name>] tables of a config file; any other top-level key (but those in `also`, read by their own
    function), or an entry that is not a table, is refused (one line, exit 65)."""
    data = _load_toml(name)
    _refuse_unknown(data, {key, *also}, f"config/{name}")
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
    """`name` in `table`, case-insensitively (`RTX-4090-24GB` is rtx-4090-24gb); else one line naming the nearest
    names (difflib), exit 64."""
    if name in table:
        return table[name]
    folded = {key.casefold(): key for key in table}
    if name.casefold() in folded:
        return table[folded[name.casefold()]]
    raise VramkitError(f"unknown {kind} '{name}'", suggest(name, list(table), kind), Exit.BAD_INPUT)


def suggest(name: str, names: list[str], kind: str) -> str:
    """What to do about an unknown name: the nearest catalogued names, else where the full list is."""
    near = difflib.get_close_matches(name.casefold(), [n.casefold() for n in names], n=3, cutoff=0.5)
    by_fold = {n.casefold(): n for n in names}
    listed = "`vramkit plan --list`" + (" (or --gpu auto, or --gpu-free-gib with --gpu-bandwidth-gbs and --gpu-pcie)"
                                        if kind == "GPU" else "")
    if near:
        return f"did you mean {' or '.join(by_fold[n] for n in near)}? every {kind}: {listed}"
    return f"see {listed} for every {kind}"


def model(name_or_dir: str, revision: str | None = None) -> ModelSpec:
    """A catalogued name, a folder holding a config.json, or a Hugging Face id (owner/name, at `revision`):
    its config.json from the folder `vramkit pull` recorded, the Hub's cache, or the Hub (vramkit/adapters/hub.py;
    not in the cache and no Hub: one line, exit 26)."""
    if name_or_dir in models():
        return models()[name_or_dir]
    p = Path(name_or_dir).expanduser()
    if gguf_model.is_gguf(p):             # read with the gguf library; planned, or refused with the reason (exit 21)
        spec = gguf_model.model_spec(gguf_model.read(p))
        return replace(spec, serving=serving_for_folder(spec, p.resolve(), served=p.stem))
    if p.is_dir() or p.name == "config.json":
        # absolute: the path is SGLang's --model-path and the compose file's bind mount
        folder = (p if p.is_dir() else p.parent).resolve()
        spec = read_model_config(folder)
        return replace(spec, serving=serving_for_folder(spec, folder))
    if looks_like_folder(name_or_dir):
        raise VramkitError(f"model folder {name_or_dir} does not exist", "give the folder that holds the model's "
                           "config.json, or a catalogued name (vramkit plan --list)", Exit.BAD_INPUT)
    if name_or_dir.casefold() not in {n.casefold() for n in models()}:
        from vramkit.adapters import hub  # noqa: PLC0415 - huggingface_hub loads only for a Hub id
        if hub.is_repo_id(name_or_dir):
            try:
                folder = hub.config_folder(name_or_dir, revision)
            except VramkitError as err:
                twin = [n for n, m in models().items() if m.hf_id.casefold() == name_or_dir.casefold()]
                if err.code == Exit.MODEL_UNREACHABLE and twin:     # the kit carries this model's config.json
                    err.todo += f"; or plan the catalogued copy of its config: --model {twin[0]}"
                raise
            spec = read_model_config(folder, name=name_or_dir, hf_id=name_or_dir)
            return replace(spec, serving=serving_for_folder(spec, folder, served=name_or_dir.split("/")[1]))
    return _pick(models(), name_or_dir, "model")


def looks_like_folder(text: str) -> bool:
    """A path the user meant as a folder (absolute, ./, ../, ~), not a name or a Hugging Face id (org/name)."""
    return text in (".", "..") or text.startswith(("/", "./", "../", "~"))


def gpu(name: str) -> GpuSpec:
    return _pick(gpus(), name, "GPU")


def preset(name: str) -> Preset:
    return _pick(presets(), name, "preset")


def gpu_by_nvml_name(nvml_name: str, total_bytes: int | None = None) -> GpuSpec | None:
    """The catalogued card NVML calls `nvml_name`; where one name covers two memory sizes (RTX 3080 10/12 GB,
    4060 Ti 8/16 GB), the one whose memory is nearest NVML's total."""
    named = [g for g in gpus().values() if nvml_name in g.nvml_names]
    if len(named) > 1 and total_bytes is not None:
        return min(named, key=lambda g: abs(g.memory_total_bytes - total_bytes))
    return named[0] if named else None
