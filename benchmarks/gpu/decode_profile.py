"""One decode step, measured: where a token's time goes on the GPU (issue 18 item 2, the per-token budget).

    python3 benchmarks/gpu/decode_profile.py kineto TRACE.trace.json.gz   # SGLang's /start_profile trace
    python3 benchmarks/gpu/decode_profile.py sweep BENCH.json ...          # llama-bench points, --n-cpu-moe swept
    python3 benchmarks/gpu/decode_profile.py waits TRACE.trace.json.gz ... # every step's wait stalls, layer by layer
    python3 benchmarks/gpu/decode_profile.py handoffs TRACE.trace.json.gz ...  # each CPU layer's GPU gap, split

The kit's side is a PyTorch (kineto) trace of N decode steps that SGLang writes when asked (`moe_probe.py
--profile-steps`). Each decode step is one CUDA graph replay: its kernels carry the correlation id of the
`cudaGraphLaunch` that replayed them, so a step is measured as
  period        GPU time from one replay's first kernel to the next one's (one token at batch 1; SGLang's overlap
                scheduler launches a replay before the last one ends, so the CPU's launch-to-launch time is kept
                beside it, not used);
  graph span    first kernel start to last kernel end of that replay;
  GPU busy      the union of its kernel intervals (attention, GEMMs, the GPU's experts, routing, norms);
  GPU idle      span minus busy: the stream waiting inside the graph, as gaps over 20 us. With KT each layer shows
                two: after the hidden states' copy to the host ("hand-off": the host node that submits the CPU's
                experts) and before the result's copy back ("wait": the host node that waits for them);
  outside       period minus span: the GPU idle between replays (scheduler, sampling, the next launch).
llama.cpp has no such trace here (no Nsight on the host), so its budget comes from llama-bench's decode rate with
--n-cpu-moe swept: the step with every expert on the GPU, and the slope per layer whose experts the CPU computes
(fitted by least squares on the swept points; labelled as a difference of measurements, not a trace).
"""
from __future__ import annotations

import gzip
import json
import re
import statistics
import sys
from pathlib import Path

GAP_US = 20.0     # a stall, not launch spacing: back-to-back kernels in a graph sit < 5 us apart
KERNEL_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_NAMES = ("cudaGraphLaunch", "cuGraphLaunch", "cudaGraphLaunch_v10000")
CATEGORIES = (   # first match wins; by kernel name, so labelled "by name pattern" wherever printed
    ("experts (MoE GEMMs)", re.compile(r"moe|expert|wna16", re.I)),
    ("attention", re.compile(r"attn|attention|flash|_fwd_|decode_kernel|merge_state|rotary|rope", re.I)),
    ("dense GEMMs", re.compile(r"gemm|gemv|marlin|cutlass|sm90|nvjet|cublas|matmul|splitk", re.I)),
)


def load(path: Path) -> list[dict]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def category(name: str) -> str:
    return next((label for label, rx in CATEGORIES if rx.search(name)), "other (norms, activations, routing, copies)")


def replays(events: list[dict]) -> list[dict]:
    """Each CUDA graph replay of the trace, in launch order: its kernels' span, busy time, stalls by kind (the wait
    and hand-off stalls each also as the list of their lengths, in layer order), kernel time by category."""
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") in KERNEL_CATS]
    launches = sorted((e for e in events if e.get("ph") == "X" and e.get("name") in LAUNCH_NAMES),
                      key=lambda e: e["ts"])
    by_corr: dict[int, list[dict]] = {}
    for k in kernels:
        c = (k.get("args") or {}).get("correlation")
        if c is not None:
            by_corr.setdefault(c, []).append(k)
    steps = []
    for ln in launches:
        ks = by_corr.get((ln.get("args") or {}).get("correlation"), [])
        if not ks:
            continue
        # one pass in start order: the gaps between covered stretches (busy = span - gaps), each stall classed
        seq = sorted(ks, key=lambda k: (k["ts"], k.get("dur", 0.0)))
        end = seq[0]["ts"] + seq[0].get("dur", 0.0)
        gaps: list[float] = []
        kinds = {"hand-off": 0.0, "wait": 0.0, "other": 0.0}
        each: dict[str, list[float]] = {"hand-off": [], "wait": [], "other": []}
        for prev, k in zip(seq, seq[1:], strict=False):
            if k["ts"] > end:
                gaps.append(k["ts"] - end)
                if gaps[-1] > GAP_US:
                    kind = ("wait" if k["name"].startswith("Memcpy HtoD") else
                            "hand-off" if prev["name"].startswith("Memcpy DtoH") else "other")
                    kinds[kind] += gaps[-1]
                    each[kind].append(gaps[-1])
            end = max(end, k["ts"] + k.get("dur", 0.0))
        span = end - seq[0]["ts"]
        busy = span - sum(gaps)
        stalls = [g for g in gaps if g > GAP_US]
        cats: dict[str, float] = {}
        for k in ks:
            cats[category(k["name"])] = cats.get(category(k["name"]), 0.0) + k.get("dur", 0.0)
        steps.append({"launch_ts": ln["ts"], "first_ts": seq[0]["ts"], "span_us": span, "busy_us": busy,
                      "idle_us": span - busy, "stalls": len(stalls), "stall_us": sum(stalls),
                      "handoff_us": kinds["hand-off"], "wait_us": kinds["wait"], "other_stall_us": kinds["other"],
                      "kernels": len(ks), "by_category_us": cats, "names": [(k["name"], k.get("dur", 0.0)) for k in ks],
                      "wait_gaps_us": each["wait"], "handoff_gaps_us": each["hand-off"]})
    if not steps:
        raise ValueError("no CUDA graph replay with kernels in this trace (graphs off, or a trace without GPU "
                         "activity): nothing to budget")
    for a, b in zip(steps, steps[1:], strict=False):
        a["period_us"], a["launch_period_us"] = b["first_ts"] - a["first_ts"], b["launch_ts"] - a["launch_ts"]
    steps[-1]["period_us"] = steps[-1]["launch_period_us"] = None
    return steps


def waits(events: list[dict], bin_us: float = 25.0, long_us: float = 600.0) -> dict:
    """The wait stalls one by one: how long the GPU waited for the CPU's experts in each layer of each step. Their
    spread within a step is the layers' routing (how many of a token's experts the CPU computes there), long ones a
    late CPU worker; `per_layer_median_us` is each layer position's median over the steps."""
    steps = replays(events)
    all_w = sorted(g for s in steps for g in s["wait_gaps_us"])
    hand = [g for s in steps for g in s["handoff_gaps_us"]]
    if not all_w:
        raise ValueError("no wait stalls in this trace (no CPU experts: not a hybrid MoE decode)")

    def q(p: float) -> float:
        return round(all_w[int(p * (len(all_w) - 1))], 1)
    hist: dict[str, int] = {}
    for g in all_w:
        b = f"{min(int(g // bin_us) * bin_us, long_us):.0f}"
        hist[b] = hist.get(b, 0) + 1
    width = max(len(s["wait_gaps_us"]) for s in steps)
    return {"steps": len(steps), "waits_per_step": round(len(all_w) / len(steps), 1),
            "wait_us": {"p10": q(0.1), "p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "max": round(all_w[-1], 1)},
            f"waits_over_{long_us:.0f}us_per_step": round(sum(g >= long_us for g in all_w) / len(steps), 2),
            "handoff_us_p50": round(statistics.median(hand), 1) if hand else None,
            f"histogram_{bin_us:.0f}us_bins": dict(sorted(hist.items(), key=lambda kv: float(kv[0]))),
            "per_layer_median_us": [round(statistics.median(s["wait_gaps_us"][i] for s in steps
                                                            if len(s["wait_gaps_us"]) > i), 1) for i in range(width)]}


def _spread(vals: list[float]) -> dict:
    v = sorted(vals)
    return {"median": round(statistics.median(v), 1), "p10": round(v[len(v) // 10], 1),
            "p90": round(v[9 * len(v) // 10], 1)}


HANDOFF_PARTS = ("before_us", "copies_out_us", "host_us", "copy_back_us", "after_us", "total_us")


def handoffs(events: list[dict], min_bytes: int = 1024) -> dict:
    """Each CPU layer's stretch of GPU time without a kernel, split at the copies the adapter's host-function path
    (vramkit_host_experts.py) puts around its host node: the last kernel's end to the first copy to the host
    (before), the copies to the host (the hidden states, then the top-k ids and weights: copies_out), the first
    copy's group end to the copy back (host: the host node, which runs the CPU kernel's call), the copy back, and
    its end to the next kernel (after); microseconds, median and 10th / 90th percentiles over every hand-off of the
    trace. A hand-off starts at a copy to the host of at least `min_bytes` (the hidden states) after a kernel."""
    gpu = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") in KERNEL_CATS), key=lambda e: e["ts"])

    def is_copy(e: dict, way: str) -> bool:
        return e.get("cat") == "gpu_memcpy" and way in e.get("name", "")

    rows = []
    for i, e in enumerate(gpu):
        if not is_copy(e, "DtoH") or int(e.get("args", {}).get("bytes", 0)) < min_bytes:
            continue
        if i == 0 or is_copy(gpu[i - 1], "DtoH"):
            continue
        prev = next((k for k in reversed(gpu[:i]) if k.get("cat") == "kernel"), None)
        j = i
        while j + 1 < len(gpu) and is_copy(gpu[j + 1], "DtoH"):
            j += 1
        back = next((h for h in range(j + 1, len(gpu)) if is_copy(gpu[h], "HtoD")), None)
        if prev is None or back is None:
            continue
        nxt = next((k for k in gpu[back + 1:] if k.get("cat") == "kernel"), None)
        if nxt is None:
            continue
        out_end = gpu[j]["ts"] + gpu[j]["dur"]
        b = gpu[back]
        rows.append({"before_us": e["ts"] - (prev["ts"] + prev["dur"]), "copies_out_us": out_end - e["ts"],
                     "host_us": b["ts"] - out_end, "copy_back_us": b["dur"],
                     "after_us": nxt["ts"] - (b["ts"] + b["dur"]), "total_us": nxt["ts"] - (prev["ts"] + prev["dur"]),
                     "bytes": int(e["args"]["bytes"])})
    if not rows:
        return {"handoffs": 0}
    return {"handoffs": len(rows), "hidden_bytes": sorted({r["bytes"] for r in rows}),
            **{k: _spread([r[k] for r in rows]) for k in HANDOFF_PARTS}}


def kineto(events: list[dict]) -> dict:
    """The decode budget of a kineto trace whose steps are CUDA graph replays (module docstring)."""
    steps = replays(events)

    def med(key: str, rows: list[dict] = steps) -> float | None:
        vals = [r[key] for r in rows if r[key] is not None]
        return statistics.median(vals) if vals else None

    period = med("period_us")
    launch = med("launch_period_us")
    cats = sorted({c for s in steps for c in s["by_category_us"]})
    names: dict[str, float] = {}
    for s in steps:
        for n, d in s["names"]:
            names[n] = names.get(n, 0.0) + d
    top = sorted(names.items(), key=lambda kv: -kv[1])[:12]
    ms = 1e-3
    out = {
        "steps": len(steps), "kernels_per_step": int(med("kernels")),
        "period_ms": round(period * ms, 3) if period is not None else None,
        "graph_span_ms": round(med("span_us") * ms, 3), "gpu_busy_ms": round(med("busy_us") * ms, 3),
        "gpu_idle_in_graph_ms": round(med("idle_us") * ms, 3),
        "stalls_over_20us_per_step": med("stalls"), "stall_ms": round(med("stall_us") * ms, 3),
        "handoff_stall_ms": round(med("handoff_us") * ms, 3), "wait_stall_ms": round(med("wait_us") * ms, 3),
        "other_stall_ms": round(med("other_stall_us") * ms, 3),
        "launch_period_ms": round(launch * ms, 3) if launch is not None else None,
        "kernel_time_by_name_pattern_ms": {c: round(statistics.median(s["by_category_us"].get(c, 0.0) for s in steps) * ms, 3)
                                           for c in cats},
        "top_kernels_ms_per_step": [{"name": n[:120], "ms": round(d / len(steps) * ms, 4)} for n, d in top],
    }
    out["per_step"] = [{k: round(st[k] * ms, 3) if isinstance(st[k], float) else st[k]
                        for k in ("period_us", "span_us", "busy_us", "handoff_us", "wait_us", "other_stall_us", "stalls")
                        if st.get(k) is not None} for st in steps]
    out["handoffs"] = handoffs(events)
    if period is not None:
        for st in steps:
            st["outside_us"] = st["period_us"] - st["span_us"] if st["period_us"] is not None else None
        out["outside_graph_ms"] = round(med("outside_us") * ms, 3)
        out["decode_tok_s_from_period"] = round(1e6 / period, 1)
    return out


def sweep(rows: list[dict], threads: int | None = None) -> dict:
    """llama-bench decode points (tg at depth 0, one thread count: the most common unless given) at several
    --n-cpu-moe: step(n) = a + b * n by least squares."""
    tg = [r for r in rows if r.get("n_gen") and r.get("avg_ts") and not r.get("n_depth")]
    if threads is None and tg:
        threads = statistics.mode(int(r["n_threads"]) for r in tg)
    pts = sorted({(int(r["n_cpu_moe"]), 1e3 / float(r["avg_ts"])) for r in tg if int(r["n_threads"]) == threads})
    if len(pts) < 2:
        raise ValueError("need llama-bench decode points at two or more --n-cpu-moe values")
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    b = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x in xs)
    a = my - b * mx
    return {"threads": threads, "points": [{"n_cpu_moe": x, "step_ms": round(y, 3), "fit_ms": round(a + b * x, 3)} for x, y in pts],
            "all_gpu_step_ms": round(a, 3), "per_cpu_layer_ms": round(b, 4),
            "max_fit_error_pct": round(max(abs(a + b * x - y) / y for x, y in pts) * 100, 1)}


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("kineto", "sweep", "waits", "handoffs"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 64
    if argv[0] == "kineto":
        print(json.dumps(kineto(load(Path(argv[1]))), indent=1))
    elif argv[0] == "waits":
        print(json.dumps({Path(p).name: waits(load(Path(p))) for p in argv[1:]}, indent=1))
    elif argv[0] == "handoffs":
        print(json.dumps({Path(p).name: handoffs(load(Path(p))) for p in argv[1:]}, indent=1))
    else:
        rows = []
        for p in argv[1:]:
            d = json.loads(Path(p).read_text() or "[]")
            rows += [{**r, "n_cpu_moe": r.get("n_cpu_moe", 0), "n_threads": r.get("n_threads", 0)} for r in d]
        print(json.dumps(sweep(rows), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
