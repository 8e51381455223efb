"""Every launch knob, declared once: name, type, unit, valid range, CLI flag and help, preset key and the
SGLang flag it renders to. Pure: values in, values or a ValueError out.

The `Knobs` dataclass is the declaration (SGLang derives its parser from one dataclass the same way,
srt/server_args.py). Each field carries a `KnobSpec` in its metadata, and everything else reads that:
the CLI (commands/plan.py `add_plan_arguments`, launch/resolve.py), preset loading and validation
(catalog.presets), the renderer (core/render/sglang.py `sglang_args`) and the table in config/presets.toml
(`doc_table`, written by `vramkit compose`). A new knob is one field here plus its planner logic.

Field order is the order the knobs render in SGLang's argument list.
"""
from __future__ import annotations

import math
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from functools import cache
from typing import Any

from vramkit.core.plan.kt_hybrid import (
    CPU_DECODES,
    EMBED_HOST,
    INT4_DECODE_MEASURED,
    KT_GPU_LAYERS,
    KT_METHODS,
    MOE_KERNELS,
    PREFILL_FP8,
    PREFILL_PINS,
)

# "32k" tokens on the command line is 32 x 1024, as model cards and SGLang's own logs count context windows
TOKENS_PER_K = 1024
VALID_KV_DTYPES = ("auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16")

# A renderer gets the resolved value and the Plan (core/plan/planner.py; typed Any to keep this module below
# the planner) and returns the SGLang arguments for it.
Render = Callable[[Any, Any], list[str]]


@dataclass(frozen=True)
class KnobSpec:
    name: str                         # the Knobs field, the preset key, and (with dashes) the CLI flag
    type: type                        # int | float | str
    unit: str                         # what one unit is: "tokens", "GB (10^9 bytes)", "GiB (2^30 bytes)", ...
    help: str
    minimum: float | None = None      # inclusive
    below: float | None = None        # exclusive upper bound
    choices: tuple[str, ...] = ()
    also: tuple[Any, ...] = ()        # values accepted beyond the range (SGLang's specials: -1, "auto")
    sglang_flag: str | None = None    # the flag it renders to (None: the planner's input only)
    env: str | None = None            # the server environment variable it sets instead of a flag (the kit's adapter)
    render: Render | None = None      # default: [sglang_flag, str(value)] unless the value is None
    old_names: tuple[str, ...] = ()   # earlier preset keys / CLI spellings, still read with a warning
    default: Any = None

    @property
    def cli_flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def server_arg(self) -> str | None:
        """SGLang's ServerArgs field the flag sets (its /server_info key): the flag without dashes."""
        return self.sglang_flag.removeprefix("--").replace("-", "_") if self.sglang_flag else None

    @property
    def preset_key(self) -> str:
        return self.name

    def range_text(self) -> str:
        """The valid values in words: 'a whole number >= 1, or -1', 'a number in [0.1, 1)', 'one of auto, ...'."""
        if self.choices:
            return "one of " + ", ".join(self.choices)
        kind = "a whole number" if self.type is int else "a number"
        if self.minimum is not None and self.below is not None:
            text = f"{kind} in [{self.minimum:g}, {self.below:g})"
        elif self.minimum is not None:
            text = f"{kind} >= {self.minimum:g}"
        else:
            text = kind
        example = " (32k = 32,768)" if self.unit == "tokens" and self.type is int else ""
        return text + "".join(f", or {a}" for a in self.also) + example

    def parse(self, raw: Any, *, from_text: bool) -> Any:
        """A checked value from a CLI string (`from_text`) or a TOML value; else ValueError whose text
        completes "<where> <value> ..." ("is not a whole number"). TOML values must already have the
        declared type (no '8' for 8)."""
        if isinstance(raw, str) and raw in self.also:
            return raw
        value = self._coerce(raw, from_text)
        if value in self.also and not isinstance(value, bool):
            return value
        if self.choices and value not in self.choices:
            raise ValueError(f"is not {self.range_text()}")
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > WHOLE_MAX:
            raise ValueError(f"is not {self.range_text()} up to 2^40")   # 10^400 was a traceback, 10^60 3.5 s
        if isinstance(value, (int, float)):
            if not math.isfinite(value):
                raise ValueError("is not a finite number")
            if (self.minimum is not None and value < self.minimum) or (self.below is not None and value >= self.below):
                raise ValueError(f"is not {self.range_text()}")
        return value

    def _coerce(self, raw: Any, from_text: bool) -> Any:
        kind = {int: "a whole number", float: "a number", str: "text"}[self.type]
        if from_text:
            text = str(raw).strip()
            if self.unit == "tokens" and text[-1:] in ("k", "K") and text[:-1].isdigit():
                return int(text[:-1]) * TOKENS_PER_K      # --context 32k: 32,768 tokens
            try:
                return self.type(raw) if self.type is not float else float(raw)
            except (TypeError, ValueError):
                raise ValueError(f"is not {kind}" + (f" (or {', '.join(map(str, self.also))})"
                                                     if self.also else "")) from None
        if isinstance(raw, bool) or not isinstance(raw, self.type if self.type is not float else (int, float)):
            raise ValueError(f"is not {kind}" + (f" (or {', '.join(map(repr, self.also))})"
                                                 if self.also else ""))
        return float(raw) if self.type is float and isinstance(raw, (int, float)) else raw

    def sglang_args(self, value: Any, plan: Any) -> list[str]:
        if self.render is not None:
            return self.render(value, plan)
        if self.sglang_flag is None or value is None:
            return []
        return [self.sglang_flag, str(value)]


WHOLE_MAX = 1 << 40   # no knob means more (2^40 tokens, GB or requests); beyond it the planner's float math
                     # overflows or crawls (issue 20 item 4: absurd contexts pinned the dashboard's core)


def knob(default: Any, type: type, unit: str, help: str, **kw: Any) -> Any:
    """One knob: a dataclass field whose metadata is its KnobSpec (the name is filled in from the field)."""
    return field(default=default, metadata={"knob": dict(type=type, unit=unit, help=help, default=default, **kw)})


KT_METHOD_CHOICES = tuple(KT_METHODS)      # kt-kernel's methods the kit plans, declared in core/plan/kt_hybrid.py


# SGLang's spellings of the flags the kit sets that are not knobs (the renderer, core/render/sglang.py, and the
# hybrid MoE mode's weight folder use them): with the knobs' own `sglang_flag`s, the only place a flag is spelled
SGLANG_FLAGS = {
    "model_path": "--model-path", "host": "--host", "port": "--port",
    "disable_prefill_graphs": "--disable-prefill-cuda-graph", "model_override": "--json-model-override-args",
    "load_format": "--load-format", "skip_tokenizer_init": "--skip-tokenizer-init",
    "kt_weight_path": "--kt-weight-path",
    "init_expert_location": "--init-expert-location",   # the hybrid mode's placement (core/plan/kt_placement.py)
    # the serving settings (Serving below)
    "served_model_name": "--served-model-name", "tool_call_parser": "--tool-call-parser",
    "reasoning_parser": "--reasoning-parser", "chat_template": "--chat-template",
    "tokenizer_path": "--tokenizer-path",
}


@dataclass(frozen=True)
class Serving:
    """What an OpenAI client or coding agent needs from the server (issue 21): the name it types, the parser
    that turns the model's tool-call text into structured `tool_calls`, the one that moves a thinking model's
    reasoning to `reasoning_content`, and a chat template where the checkpoint's own is wrong or missing.

    Declared once per model family in config/models.toml ([serving.<family>], the catalog reads it); a folder
    model gets its family's from its architecture where exactly one family claims it, else none. `source`
    says which was chosen and why, in words, for the plan to print."""

    served_model_name: str
    family: str | None = None           # the [serving.<family>] whose settings these are; None: none known
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    chat_template: str | None = None
    source: str = ""

    def args(self) -> list[str]:
        """SGLang's flags for these settings (None renders nothing)."""
        f = SGLANG_FLAGS
        out = [f["served_model_name"], self.served_model_name]
        for name in ("tool_call_parser", "reasoning_parser", "chat_template"):
            value = getattr(self, name)
            if value is not None:
                out += [f[name], value]
        return out


def _kt(flag: str, value: Any, plan: Any) -> list[str]:
    """A --kt-* flag once the hybrid mode is on and its value resolved (an unresolved "auto" renders nothing)."""
    return [flag, str(value)] if getattr(plan.knobs, "kt_method", None) and value != "auto" else []


def _graphs(bs: int, _p: Any) -> list[str]:
    return ["--cuda-graph-max-bs-decode", str(bs)] if bs > 0 else ["--cuda-graph-backend-decode", "disabled"]


def _hicache(gb: int, _p: Any) -> list[str]:
    # write_through: every new KV page is copied to host at once, so a later prefix hit never waits for it
    return ["--enable-hierarchical-cache", "--hicache-size", str(gb), "--hicache-write-policy", "write_through",
            "--hicache-io-backend", "kernel"] if gb > 0 else []


@dataclass(frozen=True)
class Knobs:
    """What the user asked for (raw, from a preset and the CLI). None = let the planner resolve it as SGLang
    would for the target card. `Plan.knobs` holds the same type with every value resolved."""

    tp: int = knob(1, int, "GPUs", "tensor parallel size (GPUs)", minimum=1, sglang_flag="--tp-size",
                   render=lambda v, _p: ["--tp-size", str(v)] if v > 1 else [])
    mem_fraction: float | None = knob(
        None, float, "fraction of the card", "share of the card SGLang takes for weights + KV pool "
        "(default: SGLang's own formula for the target card)", minimum=0.1, below=1.0,
        sglang_flag="--mem-fraction-static", render=lambda v, _p: ["--mem-fraction-static", f"{v:g}"])
    context: int = knob(32768, int, "tokens", "tokens in one request (prompt + output); above the model's "
                        "native window the planner adds YaRN", minimum=1, sglang_flag="--context-length",
                        render=lambda _v, p: ["--context-length", str(p.context_len)])
    kv_dtype: str = knob("auto", str, "", "KV cache element type (auto = the model's dtype)",
                         choices=VALID_KV_DTYPES, sglang_flag="--kv-cache-dtype")
    chunked_prefill: int | None = knob(
        None, int, "tokens", "tokens per prefill step, bounds activation memory; -1 = no chunking",
        minimum=1, also=(-1,), sglang_flag="--chunked-prefill-size")
    max_running: int | None = knob(
        None, int, "requests", "requests served at once; also sizes SGLang's req_to_token table "
        "((max_running + 1) x (context + 4) x 4 bytes)", minimum=1, sglang_flag="--max-running-requests")
    cuda_graph_max_bs: int | None = knob(
        None, int, "requests", "largest decode batch captured in a CUDA graph; 0 = decode graphs off",
        minimum=0, sglang_flag="--cuda-graph-max-bs-decode", render=_graphs)
    hicache_gb: int = knob(0, int, "GB (10^9 bytes)", "host-RAM KV cache (hierarchical cache), pinned; 0 = off",
                           minimum=0, sglang_flag="--hicache-size", render=_hicache, old_names=("hicache_gib",))
    cpu_offload_gib: int | str = knob(
        0, int, "GiB (2^30 bytes)", "weights kept in pinned host RAM; auto = the least that fits",
        minimum=0, also=("auto",), sglang_flag="--cpu-offload-gb",
        render=lambda v, _p: ["--cpu-offload-gb", str(int(v))] if int(v) > 0 else [])
    concurrency: int = knob(1, int, "requests", "requests of that context that should run at once (the "
                            "planner's target; SGLang has no such flag)", minimum=1)
    moe_kernel: str | None = knob(
        "auto", str, "", "GPU kernel for a GPTQ/AWQ checkpoint's experts: marlin (SGLang's default) or wna16 "
        "(SGLang's moe_wna16: the same int4 files on the triton MoE kernel, which skips the hybrid mode's CPU "
        "experts where marlin cannot); auto = wna16 where the hybrid mode splits a layer's experts, marlin "
        "otherwise", choices=MOE_KERNELS, sglang_flag="--quantization",
        render=lambda v, _p: ["--quantization", "moe_wna16"] if v == "wna16" else [])
    # The hybrid MoE mode (issue 12; core/plan/planner.py resolves the "auto"s, core/plan/kt_hybrid.py): experts
    # beyond the GPU's share are computed by the CPU through SGLang's KTransformers path. Rendered only with kt_method.
    kt_method: str | None = knob(
        None, str, "", "MoE experts beyond the GPU's share run on the CPU (SGLang's KTransformers path, "
        "kt-kernel), in this format: FP8 / BF16 / GPTQ_INT4 read from the checkpoint, AMXINT4 / AMXINT8 from KT's "
        "converted layout, RAWINT4 repacked from a GPTQ-Int4 checkpoint, LLAMAFILE_Q8_0 from a Q8_0 GGUF "
        "(--kt-weight-path); one the CPU (--cpu-isa) cannot run "
        "is replaced, with a note", choices=KT_METHOD_CHOICES, sglang_flag="--kt-method",
        render=lambda v, _p: ["--kt-method", KT_METHODS[v].sglang_method] if v else [])
    kt_num_gpu_experts: int | str = knob(
        "auto", int, "experts per MoE layer", "experts 0..N-1 of every MoE layer stay on the GPU; auto = as many "
        "as leave the KV pool the context", minimum=0, also=("auto",), sglang_flag="--kt-num-gpu-experts",
        render=lambda v, p: _kt("--kt-num-gpu-experts", v, p))
    kt_cpuinfer: int | str = knob(
        "auto", int, "threads", "CPU expert threads; auto = physical cores of the server cpuset (`make "
        "optimize`) minus a quarter of them (at least 2) for SGLang's own processes", minimum=1, also=("auto",),
        sglang_flag="--kt-cpuinfer", render=lambda v, p: _kt("--kt-cpuinfer", v, p))
    kt_gpu_layers: str = knob(
        "off", str, "", "where the GPU's experts sit: off = experts 0..N-1 of every MoE layer (SGLang's own split); "
        "auto = the same number of experts as whole layers (the last N x layers / experts), as llama.cpp's "
        "--n-cpu-moe places them: only the CPU's layers pay a round trip and kt-kernel holds only their experts in "
        "host RAM (the kit's kt-kernel adapter, services/sglang-kt/kt_compat)", choices=KT_GPU_LAYERS,
        env="VRAMKIT_KT_GPU_LAYERS")
    kt_gpu_prefill: int | str = knob(
        0, int, "tokens", "whole layers, GPTQ-Int4 experts on marlin or block-FP8 experts on triton: a forward of at "
        "least this many tokens (a prompt chunk) runs the CPU layers' experts on the GPU, copied in from pinned host "
        "RAM for each chunk as llama.cpp does (planned: one layer's staging set on the GPU, the CPU layers' copies in "
        "host RAM); 0 = off, prompts stay on kt-kernel; auto = 1024 (128 beside --kt-method FP8, whose kt-kernel "
        "prompt is ~20x slower) where the path can run, has run in a server on a GPU (GPTQ-Int4 and block FP8) and "
        "the plan fits with it, a tenth of the host RAM left free, else off",
        minimum=0, also=("auto",), env="VRAMKIT_KT_GPU_PREFILL")
    kt_prefill_pin: str = knob(
        "register", str, "", "how the GPU prompt path page-locks the CPU layers' copies in host RAM: register = each "
        "copy's own memory registered with CUDA, exactly its size; alloc = PyTorch's pinned allocator, each copy "
        "rounded up to a power of two (a third more host RAM for FP8's layers); the same speed measured both ways",
        choices=PREFILL_PINS, env="VRAMKIT_KT_PREFILL_PIN")
    kt_prefill_fp8: str = knob(
        PREFILL_FP8[0], str, "", "how the GPU prompt path computes block-FP8 experts: int8 = the FP8 values "
        "requantized at load to int8 per row and 128 inputs, bf16 inputs, as SGLang's moe_wna16 8-bit layers; w8a8 = "
        "SGLang's FP8 MoE, each GEMM's input rounded to FP8 too. Measured on the H200 host: MoE-layer error 2.85 "
        "against 5.10 percent, a 4,096-token chunk of one layer 12.8 against 11.8 ms beside its 11.2 ms copy",
        choices=PREFILL_FP8, env="VRAMKIT_KT_PREFILL_FP8")
    kt_embed_host: str = knob(
        "off", str, "", "on = the token embeddings move to pinned host RAM once the weights are loaded, and the GPU "
        "reads a token's row over the bus (the kit's SGLang adapter): their GPU memory goes to the KV pool and, on a "
        "hybrid MoE plan, to more GPU experts (a 30B coder's 0.58 GiB: one more whole FP8 layer at 16 GB; a 14B's "
        "1.45 GiB: ~16K more fp8 KV tokens); auto = on where it can run (tp 1, an untied bf16 table, no "
        "--cpu-offload-gb) and the plan fits with a tenth of the host RAM left free, else off with the reason. "
        "Lossless. Measured on one H200 machine at 16 GiB each: the FP8 MoE preset decoded 0.99x at depth 0, "
        "1.05-1.12x after 512-30K-token prompts; the 14B's pool 1.40x, decode 1.00x",
        choices=EMBED_HOST, env="VRAMKIT_KT_EMBED_HOST")
    kt_cpu_decode: str = knob(
        "kt", str, "", "what computes the CPU layers' decode batches: kt = kt-kernel's --kt-method; int4 = the kit's "
        "adapter on a GPTQ-Int4 checkpoint's own 4-bit values and scales (whole layers; float32, what SGLang's marlin "
        "computes on the GPU layers, so lossless against the checkpoint; compiled at start with the host's C "
        "compiler; 0.29 GiB more host RAM a CPU layer of a 30B coder); longer chunks stay on --kt-method or the GPU "
        "prompt path; auto = int4 where it can run (symmetric GPTQ-Int4 without act-order, whole layers), else kt; "
        + INT4_DECODE_MEASURED, choices=CPU_DECODES, env="VRAMKIT_KT_CPU_DECODE")
    kt_threadpool_count: int = knob(
        1, int, "NUMA nodes", "KT thread pools, one per NUMA node the server's CPUs span", minimum=1,
        sglang_flag="--kt-threadpool-count", render=lambda v, p: _kt("--kt-threadpool-count", v, p))


@cache
def specs(cls: type = Knobs) -> tuple[KnobSpec, ...]:
    """The declarations of a Knobs class (Knobs itself, or a subclass that adds knobs), in field order."""
    return tuple(KnobSpec(name=f.name, **f.metadata["knob"]) for f in fields(cls) if "knob" in f.metadata)


def by_name(cls: type = Knobs) -> dict[str, KnobSpec]:
    return {s.name: s for s in specs(cls)}


def old_names(cls: type = Knobs) -> dict[str, str]:
    """Earlier spellings -> today's name."""
    return {old: s.name for s in specs(cls) for old in s.old_names}


KNOBS: tuple[KnobSpec, ...] = specs(Knobs)


def render_args(knobs: Knobs, plan: Any) -> list[str]:
    """The SGLang arguments of every knob of `knobs` (its class's declarations, in order), from resolved values."""
    out: list[str] = []
    cls: type = knobs.__class__     # Knobs, or a subclass that adds knobs
    for s in specs(cls):
        out += s.sglang_args(getattr(knobs, s.name), plan)
    return out


def doc_table(cls: type = Knobs, width: int = 110) -> list[str]:
    """The knob table for config/presets.toml (comment lines), from the declarations."""
    decl = specs(cls)
    head = ("key", "unit", "valid values", "SGLang flag")
    rows = [(s.preset_key, s.unit or "-", s.range_text(),
             s.sglang_flag or (f"env {s.env}" if s.env else "(the planner's only)")) for s in decl]
    w = [max(len(r[i]) for r in [head, *rows]) for i in range(3)]

    def line(r: tuple[str, ...]) -> str:
        return ("#   " + "  ".join(c.ljust(w[i]) for i, c in enumerate(r[:3])) + "  " + r[3]).rstrip()

    out = [line(head)]
    for s, r in zip(decl, rows, strict=True):
        out.append(line(r))
        out += ["#       " + t for t in textwrap.wrap(s.help, width - 8)]
    return out
