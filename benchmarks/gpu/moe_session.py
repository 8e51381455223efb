"""One host session's points as benchmarks/gpu/run_moe_vs_llamacpp.sh wrote them, read into the figures the
comparison (moe_vs_llamacpp_report.py) and the levers file (moe_levers.py) set side by side (issue 18): the kit's
(moe_point.py / moe_probe.py JSON, `vramkit up`'s output, the trimmed server log) and llama.cpp's (moe_probe.py,
llama-bench JSON). Every figure is a measurement of that session; nothing here derives one.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "gpu"


def session_dir(out_dir: Path, name: str) -> Path:
    """A host session's points: OUT/NAME where a report is writing them, else the committed folder."""
    return out_dir / name if (out_dir / name).is_dir() else RESULTS / name


def load(p: Path) -> dict | list | None:
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def failed_requests(probe_path: Path) -> list[str]:
    """A probe's failed requests in words ("the 30,000-token prompt failed: <the server's error>"), none if it has
    none or is missing."""
    probe = load(probe_path)
    if not isinstance(probe, dict):
        return []
    return [f"the {r['prompt_tokens']:,}-token prompt failed: {r.get('error', '').strip()}"
            for r in probe.get("ttft", []) if not r.get("ok")]


def probe_figures(probe: dict | None) -> dict:
    """decode_tok_s (1 stream, 512-token prompt), decode_tok_s_8k, ttft_30k_s, aggregate_4_streams_tok_s."""
    f: dict = {"decode_tok_s": None, "decode_tok_s_8k": None, "ttft_30k_s": None, "ttft_8k_s": None,
               "ttft_512_s": None, "decode_tok_s_30k": None, "aggregate_4_streams_tok_s": None}
    if not probe:
        return f
    for d in probe.get("decode", []):
        if d.get("streams") == 1 and d.get("per_stream_tok_s"):
            f["decode_tok_s"] = round(d["per_stream_tok_s"], 2)
        if d.get("streams") == 4 and d.get("aggregate_tok_s") and all(r.get("ok") for r in d.get("requests", [])):
            f["aggregate_4_streams_tok_s"] = round(d["aggregate_tok_s"], 2)
    for r in probe.get("ttft", []):
        if not r.get("ok"):
            continue
        n = r["prompt_tokens"]
        key = {512: "512", 8192: "8k", 30000: "30k"}.get(n)
        if key:
            f[f"ttft_{key}_s"] = round(r["ttft_s"], 3)
            if key != "512" and r.get("decode_tok_s"):
                f[f"decode_tok_s_{key}"] = round(r["decode_tok_s"], 2)
    return f


@dataclass(frozen=True)
class Pairing:
    """Which points of a session are set side by side: the kit's, and llama.cpp's on one GGUF."""

    stem: str                   # the committed files: STEM-{16,24}g.{json,md,png}
    llama: str                  # llama.cpp's points' prefix, {b} the card: llama-{b}-fit, -best, -bench-*
    gguf: str                   # the file llama.cpp ran, in words
    kit_names: tuple[str, ...]  # the kit's candidate points, {b} the card (those at 16 GiB only: prefixed 16:)

    def kits(self, budget: int) -> list[str]:
        return [n.split(":", 1)[-1].format(b=budget) for n in self.kit_names
                if not n.startswith("16:") or budget == 16]


Q4 = Pairing("moe-vs-llamacpp", "llama-{b}", "a Q4_K_M-typed GGUF (tools/make_random_gguf.py, 17.3 GiB)",
             ("k{b}", "k{b}-gptq", "k{b}-gptq-kv32", "k{b}-wna16", "16:k{b}-layers", "16:k{b}-layers-defer2",
              "16:k16-gptq-layers", "16:k16-gptq-layers-defer2", "16:k16-wna16-defer2", "16:k16-wna16-layers",
              "16:k16-wna16-layers-defer2",
              "16:k16-wna16-layers-t12", "16:k16-wna16-layers-t12-defer2", "16:k16-marlin-layers-t12",
              "16:k16-preset", "16:k16-kt-prompts", "16:k16-preset-int4",
              "16:k16-preset-int4-avx2", "16:k16-preset-int4-t14", "16:k16-preset-int4-t16", "16:k16-preset-int4-t6",
              "16:k16-preset-int4-masked", "16:k16-preset-int4-pincaller", "16:k16-preset-int4-share"))
# the 8-bit class (benchmarks/results/gpu/peer-accuracy/): the kit's FP8 GPU experts + AMXINT8 CPU experts, no deferral,
# against llama.cpp on a Q8_0 file (run_moe_vs_llamacpp.sh STEPS="setup llama-q8", since 2026-11-28 "setup lprefill8")
Q8 = Pairing("moe-vs-llamacpp-q8", "llama-q8-{b}", "a Q8_0 GGUF (tools/make_random_gguf.py --type Q8_0, 30.3 GiB)",
             ("k{b}-int8", "k{b}-int8-layers", "16:k16-int8-preset", "16:k16-int8-prefill", "16:k16-int8-kt-prompts",
              "16:k16-int8-prefill-int8"))
# an AVX2-only desktop's two engines on the GPU host's cores (run_moe_vs_llamacpp.sh LLAMA_CPU_VARIANTS=1 STEPS="setup
# lint4", since 2026-11-29's thirty-second session): the kit's int4 decode on its AVX2 build against llama.cpp on its
# haswell CPU backend, the same Q4_K_M file and GPU placement
AVX2 = Pairing("moe-vs-llamacpp-avx2", "llama-avx2-{b}", "a Q4_K_M-typed GGUF (tools/make_random_gguf.py, 17.3 GiB) "
               "on its haswell (AVX2) CPU backend", ("16:k16-preset-int4-avx2",))
PAIRINGS = (Q4, Q8, AVX2)


def bench_rows(res: Path, budget: int, pairing: Pairing = Q4) -> list[dict]:
    rows = []
    name = pairing.llama.format(b=budget)
    for f in (f"{name}-bench-d0-8k.json", f"{name}-bench-d30k.json"):
        for r in load(res / f) or []:
            rows.append({"test": f"pp{r['n_prompt']}" if r["n_gen"] == 0 else f"tg{r['n_gen']}",
                         "depth": r["n_depth"], "threads": r["n_threads"], "tok_s": round(r["avg_ts"], 2),
                         "stddev": round(r["stddev_ts"], 2), "reps": len(r.get("samples_ts", []))})
    return rows


EXPERTS = 128           # per MoE layer of the shape every point here runs
MOE_LAYERS = 48         # its MoE layers (every decoder layer)


def last_flag(args: list[str], flag: str) -> str | None:
    """A flag's value as argparse keeps it: the last one given (the driver's base arguments, then a point's own)."""
    at = [i for i, a in enumerate(args[:-1]) if a == flag]
    return args[at[-1] + 1] if at else None


def ran_whole_layers(env: list[str] | None, args: list[str] | None, evidence: str = "") -> bool:
    """Whether a kit point ran whole layers on the GPU: the adapter's VRAMKIT_KT_GPU_LAYERS=auto in its environment,
    the knob's flag, or the adapter's own placement line in the server log (a point that took the moe preset's
    default, whole layers since 2026-11-27's eleventh session); every point without any of them split each layer
    (the driver passes --kt-gpu-layers off to the others)."""
    return ("VRAMKIT_KT_GPU_LAYERS=auto" in (env or []) or last_flag(args or [], "--kt-gpu-layers") == "auto"
            or whole_gpu_layers_logged(evidence) is not None)


def whole_gpu_layers_logged(evidence: str) -> int | None:
    """The MoE layers the adapter put whole on the GPU, as its placement line in the server log says
    ("... all on the GPU (37 layers, no CPU round trip)"); None where it did not place whole layers."""
    m = re.search(r"VRAMKIT_KT_GPU_LAYERS=auto: experts of layers .* all on the GPU \((\d+) layers", evidence)
    return int(m.group(1)) if m else None
# SGLang's "Load weight end ... quant=X" -> the GPU experts' format and the activations' dtype (the config's)
GPU_EXPERTS = {"fp8": ("FP8 (block 128)", "bfloat16"), "gptq": ("GPTQ-Int4 (group 128, marlin MoE)", "float16")}
WNA16_EXPERTS = ("GPTQ-Int4 (group 128, moe_wna16 triton MoE)", "float16")
# The points run at 74e7a2a, whose planner rendered --quantization moe_wna16 for a split GPTQ layer (--moe-kernel auto;
# test_a_card_that_holds_every_expert_gets_no_hybrid_mode) before its plan printed the kernel; SGLang's own line
# names the MoE method only where no KT wrapper hides it
WNA16_AT_74E7A2A = ("k16-wna16", "k16-wna16-defer2")


def gpu_experts(name: str, up: str, evd: str) -> tuple[str, str] | None:
    """A point's GPU-expert format and activations: SGLang's quant= load line, its MoE method where it names it,
    the plan's moe_wna16 note, or the points declared above."""
    q = re.search(r"quant=(\w+)", evd)
    fmt_ = GPU_EXPERTS.get(q.group(1) if q else "")
    if fmt_ and q and q.group(1) == "gptq" and ("quant_method=MoeWNA16Method" in evd or "moe_wna16" in up
                                                  or name in WNA16_AT_74E7A2A):
        return WNA16_EXPERTS
    return fmt_


def plan_split(up: str) -> tuple[int, str] | None:
    """(GPU experts per MoE layer, KT method) from `vramkit up`'s plan table; None where the plan holds every expert
    on the GPU (no hybrid row)."""
    m = re.search(r"experts on GPU / CPU\s*\S\s*(\d+) / (\d+)\s*\S\s*per MoE layer; CPU: (\w+)", up)
    return (int(m.group(1)), m.group(3)) if m else None


def kit_point(res: Path, name: str) -> dict | None:
    point = load(res / f"{name}.json")
    if not isinstance(point, dict) or point.get("up_rc") != 0:
        return None
    probe = load(res / f"{name}.probe.json")
    up = (res / f"{name}.up.txt").read_text(errors="replace") if (res / f"{name}.up.txt").exists() else ""
    cmd = next((ln.strip() for ln in up.splitlines() if "sglang.launch_server" in ln), "")
    # the plan's split row (none: the plan holds every expert on the GPU, no KT) and SGLang's own load line
    split = plan_split(up)
    evd = res / f"{name}.evidence.txt"
    evd_text = evd.read_text(errors="replace") if evd.exists() else ""
    fmt_ = gpu_experts(name, up, evd_text)
    return {"name": name, "figures": probe_figures(probe if isinstance(probe, dict) else None),
            "kt_method": split[1] if split else None,
            "gpu_expert_dtype": fmt_[0] if fmt_ else None, "activations": fmt_[1] if fmt_ else None,
            "vramkit_up_args": point.get("vramkit_up_args"), "env": point.get("env"),
            "gpu_layers_logged": whole_gpu_layers_logged(evd_text),
            "planned_gpu_experts_per_layer": split[0] if split else EXPERTS,
            "sglang_command": cmd, "server_args": next((ln for ln in evd_text.splitlines() if "server_args" in ln), ""),
            "start_s": point.get("start_s"), "peak_vram_bytes": point.get("peak_vram_bytes"),
            "host_rss_after_start_bytes": point.get("host_rss_after_start_bytes"),
            "log_figures_gib": point.get("log_figures_gib"), "probe_date": (probe or {}).get("date")}


INT4_DECODE = "VRAMKIT_KT_CPU_DECODE=int4"
INT4_DECODE_WORDS = ("the CPU layers' decode on their GPTQ-Int4 values as the checkpoint has them (the adapter's "
                     "int4_experts.c), longer chunks on kt-kernel's")


def cpu_decode(env: list[str] | None, up_args: list[str] | None = None) -> str:
    """What computed a point's CPU layers' decode batches: kt-kernel (its --kt-method), or the adapter's int4 kernel
    (the server's environment said so, or `vramkit up --kt-cpu-decode int4` did, as every point since the preset's
    auto took it)."""
    args = up_args or []
    flag = next((args[i + 1] for i in range(len(args) - 2, -1, -1) if args[i] == "--kt-cpu-decode"), None)
    return "int4" if INT4_DECODE in (env or []) or flag == "int4" else "kt"


def disturbed(res: Path, name: str, budget: int) -> str | None:
    """Why a point is not comparable, or None: SGLang saw less free memory at load than the ballast leaves
    (another process was on the card and, with it, on the CPU), or it did not start."""
    point = load(res / f"{name}.json")
    if not isinstance(point, dict):
        return None
    free = (point.get("log_figures_gib") or {}).get("load_begin_avail")
    if free is not None and free < budget - 1.0:
        return (f"another process held the card during it: {free} GiB free at load against ~{budget - 0.7:.1f} "
                "with the ballast alone (a device command of another helper ran on the same machine)")
    if point.get("up_rc") != 0:
        return f"did not start (vramkit up exit {point.get('up_rc')}): {str(point.get('error'))[:200]}"
    return None


def llama_point(res: Path, name: str) -> dict | None:
    probe = load(res / f"{name}.probe.json")
    if not isinstance(probe, dict):
        return None
    return {"name": name, "figures": probe_figures(probe),
            "start_s": float((res / f"{name}.start_s").read_text()) if (res / f"{name}.start_s").exists() else None,
            "vram_used_mib_with_ballast": (res / f"{name}.smi.txt").read_text().strip()
            if (res / f"{name}.smi.txt").exists() else None}


def goals_met(f: dict, lb: dict) -> int:
    """How many of issue 18's four goals the kit's figures `f` meet against llama.cpp's best `lb`."""
    checks = ((f["decode_tok_s"], lb["decode_tok_s"], 1.0), (f["decode_tok_s_8k"], lb["decode_tok_s_8k"], 1.0),
              (lb["ttft_30k_s"], f["ttft_30k_s"], 1.0),
              (f["aggregate_4_streams_tok_s"], lb["aggregate_4_streams_tok_s"], 2.0))
    return sum(1 for a, b, ratio in checks if a and b and a >= ratio * b)


def best(points: list[dict], lb: dict | None = None) -> dict | None:
    """The point meeting the most goals against llama.cpp's best `lb` (none: decode alone), the fastest decode among
    those."""
    ok = [p for p in points if p and p["figures"]["decode_tok_s"]]
    if not ok:
        return None
    return max(ok, key=lambda p: (goals_met(p["figures"], lb) if lb else 0, p["figures"]["decode_tok_s"]))


METRICS = ("decode_tok_s", "decode_tok_s_8k", "ttft_30k_s", "aggregate_4_streams_tok_s")
LOWER_IS_BETTER = ("ttft_30k_s",)


def llama_best(modes: dict[str, dict | None]) -> tuple[dict, dict]:
    """llama.cpp's best per metric over its modes (--fit, --n-cpu-moe swept), and which mode gave each."""
    best: dict = {}
    which: dict = {}
    for key in METRICS + ("ttft_512_s", "ttft_8k_s", "decode_tok_s_30k"):
        vals = [(f[key], m) for m, f in modes.items() if f and f.get(key)]
        if vals:
            v, m = (min if key in LOWER_IS_BETTER or key.startswith("ttft") else max)(vals)
            best[key], which[key] = v, m
        else:
            best[key] = None
    return best, which


def fmt(x, unit="") -> str:
    return "-" if x is None else (f"{x:,.1f}{unit}" if isinstance(x, float) else f"{x}{unit}")
