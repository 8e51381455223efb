"""Where a decoded token's time goes at 16 GiB, the kit and llama.cpp, measured (issue 18 item 2): moe-budget.md.

    python3 benchmarks/gpu/moe_budget.py [--check]      # reads benchmarks/results/gpu/moe-budget/, writes moe-budget.md
    python3 benchmarks/gpu/moe_budget.py pair FOLDER POINT BASE   # POINT against BASE (both in FOLDER), request by request
    python3 benchmarks/gpu/moe_budget.py layers COUNTS.json       # how alike a recording's layers route

Inputs (run_moe_vs_llamacpp.sh; one H100 host session each, the card emulated at 16 GiB by the shared ballast):
  run1/  STEPS="setup profile": the kit's best 16 GiB point (GPTQ-Int4 experts split per layer on moe_wna16, AMXINT8 CPU
         experts) and its whole-layer twin, each with SGLang's profiler over 32 decode steps at 1 and 4 streams
         (moe_probe.py --profile-steps; decode_profile.kineto's budget, recomputed from the trace); llama.cpp's
         --fit and --n-cpu-moe 11 probes; llama-bench decode with --n-cpu-moe swept and by threads; kt-kernel's
         CPU-expert time at kernel level for the two placements (kt_decode_bench.py)
  run2/  the same machine, next command: the moe preset as planned (FP8 GPU experts, AMXINT8) and with whole layers
         + 2 deferred experts, profiled the same way
  med3/  another machine: the kit's best point and llama.cpp's two, every figure the median of 3 rounds; kt-kernel's
         CPU-expert time at 6/10/14 threads
  k24lev/ a third machine, 24 GiB (every GPTQ-Int4 expert on the GPU, no KT): the plan's point, then SGLang's two batch
         levers (torch.compile of the decode graphs up to batch 4; 4 decode steps per scheduler round), then llama.cpp
  kcores/ a fourth machine (2026-11-27, seventh session): the kit's best point at 14, 10, 12 and 8 KT threads, every
         figure the median of 3 rounds, each profiled first (1 stream)
         waits.json: every wait stall of those profiles layer by layer (decode_profile.py waits over the four
         decode traces the run brought back; the traces themselves, 1 MB each, are not committed)
  hot-rec/ the same session, another machine: SGLang's expert-distribution recorder over one request (512-token
         prompt, 64 tokens) on the GPTQ split, its counts summed (expert-counts.json) and `vramkit kt-placement`'s
         output on them (kt-placement.txt)
  hotcheck/ the eighth session (2026-11-27): does a placement keep the outputs? A random 4-layer FP8 checkpoint on disk,
         CPU experts read from it, 64 GPU experts a layer, each layer's experts reversed by the map; 8 greedy 32-token
         decodes per server, set against the unplaced one by placement_check.py (placement-check.json)
  hot/   the ninth session (2026-11-27), one machine: the placement's speed. The recorder over 512-token prompts kept
         apart from the probe's (seed offset 100000; 256 tokens at 1 and 4 streams, 3 rounds), `vramkit kt-placement`
         on its counts, then the probe's own prompts with the trivial map (triv) and the placement (hot), and the
         recorded prompts with the placement (hot-rec) and with the trivial map and no recorder (triv-rec)
  layers-t10/ the same session: the whole-layer GPTQ point at 10 KT threads, profiled (its 1-stream trace's budget:
         decode_profile.py kineto, k16-wna16-layers-t10-prof.s1-budget.json; its 4-stream profile segfaulted at the
         start, .fail.txt), then on another machine unprofiled, one round (k16-wna16-layers-t10)
  thp-a/, thp-b/ the same machine, next commands: transparent huge pages "always" (thp-a), then the host's "madvise"
         and "always" again (thp-b, AnonHugePages sampled while they ran: thp-meminfo.txt)
  ../moe-vs-llamacpp-int4/r7-prof/ (2026-11-29, thirty-fourth session, an H200 machine, STEPS="setup profile4"): the
         moe preset as it now comes on a GPTQ-Int4 checkpoint (whole layers, the CPU layers' decode on int4_experts.c
         as it now is: down's units by expert, units in runs) profiled the same way, and llama.cpp's --n-cpu-moe sweep
         on that machine (r6-prof/, the session before, profiled the kernel before those two changes)
Every figure is a measurement; the closing list says which lines are derived from them.
"""
from __future__ import annotations

import json
import re
import statistics
import sys
from functools import cache
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from decode_profile import sweep  # noqa: E402
from moe_session import RESULTS, load, probe_figures  # noqa: E402

from vramkit.core.plan import kt_placement as kp  # noqa: E402

DIR = RESULTS / "moe-budget"
OUT = RESULTS / "moe-budget.md"
SUMMARY = RESULTS / "moe-budget.json"     # the figures README's MoE section quotes (vramkit/generated.py)
NOW = "../moe-vs-llamacpp-int4/r7-prof"     # the preset as it now comes, profiled (a folder beside moe-budget/)
KIT_POINTS = (   # (folder, point, what it is)
    (NOW, "k16-preset-int4-prof", "the moe preset as it now comes on a GPTQ-Int4 checkpoint: 38 whole layers on the "
     "GPU (marlin), the other 10 decoded on their GPTQ-Int4 values (int4_experts.c, 12 threads); an H200, 2026-11-29"),
    ("run1", "k16-wna16-prof", "the kit's best: GPTQ-Int4 experts, 88 of 128 per layer on the GPU (moe_wna16), "
     "AMXINT8 for the rest on 14 threads"),
    ("run1", "k16-wna16-layers-prof", "the same checkpoint, whole layers: 33 layers' experts all on the GPU, 15 all "
     "on the CPU (VRAMKIT_KT_GPU_LAYERS=auto)"),
    ("run2", "k16-int8", "the moe preset as planned: FP8 experts, 43 per layer on the GPU, AMXINT8 on 14 threads"),
    ("run2", "k16-int8-layers-defer2", "the preset with whole layers (16 on the GPU, 32 on the CPU) and 2 deferred "
     "experts"),
)
LAYERS = 48


@cache
def _probe(folder: str, point: str) -> dict:
    """A point's probe JSON, read once however many figures the report takes from it."""
    return load(DIR / folder / f"{point}.probe.json") or {}


def _unprofiled_ms(folder: str, point: str, streams: int) -> float | None:
    """The same server's step without the profiler: its probe's decode at that stream count, right after."""
    rate = next((d.get("per_stream_tok_s") for d in _probe(folder, point).get("decode", [])
                 if d.get("streams") == streams), None)
    return 1e3 / rate if rate else None


def _budget(folder: str, point: str, streams: int) -> dict | None:
    return next((p.get("budget") for p in _probe(folder, point).get("profile", []) if p.get("streams") == streams),
                None)


def _other_gaps_ms(b: dict) -> float:
    """A profiled step less its GPU kernels and its two kinds of stall: the shorter gaps."""
    return b["period_ms"] - b["gpu_busy_ms"] - b["handoff_stall_ms"] - b["wait_stall_ms"]


def _spread(b: dict, key: str = "period_us") -> str:
    per = [r[key] for r in b["per_step"] if r.get(key)]
    return f"{min(per):.1f}-{max(per):.1f}"


def _kt_ms(rel: str) -> float:
    """kt_decode_bench.py's CPU-expert time per token, its first run, from moe-budget/REL."""
    d = load(DIR / rel) or {}
    return next(r["cpu_ms_per_token_median"] for r in d.get("runs", []))


def _threads_table() -> list[str]:
    rows: dict[str, dict[int, float]] = {}
    for f in sorted((DIR / "med3").glob("kt-threads-*.json")):
        for r in (load(f) or {}).get("runs", []):
            if r.get("cpu_ms_per_token_median"):
                rows.setdefault(r["method"], {})[r["threads"]] = r["cpu_ms_per_token_median"]
    ts = sorted({t for v in rows.values() for t in v})
    out = ["| CPU method (43 GPU experts per layer) | " + " | ".join(f"{t} threads" for t in ts) + " |",
           "| --- |" + " --- |" * len(ts)]
    for m, v in sorted(rows.items()):
        out.append(f"| {m} | " + " | ".join(f"{v[t]:.1f} ms" if t in v else "-" for t in ts) + " |")
    return out


@cache
def _llama_sweep(folder: str = "run1") -> tuple[dict, dict[int, float]]:
    rows = []
    for f in sorted((DIR / folder).glob("llama-sweep-ncmoe*.json")):
        rows += load(f) or []
    by_threads = {int(r["n_threads"]): 1e3 / r["avg_ts"] for r in rows
                  if int(r["n_cpu_moe"]) == LAYERS and r.get("n_gen")}
    return sweep(rows), by_threads


def _llama_step(sw: dict) -> tuple[float, float, float]:
    """(llama.cpp's step at --n-cpu-moe 11, with every expert on the GPU, per CPU layer between the two), ms."""
    pts = {p["n_cpu_moe"]: p["step_ms"] for p in sw["points"]}
    return pts[11], pts[0], (pts[11] - pts[0]) / 11


MEDIAN_POINTS = ("k16-wna16", "llama-16-fit", "llama-16-best")


def _median_points() -> dict[str, dict]:
    return {n: probe_figures(_probe("med3", n)) for n in MEDIAN_POINTS}


def _llama_best(pts: dict[str, dict], key: str, pick) -> float:
    """llama.cpp's best of its two points for a figure (pick: max for a rate, min for a time)."""
    return pick(x for n in MEDIAN_POINTS[1:] if (x := pts[n][key]))


def _medians() -> list[str]:
    pts = _median_points()
    keys = (("decode_tok_s", "decode, 1 stream, depth 0 (tok/s)", max, 1), ("decode_tok_s_8k", "decode after 8K", max, 1),
            ("ttft_30k_s", "TTFT, 30K-token prompt (s)", min, 2), ("aggregate_4_streams_tok_s", "4 streams, aggregate", max, 1))
    out = ["| figure | vramkit (k16-wna16) | llama.cpp --fit on | llama.cpp --n-cpu-moe 11 | kit / llama.cpp's best |",
           "| --- | --- | --- | --- | --- |"]
    for k, label, pick, d in keys:
        kit, fit, ncm = pts["k16-wna16"][k], pts["llama-16-fit"][k], pts["llama-16-best"][k]
        out.append(f"| {label} | {kit:.{d}f} | {fit:.{d}f} | {ncm:.{d}f} | {kit / _llama_best(pts, k, pick):.2f}x |")
    return out


K24 = (("k24-gptq-kv32", "the plan (config/sglang.toml: 32 KV splits)"),
       ("k24-gptq-tc", "+ --enable-torch-compile --torch-compile-max-bs 4"),
       ("k24-gptq-cds4", "+ --num-continuous-decode-steps 4"),
       ("llama-24-fit", "llama.cpp --fit on"), ("llama-24-best", "llama.cpp --n-cpu-moe 0"))


@cache
def _k24() -> tuple[dict[str, dict], float]:
    """The 24 GiB points' figures and llama-server's best 4-stream aggregate beside them."""
    f = {n: probe_figures(_probe("k24lev", n)) for n, _ in K24}
    return f, max(f[n]["aggregate_4_streams_tok_s"] for n in ("llama-24-fit", "llama-24-best"))


def _k24_levers() -> list[str]:
    f, best4 = _k24()
    out = ["| point | decode d0 tok/s | after 8K | TTFT 30K s | 4 streams tok/s | 4 streams / llama.cpp's best |",
           "| --- | --- | --- | --- | --- | --- |"]
    for n, what in K24:
        x = f[n]
        out.append(f"| {n}: {what} | {x['decode_tok_s']:.1f} | {x['decode_tok_s_8k']:.1f} | {x['ttft_30k_s']:.2f} | "
                   f"{x['aggregate_4_streams_tok_s']:.1f} | {x['aggregate_4_streams_tok_s'] / best4:.2f}x |")
    return out


HOST_POINTS = (  # (folder, point, KT threads, THP): the kit's best 16 GiB point, one lever at a time, one machine
    ("kcores", "k16-wna16-t14", 14, "madvise"), ("kcores", "k16-wna16-t10", 10, "madvise"),
    ("kcores", "k16-wna16-t12", 12, "madvise"), ("kcores", "k16-wna16-t8", 8, "madvise"),
    ("thp-a", "k16-wna16-thp-always", 14, "always"), ("thp-b", "k16-wna16-thp-madvise", 14, "madvise"),
    ("thp-b", "k16-wna16-thp-always", 14, "always"),
)


def _crash(folder: str, point: str) -> str | None:
    """The server's fatal line and what its stack names, from the trimmed evidence beside the point."""
    ev = DIR / folder / f"{point}.evidence.txt"
    text = ev.read_text() if ev.exists() else ""
    if "Segmentation fault" not in text:
        return None
    return "a segfault" + (", libkineto's MemoryTraceLogger destructor in its stack: the profiler's cleanup"
                           if "MemoryTraceLogger" in text else "")


def _host_table() -> list[str]:
    out = ["| point | KT threads | THP | decode d0 tok/s (rounds) | after 8K | TTFT 30K s | 4 streams tok/s | "
           "profiled step ms (1 stream) | what happened |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for folder, point, threads, thp in HOST_POINTS:
        pr = _probe(folder, point)
        f = probe_figures(pr)
        rounds = [r["decode_tok_s"] for d in pr.get("decode", []) if d.get("streams") == 1 for r in d["requests"]]
        b = _budget(folder, point, 1)

        def num(x: float | None, d: int = 1) -> str:
            return f"{x:.{d}f}" if x else "-"
        crash = _crash(folder, point)
        what = (f"the server died in the third 4-stream round ({crash}); the TTFT points after it did not run"
                if crash else "")
        out.append(f"| {folder}/{point} | {threads} | {thp} | {num(f['decode_tok_s'])} "
                   f"({', '.join(num(r) for r in rounds)}) | {num(f['decode_tok_s_8k'])} | {num(f['ttft_30k_s'], 2)} | "
                   f"{num(f['aggregate_4_streams_tok_s'])} | {num(b and b['period_ms'])} | {what} |")
    return out


@cache
def _waits() -> dict[int, dict]:
    """kcores/waits.json's entry for each profiled server there, by KT threads (its probe names its trace)."""
    w = load(DIR / "kcores" / "waits.json") or {}
    traces = {t: next((p.get("trace") for p in _probe(f, n).get("profile", [])), None)
              for f, n, t, _ in HOST_POINTS if f == "kcores"}
    return {t: w[trace] for t, trace in traces.items() if trace in w}


def _waits_table() -> list[str]:
    out = ["| point | KT threads | wait per layer p10 / p50 / p90 / p99 us | waits over 600 us per step | the layer "
           "with the longest median wait | hand-off p50 us |", "| --- | --- | --- | --- | --- | --- |"]
    for f, n, t, _ in HOST_POINTS:
        x = _waits().get(t) if f == "kcores" else None
        if not x:
            continue
        q, per = x["wait_us"], x["per_layer_median_us"]
        worst = max(range(len(per)), key=per.__getitem__)
        out.append(f"| {n} | {t} | {q['p10']:.0f} / {q['p50']:.0f} / {q['p90']:.0f} / {q['p99']:.0f} | "
                   f"{x['waits_over_600us_per_step']} | layer {worst}: {per[worst]:.0f} us | {x['handoff_us_p50']:.0f} |")
    return out


BASE14 = tuple((f, n) for f, n, t, _ in HOST_POINTS if t == 14)     # the four 14-thread servers of that machine


def _four_rounds(folder: str, point: str) -> list[float | None]:
    """The aggregate rate of each 4-stream round (None: a round that failed)."""
    d = next((x for x in _probe(folder, point).get("decode", []) if x.get("streams") == 4), {})
    return [r.get("aggregate_tok_s") if r.get("aggregate_tok_s") and r.get("per_stream_tok_s") else None
            for r in d.get("rounds") or ([d] if d else [])]     # one round: the point is its round


def _paired(points: tuple[tuple[str, str], ...], bases: tuple[tuple[str, str], ...]) -> dict:
    """Servers against base servers of the same machine, prompt by prompt: the same seeded request on both (the prompt
    sets most of a request's rate: the prompt table), so the ratio is the lever's."""
    ratios, four = [], []
    for f, n in points:
        mine = _prompt_rates(f, n)
        for bf, bn in bases:
            base = _prompt_rates(bf, bn)
            ratios += [mine[k] / base[k] for k in mine if k in base]
            four += [a / b for a, b in zip(_four_rounds(f, n), _four_rounds(bf, bn), strict=False) if a and b]
    return {"single_pairs": len(ratios), "single_median": round(statistics.median(ratios), 3),
            "single_faster": round(sum(r > 1 for r in ratios) / len(ratios), 2),
            "four_pairs": len(four), "four_median": round(statistics.median(four), 3) if four else None}


@cache
def _paired_threads() -> dict[int, dict]:
    """Each thread count against the machine's 14-thread servers (_paired)."""
    return {t: _paired(((f, n),), BASE14) for f, n, t, _ in HOST_POINTS if f == "kcores" and t != 14}


@cache
def _paired_thp() -> dict:
    """THP "always" servers against the same machine's "madvise" ones at 14 threads (_paired)."""
    return _paired(tuple((f, n) for f, n, t, h in HOST_POINTS if h == "always"),
                   tuple((f, n) for f, n, t, h in HOST_POINTS if h == "madvise" and t == 14))


def _thp_peak_gib() -> float:
    """The highest AnonHugePages sampled while thp-b's points ran (thp-meminfo.txt, kB)."""
    kb = [int(line.split("AnonHugePages:")[1].split()[0]) for line in
          (DIR / "thp-b" / "thp-meminfo.txt").read_text().splitlines() if "AnonHugePages:" in line]
    return max(kb) / 2**20


# Every server of the kit's best 16 GiB point that ran 3 rounds of the same seeded prompts (moe_probe.py: round r of
# the decode point sends ids(512, 1000 + 7919 r), of an N-token TTFT point ids(N, 2000 + N + 7919 r)), and llama.cpp's
# two servers on those prompts (med3)
PROMPT_KIT = (("med3", "k16-wna16"), ("kcores", "k16-wna16-t14"), ("kcores", "k16-wna16-t10"),
              ("thp-a", "k16-wna16-thp-always"), ("thp-b", "k16-wna16-thp-madvise"), ("thp-b", "k16-wna16-thp-always"))
PROMPT_LLAMA = (("med3", "llama-16-best"), ("med3", "llama-16-fit"))
DEPTHS = (("depth 0", ("decode", 512)), ("after 8K", (8192,)), ("after 30K", (30000,)))


def _prompt_rates(folder: str, point: str) -> dict[tuple[str, str], float]:
    """(depth group, prompt) -> single-stream decode rate of that one request."""
    pr, out = _probe(folder, point), {}
    for d in pr.get("decode", []):
        if d.get("streams") == 1:
            for i, r in enumerate(d["requests"]):
                if r.get("decode_tok_s"):
                    out[("depth 0", f"128 tokens after 512, round {i + 1}")] = r["decode_tok_s"]
    for t in pr.get("ttft", []):
        group = {512: "depth 0", 8192: "after 8K", 30000: "after 30K"}.get(t["prompt_tokens"])
        for i, r in enumerate(t.get("rounds") or [t]):      # one round: the point is its round
            if group and r.get("decode_tok_s"):
                what = "64 tokens after the 512-token TTFT prompt" if t["prompt_tokens"] == 512 else "64 tokens"
                out[(group, f"{what}, round {i + 1}")] = r["decode_tok_s"]
    return out


def _relative(points: tuple[tuple[str, str], ...]) -> dict[tuple[str, str], list[float]]:
    """Each prompt's rate over its server's mean at that depth, one value per server."""
    rel: dict[tuple[str, str], list[float]] = {}
    for folder, point in points:
        rates = _prompt_rates(folder, point)
        for group, _ in DEPTHS:
            mine = {k: v for k, v in rates.items() if k[0] == group}
            mean = sum(mine.values()) / len(mine)
            for k, v in mine.items():
                rel.setdefault(k, []).append(v / mean)
    return rel


def _span(rel: dict[tuple[str, str], list[float]]) -> float:
    """The fastest prompt's median over the slowest's (_relative's values), at the depth where it is widest."""
    return max(max(m) / min(m) for m in ([statistics.median(v) for k, v in rel.items() if k[0] == group]
                                            for group, _ in DEPTHS))


def _prompt_table() -> tuple[list[str], dict]:
    kit, llama = _relative(PROMPT_KIT), _relative(PROMPT_LLAMA)
    out = ["| depth | prompt | kit: rate / its server's mean at that depth, median (min-max) over "
           f"{len(PROMPT_KIT)} servers | llama.cpp: the same over its {len(PROMPT_LLAMA)} servers |",
           "| --- | --- | --- | --- |"]
    for k in sorted(kit, key=lambda k: ([g for g, _ in DEPTHS].index(k[0]), k[1])):
        v, w = sorted(kit[k]), sorted(llama.get(k, []))
        out.append(f"| {k[0]} | {k[1]} | {statistics.median(v):.2f} ({v[0]:.2f}-{v[-1]:.2f}) | "
                   + (f"{statistics.median(w):.2f} ({w[0]:.2f}-{w[-1]:.2f})" if w else "-") + " |")

    def agree(rel: dict) -> float:   # share of the kit's servers on the same side of their mean as the median
        n = ok = 0
        for v in rel.values():
            side = statistics.median(v) >= 1
            ok += sum((x >= 1) == side for x in v)
            n += len(v)
        return ok / n
    return out, {"kit_span": _span(kit), "llama_span": _span(llama), "kit_agree": agree(kit)}


def render() -> str:
    lines = ["# Where a decoded token's time goes at 16 GiB: the kit and llama.cpp, measured (issue 18 item 2)", "",
             "Generated by benchmarks/gpu/moe_budget.py from moe-budget/ (H100 host, card emulated at 16 GiB by the "
             "shared ballast, random weights of Qwen3-Coder-30B-A3B's exact shape, SGLang 0.5.15.post1, kt-kernel "
             "0.5.1 amx build, 14 KT threads; 2026-11-27), and the preset as it now comes from "
             f"{NOW}/ (an H200 machine of the same host CPU, 2026-11-29).", "",
             "## The kit: one decode step from SGLang's own profiler", "",
             "Each decode step is one CUDA graph replay; the figures are medians over 32 steps of one request (1 "
             "stream) or four (4 streams), from the kernels' GPU timestamps (benchmarks/gpu/decode_profile.py). "
             "Hand-off: the GPU idle after a layer's hidden states reach the host, while kt-kernel's host node hands "
             "the CPU its experts; wait: the GPU idle before the CPU's result is copied back. Both are stalls over "
             "20 us; the rest of the idle time is shorter gaps between the step's kernels. Unprofiled step: the same "
             "server's decode in the probe right after, without the profiler (1000 / tok/s per stream). At 1 stream "
             "it is within 6 % of the profiled median on three of the four 2026-11-27 points; the preset's profiled request "
             "ran slower (33.0 against 24.9 ms), as did every 4-stream profile: the profiler's own cost on the host "
             "side, where the stalls are, is not separable from a slow request here, so the split is read as "
             "shares of the profiled step. The int4 decode's host function hands over and computes in one stall, "
             "so its hand-off column is 0 and its wait holds both.", "",
             "| point | streams | step ms (min-max over the steps) | unprofiled step ms | GPU kernels ms | hand-off ms | wait ms | other idle ms | stalls / step | "
             "GPU experts / dense GEMMs / attention / other kernels ms |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for folder, point, what in KIT_POINTS:
        for n in (1, 4):
            b = _budget(folder, point, n)
            if not b:
                continue
            c = b["kernel_time_by_name_pattern_ms"]
            other_idle = b["gpu_idle_in_graph_ms"] - b["stall_ms"] + b["outside_graph_ms"]
            lines.append(
                f"| {point}: {what} | {n} | {b['period_ms']:.1f} ({_spread(b)}) | {_unprofiled_ms(folder, point, n):.1f} | "
                f"{b['gpu_busy_ms']:.1f} | {b['handoff_stall_ms']:.1f} "
                f"| {b['wait_stall_ms']:.1f} | {other_idle:.1f} | {b['stalls_over_20us_per_step']:.0f} | "
                f"{c.get('experts (MoE GEMMs)', 0):.2f} / {c.get('dense GEMMs', 0):.2f} / {c.get('attention', 0):.2f} / "
                f"{c.get('other (norms, activations, routing, copies)', 0):.2f} |")
    sw, by_t = _llama_sweep()
    lines += ["", "Kernel times by name pattern (decode_profile.CATEGORIES) are summed per kernel, so kernels that "
              "overlap count twice; the GPU-kernels column is their union.", "",
              "## llama.cpp: its decode step with --n-cpu-moe swept (llama-bench, tg64, 14 threads, no ballast)", "",
              "No Nsight on the host, so llama.cpp's budget is a difference of measurements: the step with every "
              "expert on the GPU, and the cost of each layer whose experts the CPU computes (least squares over the "
              f"points; worst point {sw['max_fit_error_pct']} % off the line).", "",
              "| --n-cpu-moe | step ms | on the line ms |", "| --- | --- | --- |"]
    lines += [f"| {p['n_cpu_moe']} | {p['step_ms']:.2f} | {p['fit_ms']:.2f} |" for p in sw["points"]]
    now, now_t = _llama_sweep(NOW)
    lines += ["", "Every layer's experts on the CPU (--n-cpu-moe 48), by threads: " + ", ".join(
        f"{t} threads {ms:.1f} ms" for t, ms in sorted(by_t.items())) + ".", "",
              f"The same sweep on the H200 machine of the preset's int4 profile ({NOW}/): "
              f"{now['all_gpu_step_ms']:.2f} ms with every expert on the GPU + {now['per_cpu_layer_ms']:.3f} ms a CPU "
              f"layer (worst point {now['max_fit_error_pct']} % off the line); " + ", ".join(
                  f"--n-cpu-moe {p['n_cpu_moe']} {p['step_ms']:.2f} ms" for p in now["points"]) + "; every layer's "
              "experts on the CPU by threads: " + ", ".join(f"{t} threads {ms:.1f} ms" for t, ms in sorted(now_t.items()))
              + ".", "",
              "## kt-kernel's CPU-expert time per token at kernel level (no SGLang, no GPU; kt_decode_bench.py)", "",
              f"AMXINT8, 14 threads, all 48 layers: {_kt_ms('run1/kt-bench-g88.json'):.1f} ms with 88 of 128 experts per "
              f"layer on the GPU (run1's split), {_kt_ms('run1/kt-bench-g0.json'):.1f} ms with none (a whole CPU layer, 8 "
              "experts a token). By threads, 43 experts per layer on the GPU (med3):", "", *_threads_table(), "",
              "## The 16 GiB pair again, medians of three rounds (med3: another machine, both engines)", "",
              *_medians(), "", "## 24 GiB: SGLang's batch levers for the 4-stream goal (k24lev: one machine)", "",
              "Every GPTQ-Int4 expert on the GPU, no KT (the plan at 24 GiB); one round per figure. The goal is 2x "
              "llama-server's aggregate at 4 streams.", "", *_k24_levers(), "",
              "## The host side: KT threads and transparent huge pages (kcores, thp-a, thp-b: one machine)", "",
              "The kit's best 16 GiB point, one change at a time, every figure the median of 3 rounds (the rounds of "
              "the decode at depth 0 in brackets); each kcores point profiled 32 steps first (the profiled step "
              "column), the thp points not. kt-kernel pins its worker i to core i and its workers spin between "
              "layers, so fewer KT threads leave SGLang's scheduler, its CUDA host nodes and the tokenizer more "
              "cores.", "", *_host_table(), "",
              "Paired by prompt (each request against the same seeded request on the machine's four 14-thread "
              "servers: the prompt sets most of a request's rate, the section after next), the thread count's own "
              "effect:", "", "| KT threads | single-stream requests: pairs, median ratio to 14 threads, share faster "
              "| 4-stream rounds: pairs, median ratio |", "| --- | --- | --- |",
              *[f"| {t} | {x['single_pairs']}, {x['single_median']:.2f}x, {x['single_faster']:.0%} | "
                f"{x['four_pairs']}, " + (f"{x['four_median']:.2f}x" if x["four_median"] else "-") + " |"
                for t, x in sorted(_paired_threads().items(), reverse=True)], "",
              "Layer by layer in those profiles (kcores/waits.json): how long the GPU waited for the CPU's experts "
              "in each of the 48 layers of each of the 32 steps.", "", *_waits_table(), "",
              "## The prompt sets the pace: the same prompts on every server", "",
              "Each request's decode rate over the mean of its server's requests at the same depth. The probe sends "
              "the same seeded prompts in every session, so a prompt's rank can be followed across servers and "
              "machines.", "", *_prompt_table()[0], "",
              "## Dummy weights seeded by name: each layer routes on its own (seed, seed-mf90, seed-layers)", "",
              *_seeded_lines(), "", "## What it says", "", *_findings(sw),
              ""]
    return "\n".join(lines)


@cache
def _placement_shares(folder: str = "hot-rec") -> tuple[float, float, float, int]:
    """A recording's (experts 0..N-1, the N most-routed, uniform) shares of its routing, and N (88, the GPTQ split)."""
    counts = (load(DIR / folder / "expert-counts.json") or {})["logical_count"]
    n, layers, experts = 88, len(counts), len(counts[0])
    return (kp.gpu_share(counts, kp.trivial(layers, experts), n), kp.gpu_share(counts, kp.hot_first(counts), n),
            n / experts, n)


def _placement_check() -> dict[str, float]:
    """hotcheck: each server's mean first-token |log-probability difference| from the unplaced one."""
    c = load(DIR / "hotcheck" / "placement-check.json") or {}
    return {k.removesuffix(".probe.json"): v["first_token_logprob_abs_diff_mean"] for k, v in c.items()}


@cache
def _placement_speed() -> dict:
    """hot: the placement against the trivial map on the same machine, request by request (_paired), on the prompts it
    was recorded on and on the probe's own; the GPU's share of the recorded routing under each map."""
    trivial_share, placed_share, _, n = _placement_shares("hot")

    def rates(point: str) -> dict:
        f = probe_figures(_probe("hot", point))
        return {"decode_tok_s": f["decode_tok_s"], "aggregate_4_streams_tok_s": f["aggregate_4_streams_tok_s"]}
    return {"gpu_experts": n,
            "gpu_share_recorded": {"trivial": round(trivial_share, 3), "placed": round(placed_share, 3)},
            "recorded_prompts": _paired((("hot", "k16-wna16-hot-rec"),), (("hot", "k16-wna16-triv-rec"),)),
            "other_prompts": _paired((("hot", "k16-wna16-hot"),), (("hot", "k16-wna16-triv"),)),
            "medians": {p: rates(p) for p in ("k16-wna16-triv-rec", "k16-wna16-hot-rec", "k16-wna16-triv",
                                               "k16-wna16-hot")}}


def layer_routing(counts: list[list[float]]) -> dict:
    """How alike a recording's layers route: the Pearson correlation of each layer's count per expert with layer
    0's. SGLang's dummy weights seed every parameter alike (the kt_compat adapter's docstring), so every layer's
    router is the same; a trained model's layers, and dummy weights seeded by name, route apart."""
    corr = [statistics.correlation(counts[0], row) for row in counts[1:]]
    return {"layers": len(counts), "corr_with_layer0_median": round(statistics.median(corr), 3),
            "corr_with_layer0_min": round(min(corr), 3)}


@cache
def _layer_routing() -> dict:
    """hot's recorded counts (layer_routing)."""
    return layer_routing((load(DIR / "hot" / "expert-counts.json") or {})["logical_count"])


@cache
def _whole_layers_t10() -> dict:
    """layers-t10: whole layers at 10 KT threads, its 1-stream profile against the 14-thread one (run1), and its
    unprofiled round against the per-layer split at 10 threads on the same prompts (kcores, another machine)."""
    b10 = load(DIR / "layers-t10" / "k16-wna16-layers-t10-prof.s1-budget.json") or {}
    b14 = _budget("run1", "k16-wna16-layers-prof", 1)
    mine, split = _prompt_rates("layers-t10", "k16-wna16-layers-t10"), _prompt_rates("kcores", "k16-wna16-t10")
    ttft = {t["prompt_tokens"]: t["ttft_s"] for t in _probe("layers-t10", "k16-wna16-layers-t10")["ttft"]}
    ttft_split = {t["prompt_tokens"]: t["rounds"][0]["ttft_s"] for t in _probe("kcores", "k16-wna16-t10")["ttft"]}
    return {"cpu_layers": int(b10["stalls_over_20us_per_step"]),
            "wait_per_cpu_layer_ms": {"t14": round(b14["wait_stall_ms"] / b14["stalls_over_20us_per_step"], 2),
                                      "t10": round(b10["wait_stall_ms"] / b10["stalls_over_20us_per_step"], 2)},
            "step_ms": {"t14": b14["period_ms"], "t10": b10["period_ms"]},
            "single_stream_tok_s": {"whole_layers": [round(mine[k], 1) for k in sorted(mine)],
                                    "per_layer_split": [round(split[k], 1) for k in sorted(mine)]},
            "paired_with_split_t10": _paired((("layers-t10", "k16-wna16-layers-t10"),), (("kcores", "k16-wna16-t10"),)),
            "ttft_s": {str(n): {"whole_layers": round(ttft[n], 2), "per_layer_split": round(ttft_split[n], 2)}
                       for n in sorted(ttft)}}


# Dummy weights seeded by parameter name (the driver's DUMMY_BY_NAME=1: the kt_compat adapter's
# VRAMKIT_DUMMY_SEED_BY_NAME), so each layer routes on its own as a trained model's would; two machines, 2026-11-27
SEED_SPLIT = (("seed", "k16-wna16-seed"), ("seed-mf90", "k16-wna16-mf85"), ("seed-mf90", "k16-wna16-mf90"),
              ("seed-mf90", "k16-wna16-split-t10"), ("seed-layers", "k16-wna16-split-t10"),
              ("seed-layers", "k16-wna16-split-t12"))        # every per-layer split server among them
SEED_THREADS = (10, 12)                                        # seed-layers: whole layers and the split at each


def _gb(folder: str, point: str, key: str) -> float:
    """A point's figure in GB (10^9 bytes) from its JSON (moe_point.py)."""
    return round((load(DIR / folder / f"{point}.json") or {})[key] / 1e9, 2)


def _figures(folder: str, point: str) -> dict:
    """The probe's medians, rounded (probe_figures)."""
    return {k: round(v, 2) for k, v in probe_figures(_probe(folder, point)).items() if v is not None}


@cache
def _seeded() -> dict:
    """The kit's best 16 GiB point on dummy weights seeded by name: how alike its layers route, how much the prompt
    still sets the pace, llama.cpp's best beside it on the same machine, mem_fraction 0.90 against 0.85, and whole
    layers against the split at 10 and 12 KT threads (each lever paired by prompt on one machine, _paired)."""
    kit, llama = _figures("seed", "k16-wna16-seed"), _figures("seed", "llama-16-best")
    mf = {f: _figures("seed-mf90", f"k16-wna16-mf{f[2:]}") for f in ("0.85", "0.90")}
    ratios = ("decode_tok_s", "decode_tok_s_8k", "ttft_30k_s", "aggregate_4_streams_tok_s")
    return {
        "layer_routing": layer_routing((load(DIR / "seed" / "seedcheck-counts.json") or {})["logical_count"]),
        "prompt_span": {"kit_split": round(_span(_relative(SEED_SPLIT)), 2), "kit_servers": len(SEED_SPLIT),
                        "kit_whole_layers": round(_span(_relative(tuple(("seed-layers", f"k16-wna16-layers-t{t}")
                                                                          for t in SEED_THREADS))), 2),
                        "llamacpp": round(_span(_relative((("seed", "llama-16-best"),))), 2)},
        "against_llamacpp": {"kit": "k16-wna16-seed (mem_fraction 0.85, 12 KT threads)",
                             "llamacpp": "llama-16-best (--n-cpu-moe 11; --fit on not run here)",
                             "kit_figures": kit, "llamacpp_figures": llama,
                             "ratio": {k: round(kit[k] / llama[k], 2) for k in ratios},
                             "paired": _paired((("seed", "k16-wna16-seed"),), (("seed", "llama-16-best"),)),
                             # the preset's 0.90 on the same machine, later (seed-mf90 ran on it right after)
                             "ratio_090": {k: round(mf["0.90"][k] / llama[k], 2) for k in ratios},
                             "paired_090": _paired((("seed-mf90", "k16-wna16-mf90"),), (("seed", "llama-16-best"),))},
        "mem_fraction_090": {"paired_with_085": _paired((("seed-mf90", "k16-wna16-mf90"),),
                                                        (("seed-mf90", "k16-wna16-mf85"),)),
                             "peak_vram_gb": {f: _gb("seed-mf90", f"k16-wna16-mf{f[2:]}", "peak_vram_bytes")
                                              for f in ("0.85", "0.90")},
                             "figures": mf},
        "whole_layers": {str(t): {"paired_with_split": _paired((("seed-layers", f"k16-wna16-layers-t{t}"),),
                                                               (("seed-layers", f"k16-wna16-split-t{t}"),)),
                                  "figures": _figures("seed-layers", f"k16-wna16-layers-t{t}"),
                                  "split_figures": _figures("seed-layers", f"k16-wna16-split-t{t}"),
                                  "host_rss_peak_gb": _gb("seed-layers", f"k16-wna16-layers-t{t}", "host_rss_peak_bytes"),
                                  "split_host_rss_peak_gb": _gb("seed-layers", f"k16-wna16-split-t{t}",
                                                                "host_rss_peak_bytes")}
                         for t in SEED_THREADS},
        "split_12_vs_10_threads": _paired((("seed-layers", "k16-wna16-split-t12"),), (("seed-layers", "k16-wna16-split-t10"),)),
        "same_server_two_machines": {"seed-mf90": mf["0.90"]["decode_tok_s"],
                                     "seed-layers": _figures("seed-layers", "k16-wna16-split-t12")["decode_tok_s"]},
        "best16": _best16(),
        "marlin_whole_layers": {
            "paired_with_wna16": _paired((("marlin", "k16-marlin-layers-t12"),), (("marlin", "k16-wna16-layers-t12"),)),
            "figures": _figures("marlin", "k16-marlin-layers-t12"),
            "wna16_figures": _figures("marlin", "k16-wna16-layers-t12"),
            "peak_vram_gb": _gb("marlin", "k16-marlin-layers-t12", "peak_vram_bytes"),
            "wna16_peak_vram_gb": _gb("marlin", "k16-wna16-layers-t12", "peak_vram_bytes")},
    }


def _best16() -> dict:
    """A third machine (best16): the kit's best configuration (GPTQ whole layers, 12 threads, 0.90) beside both of
    llama.cpp's modes, its deferred-experts twin, and the preset's FP8 checkpoint with whole layers against the split."""
    f = "best16"
    kit = _figures(f, "k16-wna16-layers-t12")
    return {
        "kit_figures": kit,
        "llamacpp_figures": {m: _figures(f, f"llama-16-{m}") for m in ("fit", "best")},
        "paired_with_llamacpp": {m: _paired(((f, "k16-wna16-layers-t12"),), ((f, f"llama-16-{m}"),))
                                 for m in ("fit", "best")},
        "deferred_2": {"paired": _paired(((f, "k16-wna16-layers-t12-defer2"),), ((f, "k16-wna16-layers-t12"),)),
                       "figures": _figures(f, "k16-wna16-layers-t12-defer2")},
        "fp8": {"paired_whole_with_split": _paired(((f, "k16-int8-whole"),), ((f, "k16-int8-split"),)),
                "paired_split_with_whole": _paired(((f, "k16-int8-split"),), ((f, "k16-int8-whole"),)),
                "whole_figures": _figures(f, "k16-int8-whole"), "split_figures": _figures(f, "k16-int8-split"),
                "whole_host_rss_peak_gb": _gb(f, "k16-int8-whole", "host_rss_peak_bytes"),
                "split_host_rss_peak_gb": _gb(f, "k16-int8-split", "host_rss_peak_bytes"),
                "whole_peak_vram_gb": _gb(f, "k16-int8-whole", "peak_vram_bytes"),
                "split_peak_vram_gb": _gb(f, "k16-int8-split", "peak_vram_bytes")},
    }


def _pair_text(x: dict) -> str:
    """A lever's paired figures (_paired) in words."""
    return (f"{x['single_median']:.2f}x ({x['single_faster']:.0%} of {x['single_pairs']} requests faster), "
            f"4 streams {x['four_median']:.2f}x")


def _whole_layers_ran(folder: str, point: str) -> int:
    """The whole GPU layers a server ran, as the adapter's load line in its trimmed evidence says."""
    m = re.search(r"\((\d+) layers, no CPU round trip\)", (DIR / folder / f"{point}.evidence.txt").read_text())
    assert m, (folder, point)
    return int(m.group(1))


def _seeded_lines() -> list[str]:
    z = _seeded()
    lr, sp, al, mf, wl = (z["layer_routing"], z["prompt_span"], z["against_llamacpp"], z["mem_fraction_090"],
                          z["whole_layers"])

    rows = [("seed", "k16-wna16-seed", "per-layer split, mem_fraction 0.85, 12 threads"),
            ("seed", "llama-16-best", "llama.cpp --n-cpu-moe 11 (the same machine)"),
            ("seed-mf90", "k16-wna16-mf85", "per-layer split, 0.85, 12 threads"),
            ("seed-mf90", "k16-wna16-mf90", "per-layer split, 0.90, 12 threads"),
            ("seed-mf90", "k16-wna16-split-t10", "per-layer split, 0.85, 10 threads"),
            *[("seed-layers", f"k16-wna16-{k}-t{t}", f"{w}, 0.90, {t} threads") for t in SEED_THREADS
              for k, w in (("split", "per-layer split"), ("layers", "whole layers"))]]
    table = ["| folder | point | what | decode tok/s, depth 0 | after 8K | TTFT 30K s | 4 streams tok/s |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for f, n, what in rows:
        x = _figures(f, n)
        table.append(f"| {f} | {n} | {what} | {x['decode_tok_s']:.1f} | {x['decode_tok_s_8k']:.1f} | "
                     f"{x['ttft_30k_s']:.2f} | {x['aggregate_4_streams_tok_s']:.1f} |")
    two = z["same_server_two_machines"]
    med = _median_points()
    summary_medians = {k: med["k16-wna16"][k] / _llama_best(med, k, max) for k in ("decode_tok_s", "decode_tok_s_8k")}
    return [
        "Every kit point here ran with VRAMKIT_DUMMY_SEED_BY_NAME=1 (the driver's DUMMY_BY_NAME=1): each parameter "
        "drawn by its name, so each layer's router is its own. GPTQ-Int4 split on moe_wna16, AMXINT8 CPU experts, "
        "medians of 3 rounds; the kit's servers chose 12 KT threads unless the row says otherwise. mem_fraction 0.90 "
        "gives 96 GPU experts a layer (0.85: 88). Two machines of the same kind: seed (with llama.cpp) and seed-mf90 "
        "one after the other on the first (the second's setup found the first's KT layout in place), seed-layers on "
        "the second. Three points of seed's run ran without the ballast (a call without carry took the staged "
        "ballast.py away) and are not kept; the driver now stops when the ballast does not hold.", "",
        *table, "",
        f"- **Each layer routes on its own:** the recorded routing of each layer correlates "
        f"{lr['corr_with_layer0_median']:.2f} with layer 0's (median; lowest {lr['corr_with_layer0_min']:.2f}), "
        f"against {_layer_routing()['corr_with_layer0_median']:.2f} with SGLang's one seed (hot/).",
        f"- **The prompt no longer sets the pace:** the fastest prompt over the slowest at the same depth, medians over "
        f"{sp['kit_servers']} split servers on 2 machines, is {sp['kit_split']:.2f}x (whole layers "
        f"{sp['kit_whole_layers']:.2f}x, llama.cpp {sp['llamacpp']:.2f}x), against {_prompt_table()[1]['kit_span']:.2f}x "
        "with SGLang's one seed: that spread was the proxy's, not the split's.",
        f"- **Beside llama.cpp on the same machine** (its best --n-cpu-moe; --fit on did not run there): "
        f"{al['ratio']['decode_tok_s']:.2f}x at depth 0, {al['ratio']['decode_tok_s_8k']:.2f}x after 8K, "
        f"{al['ratio']['aggregate_4_streams_tok_s']:.2f}x at 4 streams, and a 30K prompt answered in "
        f"{al['ratio']['ttft_30k_s']:.2f}x llama.cpp's time at this --n-cpu-moe; paired by prompt "
        f"{_pair_text(al['paired'])}. The moe preset's new 0.90 (seed-mf90, the same machine right after): "
        f"{al['ratio_090']['decode_tok_s']:.2f}x at depth 0, {al['ratio_090']['decode_tok_s_8k']:.2f}x after 8K, "
        f"{al['ratio_090']['aggregate_4_streams_tok_s']:.2f}x at 4 streams, a 30K prompt in "
        f"{al['ratio_090']['ttft_30k_s']:.2f}x the time; paired {_pair_text(al['paired_090'])}. With one seed (med3, another "
        "machine, against llama.cpp's best of --fit and "
        f"--n-cpu-moe) the split was {summary_medians['decode_tok_s']:.2f}x / {summary_medians['decode_tok_s_8k']:.2f}x "
        "at depth 0 / 8K: routing as a trained model's does not close the gap.",
        f"- **mem_fraction 0.90** (one machine): {_pair_text(mf['paired_with_085'])} against 0.85; peak "
        f"{mf['peak_vram_gb']['0.90']:.2f} GB through the 30K prompt against {mf['peak_vram_gb']['0.85']:.2f} (the "
        f"card: 17.18 GB); TTFT for 30K {mf['figures']['0.90']['ttft_30k_s']:.2f} s against "
        f"{mf['figures']['0.85']['ttft_30k_s']:.2f}. The moe preset now takes 0.90.",
        *[f"- **Whole layers at {t} KT threads** (seed-layers, paired with the split at the same threads): "
          f"{_pair_text(w['paired_with_split'])}; {w['figures']['decode_tok_s']:.1f} against "
          f"{w['split_figures']['decode_tok_s']:.1f} tok/s at depth 0, TTFT for 30K {w['figures']['ttft_30k_s']:.2f} s "
          f"against {w['split_figures']['ttft_30k_s']:.2f}; host RSS at peak {w['host_rss_peak_gb']:.1f} GB against "
          f"{w['split_host_rss_peak_gb']:.1f} (kt-kernel holds only the CPU layers' experts)." for t, w in wl.items()],
        f"- **The split at 12 threads against 10** (seed-layers): {_pair_text(z['split_12_vs_10_threads'])}.",
        f"- **The machine moves the absolute rate:** the same server (0.90, 12 threads, split) decoded "
        f"{two['seed-mf90']:.1f} tok/s on seed-mf90 and {two['seed-layers']:.1f} on seed-layers at depth 0; only "
        "ratios from one machine are read as a lever's.",
        *_best16_lines(z["best16"]),
        *_marlin_lines(z["marlin_whole_layers"]),
    ]


def _marlin_lines(m: dict) -> list[str]:
    x, f, w = m["paired_with_wna16"], m["figures"], m["wna16_figures"]
    return [
        "", "A fourth machine (marlin: STEPS=\"setup kmarlin\"), every kit point seeded by name, medians of 3 rounds:",
        "",
        f"- **Whole layers on SGLang's marlin MoE** (`--moe-kernel marlin`; no layer is split, and a CPU layer skips "
        f"its GPU kernel in the adapter, so marlin never meets the masked ids that crash it in a split layer): "
        f"{x['single_median']:.2f}x moe_wna16's whole layers paired by prompt ({x['single_faster']:.0%} of "
        f"{x['single_pairs']} requests faster), {x['four_median']:.2f}x at 4 streams; {f['decode_tok_s']:.1f} against "
        f"{w['decode_tok_s']:.1f} tok/s at depth 0, {f['decode_tok_s_8k']:.1f} against {w['decode_tok_s_8k']:.1f} "
        f"after 8K, TTFT for 30K {f['ttft_30k_s']:.2f} s against {w['ttft_30k_s']:.2f}; GPU peak "
        f"{m['peak_vram_gb']:.2f} GB against {m['wna16_peak_vram_gb']:.2f} (the plan gave marlin "
        f"{_whole_layers_ran('marlin', 'k16-marlin-layers-t12')} GPU layers, moe_wna16 "
        f"{_whole_layers_ran('marlin', 'k16-wna16-layers-t12')}). The plan's --moe-kernel auto now picks marlin under whole layers. Not run beside llama.cpp "
        "(that machine's first call was lost): this machine decoded the moe_wna16 point at "
        f"{w['decode_tok_s']:.1f} tok/s where best16's did {_figures('best16', 'k16-wna16-layers-t12')['decode_tok_s']:.1f}.",
    ]


def _best16_lines(b: dict) -> list[str]:
    k, lf, lb, fp = b["kit_figures"], b["llamacpp_figures"]["fit"], b["llamacpp_figures"]["best"], b["fp8"]
    w, s = fp["whole_figures"], fp["split_figures"]
    return [
        "", "A third machine (best16: `run_moe_vs_llamacpp.sh` STEPS=\"setup best16 fp8-layers\", then \"ldefer\"), "
        "every kit point seeded by name, medians of 3 rounds:", "",
        f"- **The kit's best beside llama.cpp:** whole layers, GPTQ-Int4 on moe_wna16, AMXINT8, 12 threads, 0.90 "
        f"decoded {k['decode_tok_s']:.1f} tok/s at depth 0 and {k['decode_tok_s_8k']:.1f} after 8K against llama.cpp's "
        f"--fit {lf['decode_tok_s']:.1f} / {lf['decode_tok_s_8k']:.1f} and --n-cpu-moe 11 {lb['decode_tok_s']:.1f} / "
        f"{lb['decode_tok_s_8k']:.1f}; after a 30K prompt {k['decode_tok_s_30k']:.1f} against "
        f"{lf['decode_tok_s_30k']:.1f} / {lb['decode_tok_s_30k']:.1f}; TTFT for 30K {k['ttft_30k_s']:.2f} s against "
        f"{lf['ttft_30k_s']:.2f} / {lb['ttft_30k_s']:.2f}; 4 streams {k['aggregate_4_streams_tok_s']:.1f} against "
        f"{lf['aggregate_4_streams_tok_s']:.1f} / {lb['aggregate_4_streams_tok_s']:.1f} tok/s. Paired by prompt: "
        f"{_pair_text(b['paired_with_llamacpp']['fit'])} against --fit, {_pair_text(b['paired_with_llamacpp']['best'])} against "
        "--n-cpu-moe 11 (the pairs span depth 0, 8K and 30K; the table's depth-0 medians are lower).",
        f"- **2 deferred experts on it:** {_pair_text(b['deferred_2']['paired'])} (it changes the computation: "
        "kt-accuracy.md), so the comparison's headline stays without it.",
        f"- **The preset's FP8 checkpoint, whole layers against the split** (the plan's own --kt-gpu-layers auto; "
        f"AMXINT8, the plan's 12 threads): {_pair_text(fp['paired_whole_with_split'])}; {w['decode_tok_s']:.1f} against "
        f"{s['decode_tok_s']:.1f} tok/s at depth 0; TTFT for 8K {w['ttft_8k_s']:.2f} s against {s['ttft_8k_s']:.2f}, "
        f"for 30K {w['ttft_30k_s']:.2f} against {s['ttft_30k_s']:.2f}; host RSS at peak {fp['whole_host_rss_peak_gb']:.1f} "
        f"GB against {fp['split_host_rss_peak_gb']:.1f}; GPU peak {fp['whole_peak_vram_gb']:.2f} against "
        f"{fp['split_peak_vram_gb']:.2f} GB. The moe preset now places whole layers (kt_gpu_layers = \"auto\"): a "
        "little faster per token, slower to a first token, and 10 GB less host RAM, which is what lets a 32 GB "
        "desktop run it at all.",
    ]


def _findings(sw: dict) -> list[str]:
    b = _budget("run1", "k16-wna16-prof", 1)
    lay = _budget("run1", "k16-wna16-layers-prof", 1)
    pre = _budget("run2", "k16-int8", 1)
    ll_step, gpu0, ll_layer = _llama_step(sw)
    t = {m: _kt_ms(f"med3/kt-threads-{m}-t14.json") for m in ("AMXINT4", "AMXINT8")}
    kt88, kt0 = _kt_ms("run1/kt-bench-g88.json"), _kt_ms("run1/kt-bench-g0.json")
    per_layer_wait = lay["wait_stall_ms"] / lay["stalls_over_20us_per_step"]
    kit_kernels_over = b["gpu_busy_ms"] - gpu0
    closed = (b["period_ms"] - b["handoff_stall_ms"] - max(kit_kernels_over, 0)
              - b["wait_stall_ms"] * (1 - t["AMXINT4"] / t["AMXINT8"]))
    k24, l4 = _k24()
    host = {(f, n): probe_figures(_probe(f, n)) for f, n, _, _ in HOST_POINTS}
    d0 = {k: v["decode_tok_s"] for k, v in host.items()}
    by_t = {t: d0[(f, n)] for f, n, t, _ in HOST_POINTS if f == "kcores"}
    prof = {t: _budget(f, n, 1)["period_ms"] for f, n, t, _ in HOST_POINTS if f == "kcores"}
    thp = {(f, n): d0[(f, n)] for f, n, _, h in HOST_POINTS if f.startswith("thp")}
    _, ps = _prompt_table()
    pt = _paired_threads()
    long_waits = {t: x["waits_over_600us_per_step"] for t, x in _waits().items()}
    trivial_share, placed_share, uniform_share, n_gpu = _placement_shares()
    pc = _placement_check()
    ps_ = _placement_speed()
    ins, oos = ps_["recorded_prompts"], ps_["other_prompts"]
    w10 = _whole_layers_t10()
    lr = _layer_routing()
    z = _seeded()
    wl, sp = w10["single_stream_tok_s"]["whole_layers"], w10["single_stream_tok_s"]["per_layer_split"]

    def four(n: str) -> float:
        return k24[n]["aggregate_4_streams_tok_s"]
    return [
        f"- **24 GiB, 4 streams:** the plan's point served {four('k24-gptq-kv32'):.0f} tok/s against llama-server's "
        f"{l4:.0f} ({four('k24-gptq-kv32') / l4:.2f}x). torch.compile made decode slower "
        f"({k24['k24-gptq-tc']['decode_tok_s']:.0f} tok/s at depth 0 against {k24['k24-gptq-kv32']['decode_tok_s']:.0f}); "
        f"4 decode steps per scheduler round gave {four('k24-gptq-cds4'):.0f} at 4 streams "
        f"({four('k24-gptq-cds4') / l4:.2f}x) and {k24['k24-gptq-cds4']['decode_tok_s']:.0f} at depth 0, a few "
        "percent either way, inside one round's noise: neither is adopted, and the 2x goal is not met.",
        f"- **The kit's best point** spends {b['period_ms']:.1f} ms a token at batch 1: {b['gpu_busy_ms']:.1f} ms of "
        f"GPU kernels, {b['handoff_stall_ms']:.1f} ms handing {LAYERS} layers' experts to the CPU "
        f"({b['handoff_stall_ms'] / LAYERS * 1e3:.0f} us a layer), {b['wait_stall_ms']:.1f} ms waiting for them and "
        f"{_other_gaps_ms(b):.1f} ms in shorter gaps. The CPU computes its share of the experts in {kt88:.1f} ms at kernel level; "
        "the wait is shorter because the GPU's own experts run meanwhile.",
        f"- **llama.cpp at --n-cpu-moe 11** takes {ll_step:.1f} ms: {gpu0:.1f} ms with every expert on the GPU "
        f"(--n-cpu-moe 0) plus {ll_layer:.2f} ms for each of the 11 layers the CPU computes whole "
        f"(the sweep's slope: {sw['per_cpu_layer_ms']:.2f} ms).",
        f"- **The gap, term by term:** the kit's GPU kernels alone ({b['gpu_busy_ms']:.1f} ms, "
        f"{b['kernels_per_step']} kernels a step) take {kit_kernels_over:.1f} ms more than llama.cpp's whole all-GPU "
        f"step; its hand-off ({b['handoff_stall_ms']:.1f} ms) is a fixed cost of kt-kernel's host nodes that "
        f"llama.cpp does not pay; its wait ({b['wait_stall_ms']:.1f} ms) is the CPU reading ~{LAYERS} layers' "
        "share of the experts (AMXINT8: 8-bit, twice Q4_K's bytes) against llama.cpp's 11 whole layers.",
        f"- **Whole layers on this checkpoint, the stall found:** at 14 KT threads each of the 15 CPU layers of the "
        f"GPTQ checkpoint stalled {per_layer_wait:.1f} ms (one stall a layer, from the hand-off to the result), "
        f"against {kt0 / LAYERS:.2f} ms a layer for the same 8 experts at kernel level; with the FP8 checkpoint the "
        f"same adapter stalls {_budget('run2', 'k16-int8-layers-defer2', 1)['wait_stall_ms'] / 32:.2f} ms a CPU layer "
        f"(run2). At 10 threads (layers-t10, another machine) it stalled {w10['wait_per_cpu_layer_ms']['t10']:.2f} ms "
        f"and the step took {w10['step_ms']['t10']:.1f} ms against {w10['step_ms']['t14']:.1f}: kt-kernel's 14 "
        "spinning workers left SGLang's scheduler and host nodes too few cores, as the kcores profiles showed for "
        f"the split. Unprofiled, one round: {', '.join(f'{v:.1f}' for v in wl)} tok/s on three single-stream requests "
        f"against {', '.join(f'{v:.1f}' for v in sp)} for the per-layer split at 10 threads on the same prompts "
        f"(kcores; paired median {w10['paired_with_split_t10']['single_median']:.2f}x): whole layers make the rate "
        "independent of the prompt, as their CPU share does not depend on the routing, but not faster in the median; "
        f"4 streams {w10['paired_with_split_t10']['four_median']:.2f}x, TTFT after 8K "
        f"{w10['ttft_s']['8192']['whole_layers']:.2f} s against {w10['ttft_s']['8192']['per_layer_split']:.2f}. "
        "Those servers ran on one-seed dummy weights, whose prompts favoured the split; with each layer routing on "
        "its own (the section above, one machine, paired) whole layers decoded "
        f"{z['whole_layers']['10']['paired_with_split']['single_median']:.2f}x the split at 10 threads and "
        f"{z['whole_layers']['12']['paired_with_split']['single_median']:.2f}x at 12, 4 streams "
        f"{z['whole_layers']['10']['paired_with_split']['four_median']:.2f}x and "
        f"{z['whole_layers']['12']['paired_with_split']['four_median']:.2f}x, with a third of the host RAM. The plan "
        "now plans them on request (--kt-gpu-layers auto: the CPU layers' experts in host RAM, the estimate's own "
        "whole-layer term, kt-estimate.md) and offers them beside a split; the adapter warns when whole layers meet "
        "a float16 checkpoint with "
        "more KT threads than 12 of every 16 physical cores (14 stalled; 12 ran). The 4-stream profile's start "
        "segfaulted in the profiler (layers-t10/k16-wna16-layers-t10-prof.fail.txt), as two kcores servers did.",
        f"- **The preset (FP8 + AMXINT8)** spends {pre['period_ms']:.1f} ms: {pre['gpu_busy_ms']:.1f} ms of kernels, "
        f"{pre['handoff_stall_ms']:.1f} ms hand-off, {pre['wait_stall_ms']:.1f} ms wait: with 43 experts per layer "
        "on the GPU instead of 88 the CPU's share, not the GPU, sets its pace.",
        f"- **Step to step** the kit's token varies more than its median shows: {_spread(b)} ms over the 32 steps of "
        f"the best point, {_spread(pre)} ms for the preset, all of it in the two stalls (its GPU kernels take "
        f"{_spread(b, 'busy_us')} ms every step; per_step in the probe JSONs): some tokens wait several times as "
        "long for kt-kernel's host nodes and the CPU's experts, as they would if some tokens route more of their "
        "experts to the CPU (the prompt bullet below). Across requests that is the spread of about a fifth the "
        "single-request figures carry (moe-vs-llamacpp-levers.md), and why the tables here take medians.",
        "- **At 4 streams** the wait grows with the distinct experts four tokens touch on the CPU, while the GPU "
        "kernels add little (the table): the CPU side is what keeps the kit under 2x llama-server there.",
        f"- **Fewer KT threads, a little faster:** the medians over prompts barely differ (depth 0: "
        f"{', '.join(f'{t}: {v:.1f}' for t, v in by_t.items())} tok/s), but paired prompt by prompt against the "
        f"machine's 14-thread servers 12 threads decoded {pt[12]['single_median']:.2f}x ({pt[12]['single_faster']:.0%} "
        f"of {pt[12]['single_pairs']} requests faster; 4 streams {pt[12]['four_median']:.2f}x), 10 threads "
        f"{pt[10]['single_median']:.2f}x ({pt[10]['single_faster']:.0%} of {pt[10]['single_pairs']}; 4 streams "
        f"{pt[10]['four_median']:.2f}x), 8 threads {pt[8]['single_median']:.2f}x with 4 streams at "
        f"{pt[8]['four_median']:.2f}x. kt-kernel pins each worker to a core and spins it between layers; below 14 "
        "SGLang's scheduler, its CUDA host nodes and the tokenizer find free cores (the AMXINT8 kernel's own time "
        "barely changes from 10 to 14 threads, the kernel-level table). The plan now leaves a quarter of the "
        "physical cores, at least 2, to SGLang: 12 threads on this 16-core host (measured here only; the quarter "
        "elsewhere is an assumption). The profiled step is shorter below 14 too "
        f"({min(prof.values()):.1f}-{max(v for t, v in prof.items() if t < 14):.1f} ms against {prof[14]:.1f}): "
        f"layer by layer the 14-thread profile waited over 600 us {long_waits[14]} times a step (one layer's median "
        "wait 1.6 ms, the same layer in most steps), at "
        + ", ".join(f"{t} threads {v}" for t, v in long_waits.items() if t != 14) + " (the table above). Two servers "
        "(12 and 8 threads) died in their third 4-stream round with a segfault whose stack holds libkineto's "
        "MemoryTraceLogger destructor, the profiler's cleanup minutes after it ran; the unprofiled thp servers ran "
        "every round.",
        f"- **Transparent huge pages do not reach the experts here:** with \"always\" AnonHugePages peaked at "
        f"{_thp_peak_gib():.1f} GiB while the server held ~32 GiB (thp-meminfo.txt), and decode at depth 0 was "
        f"{', '.join(f'{v:.1f}' for v in thp.values())} tok/s (always, madvise, always); paired prompt by prompt "
        f"\"always\" decoded {_paired_thp()['single_median']:.2f}x \"madvise\" ({_paired_thp()['single_faster']:.0%} "
        f"of {_paired_thp()['single_pairs']} requests faster; 4 streams {_paired_thp()['four_median']:.2f}x): not "
        "adopted, and the "
        "kit does not change the host's setting.",
        f"- **The prompt sets the pace:** at the same depth the kit's fastest prompt decodes {ps['kit_span']:.2f}x its "
        f"slowest (medians over {len(PROMPT_KIT)} servers on 2 machines: med3's and kcores/thp's), and {ps['kit_agree']:.0%} of the figures "
        "sit on the same side of their server's mean as that prompt's median: the prompt, not the host, sets "
        f"most of the request-to-request spread. llama.cpp's span on the same prompts: {ps['llama_span']:.2f}x. "
        "Derived, not measured: SGLang keeps experts 0..N-1 of every layer on the GPU and sends the rest to the "
        "CPU, so a request whose tokens route to the CPU's 40 waits longer, while llama.cpp moves whole layers, "
        "whose CPU share does not depend on the routing. The estimate (kt-estimate.md) assumes uniform routing, "
        "the mean over prompts; its 512-token and 8K rows are different prompts. With dummy weights seeded by name "
        f"the span is {z['prompt_span']['kit_split']:.2f}x (the section above): the next bullet says why.",
        f"- **Part of that spread is the proxy's:** SGLang's dummy weights (--load-format dummy, every kit point here) "
        "seed every parameter with one seed, so every layer's router holds the same values, and the routing the "
        f"recorder counted in hot/ shows it: each layer's share per expert correlates {lr['corr_with_layer0_median']:.2f} "
        f"with layer 0's (median over the other {lr['layers'] - 1} layers; lowest {lr['corr_with_layer0_min']:.2f}). "
        "A token then goes to nearly the same experts in every layer, so its CPU share does not average out over 48 "
        "layers as a trained model's would; llama.cpp's random file draws each layer's router apart "
        "(tools/make_random_gguf.py). The mean over many tokens is the same either way (derived, not measured), a single request's rate and "
        "a placement's gain are not. The adapter's VRAMKIT_DUMMY_SEED_BY_NAME=1 seeds each parameter by its name "
        "(the fill checked with SGLang's own code: tests/integration/test_dummy_weights.py); with it each layer's "
        f"routing correlates {z['layer_routing']['corr_with_layer0_median']:.2f} with layer 0's and the prompt span "
        f"falls to {z['prompt_span']['kit_split']:.2f}x (the section above). The placement figures below ran on the "
        "one seed, so their gain and loss are likely wider than a trained model's.",
        "- **Which experts sit on the GPU** (hot-rec, one recorded request, in-sample): SGLang's experts "
        f"0..{n_gpu - 1} took {trivial_share:.1%} of its routing, the {n_gpu} most-routed of each layer "
        f"{placed_share:.1%} (uniform: {uniform_share:.1%}). `vramkit kt-placement` writes that map and `--kt-placement` "
        "runs it. The pinned SGLang's Qwen3-MoE maps the router's ids through --init-expert-location only on its "
        "DeepEP / two-batch-overlap paths, not the one-GPU forward the hybrid mode runs; the kt_compat adapter's "
        "dispatch maps them there (hotcheck, a random 4-layer FP8 checkpoint, every layer's experts reversed: the "
        f"first token's log-probability moved {pc['hc-placed']:.3f} on average with it, {pc['hc-g32']:.3f} when 32 "
        f"experts only change kernels with no map, {pc['hc-placed-sglang']:.3f} with the map and no dispatch; the "
        f"dispatch under the trivial map {pc['hc-trivial-dispatch']:.3f}).",
        f"- **The placement's speed** (hot, one machine, {ps_['gpu_experts']} GPU experts a layer, 3 rounds): "
        "recorded on 512-token prompts kept apart from the probe's, it gives the GPU "
        f"{ps_['gpu_share_recorded']['placed']:.1%} of that routing (trivial map "
        f"{ps_['gpu_share_recorded']['trivial']:.1%}). On the prompts it was recorded on it decoded "
        f"{ins['single_median']:.2f}x the trivial map ({ins['single_faster']:.0%} of {ins['single_pairs']} requests "
        f"faster; 4 streams {ins['four_median']:.2f}x); on the probe's own prompts, which it was not recorded on, "
        f"{oos['single_median']:.2f}x ({oos['single_faster']:.0%} of {oos['single_pairs']} faster; 4 streams "
        f"{oos['four_median']:.2f}x). On this random-weight proxy a placement pays only on the traffic it was "
        "recorded on, and costs elsewhere (why it is slower rather than even there is not isolated: the dispatch's "
        "own cost was not timed alone); whether a real coder's routing over one user's code is stable enough is not "
        "measured. `--kt-placement` stays opt-in, and the plan's note says this.",
        "- **What would close it** (derived from the rows above, not measured): the hand-off as a GPU-side signal "
        f"instead of a host node (kt-kernel) saves up to {b['handoff_stall_ms']:.1f} ms; GPU kernels at llama.cpp's "
        f"all-GPU step save up to {max(kit_kernels_over, 0):.1f} ms (fewer, fused kernels, marlin instead of "
        "moe_wna16 where SGLang lets it read the masked ids); CPU experts at 4 bits on AMX cut the wait by up to "
        f"{1 - t['AMXINT4'] / t['AMXINT8']:.0%} (AMXINT4 against AMXINT8 at kernel level, 14 threads, above; "
        "AMXINT4 is per-channel and lossy, and no kt-kernel release has an AMX kernel for the GPTQ files' group-128 "
        "int4, which would be lossless against them: kt-isa.md). Together "
        f"~{closed:.1f} ms a token against llama.cpp's {ll_step:.1f} ({ll_step / closed:.2f}x its "
        "decode rate): each of the three sits in kt-kernel or SGLang, none in the kit's plan.",
    ]


def summary() -> dict:
    """What README quotes: the kit's best 16 GiB step and llama.cpp's, split, and the medians' ratios."""
    b = _budget("run1", "k16-wna16-prof", 1)
    ll_step, gpu0, ll_layer = _llama_step(_llama_sweep()[0])
    med = _median_points()
    _, ps = _prompt_table()

    def ratio(key: str, pick) -> float:
        return round(med["k16-wna16"][key] / _llama_best(med, key, pick), 2)
    now_sw = _llama_sweep(NOW)[0]

    def now_budget(n: int) -> dict:
        nb = _budget(NOW, "k16-preset-int4-prof", n)
        assert nb is not None
        return {"step_ms": nb["period_ms"], "unprofiled_step_ms": round(_unprofiled_ms(NOW, "k16-preset-int4-prof", n)
                                                                          or 0, 2),
                "gpu_kernels_ms": nb["gpu_busy_ms"], "wait_ms": nb["wait_stall_ms"],
                "other_gaps_ms": round(_other_gaps_ms(nb), 3), "waits_per_step": nb["stalls_over_20us_per_step"]}
    return {
        "how": "benchmarks/gpu/moe_budget.py over benchmarks/results/gpu/moe-budget/ (measured 2026-11-27, H100 host, "
               f"card emulated at 16 GiB) and {NOW.removeprefix('../')}/ (the preset as it now comes, 2026-11-29, "
               "an H200 machine)",
        "kit_now": {"point": "k16-preset-int4-prof", "cpu_layers": 10, "one_stream": now_budget(1),
                    "four_streams": now_budget(4)},
        "llamacpp_now": {"all_gpu_step_ms": now_sw["all_gpu_step_ms"], "per_cpu_layer_ms": now_sw["per_cpu_layer_ms"],
                         "step_ms_n_cpu_moe_11": next(p["step_ms"] for p in now_sw["points"] if p["n_cpu_moe"] == 11)},
        "kit": {"point": "k16-wna16", "step_ms": b["period_ms"], "gpu_kernels_ms": b["gpu_busy_ms"],
                "handoff_ms": b["handoff_stall_ms"], "wait_ms": b["wait_stall_ms"],
                "other_gaps_ms": round(_other_gaps_ms(b), 3),
                "moe_layers": LAYERS},
        "llamacpp": {"n_cpu_moe": 11, "step_ms": ll_step, "all_gpu_step_ms": gpu0,
                     "per_cpu_layer_ms": round(ll_layer, 3)},
        "medians_of_3": {"decode_tok_s": ratio("decode_tok_s", max), "decode_tok_s_8k": ratio("decode_tok_s_8k", max),
                         "ttft_30k_s": ratio("ttft_30k_s", min),
                         "aggregate_4_streams_tok_s": ratio("aggregate_4_streams_tok_s", max)},
        "host_levers": {"decode_tok_s_by_kt_threads": {str(t): probe_figures(_probe(f, n))["decode_tok_s"]
                                                       for f, n, t, _ in HOST_POINTS if f == "kcores"},
                        "paired_with_14_threads": {str(t): x for t, x in sorted(_paired_threads().items(),
                                                                                 reverse=True)},
                        "decode_tok_s_thp_always": [probe_figures(_probe(f, n))["decode_tok_s"]
                                                    for f, n, _, h in HOST_POINTS if h == "always"],
                        "decode_tok_s_thp_madvise_same_machine": probe_figures(
                            _probe("thp-b", "k16-wna16-thp-madvise"))["decode_tok_s"],
                        "anon_huge_pages_max_gib": round(_thp_peak_gib(), 2), "thp_paired": _paired_thp()},
        "prompt_span": {"kit": round(ps["kit_span"], 2), "llamacpp": round(ps["llama_span"], 2),
                        "kit_same_side": round(ps["kit_agree"], 2), "kit_servers": len(PROMPT_KIT)},
        "placement_speed": _placement_speed(),
        "dummy_layer_routing": _layer_routing(),
        "whole_layers_t10": _whole_layers_t10(),
        "seeded": _seeded(),
    }


def main(argv: list[str]) -> int:
    if argv[:1] == ["pair"] and len(argv) == 4:      # a new step's points, before they join the report
        print(json.dumps(_paired(((argv[1], argv[2]),), ((argv[1], argv[3]),))))
        return 0
    if argv[:1] == ["layers"] and len(argv) == 2:
        print(json.dumps(layer_routing(json.loads(Path(argv[1]).read_text())["logical_count"])))
        return 0
    text, data = render(), json.dumps(summary(), indent=1) + "\n"
    if "--check" in argv:
        if OUT.read_text() != text or SUMMARY.read_text() != data:
            print(f"{OUT} or {SUMMARY.name} is stale: run python3 benchmarks/gpu/moe_budget.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    SUMMARY.write_text(data)
    print(OUT, SUMMARY)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
