"""Read SGLang 0.5.15.post1's server log: start-up phases and the memory figures it prints.

Pure text parsing. The lines (sglang/srt/model_executor/model_runner*.py), "GB" there meaning GiB:
  Init torch distributed ends. elapsed=0.41 s, mem usage=0.09 GB
  Load weight begin. avail mem=15.33 GB
  Load weight end. elapsed=8.90 s, type=Qwen2ForCausalLM, quant=gptq, ..., avail mem=5.92 GB, mem usage=9.41 GB.
  KV Cache is allocated. dtype: torch.float16, #tokens: 15493, K size: 1.42 GB, V size: 1.42 GB
  Memory pool end. avail mem=2.66 GB
  Capture target decode CUDA graph begin. ... avail mem=2.57 GB
  Capture target decode CUDA graph end. elapsed=377.76 s, mem usage=0.06 GB, avail mem=2.51 GB.
  max_total_num_tokens=15493, chunked_prefill_size=2048, ..., context_len=32768, available_gpu_mem=2.51 GB
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from vramkit.core.plan.knobs import by_name

# The kit's adapter (services/sglang-kt/kt_compat/vramkit_host_embed.py), not SGLang, writes these into the log: the
# token embeddings moved to pinned host RAM, or left on the GPU with the reason (kt_embed_host's variable)
_EMBED_ENV = by_name()["kt_embed_host"].env
EMBED_MOVED = f"{_EMBED_ENV}=on: embed_tokens"
EMBED_STAYED = f"{_EMBED_ENV}: "
INT4_TOOK = r"vramkit_int4_experts: layer \d+: decode batches of <= \d+ tokens on the GPTQ-Int4 values"
INT4_GAVE_UP = "the CPU layers' decode stays on kt-kernel from here on"

GIB = 1 << 30

_PATTERNS = {
    "dist_init_mem": r"Init torch distributed ends\..*?mem usage=([\d.]+) GB",
    "load_begin_avail": r"Load weight begin\. avail mem=([\d.]+) GB",
    "load_end_avail": r"Load weight end\..*?avail mem=([\d.]+) GB",
    "weights": r"Load weight end\..*?mem usage=([\d.]+) GB",
    "kv_tokens": r"KV Cache is allocated\..*?#tokens: (\d+)",
    "pool_end_avail": r"Memory pool end\. avail mem=([\d.]+) GB",
    "graph_begin_avail": r"Capture .*?decode CUDA graph begin\..*?avail mem=([\d.]+) GB",
    "graph_mem": r"Capture .*?decode CUDA graph end\..*?mem usage=([\d.]+) GB",
    "graph_end_avail": r"Capture .*?decode CUDA graph end\..*?avail mem=([\d.]+) GB",
    "graph_s": r"Capture .*?decode CUDA graph end\. elapsed=([\d.]+) s",
    "max_total_num_tokens": r"max_total_num_tokens=(\d+)",
    "context_len": r"max_total_num_tokens=.*?context_len=(\d+)",
    "max_running_requests": r"max_total_num_tokens=.*?max_running_requests=(\d+)",
    "available_after_start": r"max_total_num_tokens=.*?available_gpu_mem=([\d.]+) GB",
    "embed_moved": re.escape(EMBED_MOVED) + r" \(([\d.]+) GiB\) moved",     # the adapter's line (above)
    # the adapter's int4 decode kernel took a CPU layer (vramkit_int4_experts.py: one line a layer, its copy's GiB), or
    # gave up on one (every later layer then stays on kt-kernel)
    "int4_layer": INT4_TOOK + r" \(([\d.]+) GiB",
    "int4_failed": r"vramkit_int4_experts: layer (\d+): .*" + re.escape(INT4_GAVE_UP),
}
_GIB_KEYS = {"dist_init_mem", "load_begin_avail", "load_end_avail", "weights", "pool_end_avail", "graph_begin_avail",
             "graph_mem", "graph_end_avail", "available_after_start", "embed_moved", "int4_layer"}

# Start-up phases in order: (marker in the log, what to tell the user)
PHASES = [
    ("server_args=", "parsing arguments"),
    ("Init torch distributed", "initialising CUDA"),
    ("Load weight begin", "loading weights"),
    ("Load weight end", "allocating the KV cache"),
    # the first start on a machine compiles kernels inside the capture, once: the H100 host's first GPTQ start 378 s;
    # the FP8 moe preset's first starts on the H200 machines 70-93 s, its next start on the same machine 7 s
    # (benchmarks/results/gpu/moe-vs-llamacpp-q8/h200-*/*.evidence.txt)
    ("Capture target decode CUDA graph begin", "capturing decode CUDA graphs (a first start on this machine also "
                                               "compiles kernels here, once: ~1.5 min FP8, ~6 min GPTQ)"),
    ("Capture target decode CUDA graph end", "warming up"),
    ("Uvicorn running", "server warm-up request"),
    ("The server is fired up", "ready"),
]

_ERROR = re.compile(r"(Error|error:|Exception|out of memory|OOM|Killed|Traceback|RuntimeError|ValueError"
                    r"|scheduler is dead|exceeds)", re.I)


@dataclass
class StartupFigures:
    values: dict[str, Any] = field(default_factory=dict)

    def bytes(self, key: str) -> int | None:
        v = self.values.get(key)
        return None if v is None else int(round(v * GIB))


def int4_decoded(values: dict[str, Any]) -> bool:
    """Whether a parsed log (parse().values) shows the kit's int4 kernel taking the CPU layers' decode and giving up
    on none of them."""
    return values.get("int4_layer") is not None and values.get("int4_failed") is None


# With tensor parallelism every rank logs its own line ("[TP0] ...", "[TP1] ..."). SGLang sizes the KV pool
# of every rank from the smallest free memory across ranks (model_runner.init_torch_distributed takes
# the MIN), so for free-memory figures the smallest rank is the one that counts; for the rest, the last.
_MIN_KEYS = {"load_begin_avail"}


def parse(text: str) -> StartupFigures:
    out = {}
    for key, pat in _PATTERNS.items():
        m = re.findall(pat, text)
        if m:
            conv = float if (key in _GIB_KEYS or key == "graph_s") else int
            out[key] = min(map(conv, m)) if key in _MIN_KEYS else conv(m[-1])
    return StartupFigures(out)


def phase(text: str) -> str:
    """The latest start-up phase the log has reached."""
    return phase_at(text)[1]


def phase_at(text: str) -> tuple[int, str]:
    """(1-based index of the latest phase reached, its label); 0 before the first marker (of len(PHASES))."""
    current = (0, "starting the server process")
    for i, (marker, label) in enumerate(PHASES, 1):
        if marker in text:
            current = (i, label)
    return current


# the weight loader's tqdm bar (sglang/srt/model_loader/weight_utils.py): "Loading safetensors checkpoint shards:
# 40% Completed | 2/5 [00:03<00:04, ...]"
_SHARDS = re.compile(r"Loading (?:safetensors|pt) checkpoint shards:\s+\d+% Completed \| (\d+)/(\d+)")


def shards(text: str) -> tuple[int, int] | None:
    """(shards loaded, shards) from the latest loader bar in the log, while the weights load; else None."""
    found = _SHARDS.findall(text[-20000:])
    return (int(found[-1][0]), int(found[-1][1])) if found else None


# Import noise SGLang prints at every start (optional kernels it does without): never the cause.
_NOISE = re.compile(r"Ignore import error|No module named '(cutlass|openai_harmony)'|ModuleNotFoundError")


def last_error(text: str, max_len: int = 240) -> str:
    """The most telling error line of a failed start; for a silent death (killed, no error line), the
    last line the server printed."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if _ERROR.search(ln) and "Traceback" not in ln and not _NOISE.search(ln):
            return ln[-max_len:]
    real = [ln for ln in lines if not _NOISE.search(ln)]
    return ("no error line; last: " + real[-1])[-max_len:] if real else ""
