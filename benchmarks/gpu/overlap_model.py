"""What CPU/GPU overlap could give the int4 preset at 4 streams (issue 18: 4 streams at 2x llama-server), derived from
one measured machine, not measured: a two-resource schedule of one decode step.

    python3 benchmarks/gpu/overlap_model.py [--out FILE]     # reads moe-vs-llamacpp-int4/r7/ and r7-prof/

Inputs, all from the committed run of the preset as it comes (38 whole GPU layers, 10 CPU layers, 12 threads):
  GPU time of a decode step by kernel kind at 1 and 4 streams (r7-prof/, SGLang's profiler), plus the step's other
      gaps; a micro-batch of b tokens takes the dense GEMMs, norms and gaps once (they read the same weights at any b),
      the GPU layers' experts by the distinct experts b tokens name, and attention and the rest linearly in b;
  the CPU kernel's call at b tokens: the kernel alone at 1 and 4 (r7/int4-bench.json, 12 threads) by distinct
      experts, times the server's slowdown (r7/'s log windows: a call in the server against alone), plus the
      hand-off's copies (r7-prof/handoffs.json).
A step is simulated as list scheduling on two resources, the GPU stream and the CPU pool (one call at a time): each
micro-batch runs its 48 layers in order; a GPU layer is GPU work; a CPU layer is its attention and routing on the GPU,
then the call on the CPU. Whenever a resource is free it takes the ready work of the micro-batch that has waited
longest. One micro-batch of 4 is the server as it runs (checked against the measured step); two of 2 is the overlap,
with the CPU layers first (the plan's placement now) or spread evenly among the GPU layers.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from moe_session import RESULTS, probe_figures  # noqa: E402

RUN = RESULTS / "moe-vs-llamacpp-int4"
LAYERS, CPU_LAYERS, EXPERTS, TOP_K = 48, 10, 128, 8
CALL_RE = re.compile(r"calls \d+-\d+: ([\d.]+) ms a call computing")


def distinct(tokens: int) -> float:
    """Experts `tokens` tokens name in a layer, each token's top-k drawn uniformly (kt_hybrid.distinct_expert_factor)."""
    return EXPERTS * (1 - (1 - TOP_K / EXPERTS) ** tokens)


def gpu_ms(kinds1: dict, kinds4: dict, gaps_ms: float, tokens: int) -> dict:
    """A micro-batch's GPU time by kind at `tokens`: dense GEMMs and gaps once, the experts by distinct experts,
    attention and the rest linearly between the measured 1 and 4."""
    def lin(k: str) -> float:
        return kinds1[k] + (kinds4[k] - kinds1[k]) * (tokens - 1) / 3
    e = "experts (MoE GEMMs)"
    experts = kinds1[e] + (kinds4[e] - kinds1[e]) * (distinct(tokens) - distinct(1)) / (distinct(4) - distinct(1))
    return {"dense": kinds1["dense GEMMs"], "gaps": gaps_ms, "experts": experts,
            "attention": lin("attention"), "other": lin("other (norms, activations, routing, copies)")}


def cpu_call_ms(alone1: float, alone4: float, slowdown: float, handoff_ms: float, tokens: int) -> float:
    """One CPU layer's call at `tokens` in the server: the kernel alone by distinct experts, times the server's
    slowdown, plus the hand-off's copies."""
    per = (alone4 - alone1) / (distinct(4) - distinct(1))
    return (alone1 + per * (distinct(tokens) - distinct(1))) * slowdown + handoff_ms


def schedule(micro: int, gpu_layer: float, gpu_in_cpu_layer: float, cpu_call: float, cpu_layers: set[int]) -> float:
    """The step's end (ms): `micro` micro-batches through LAYERS layers on one GPU stream and one CPU pool."""
    pos = [0] * micro                      # next layer of each micro-batch
    ready = [0.0] * micro                  # when its next piece of work may start
    phase = ["gpu"] * micro                # a CPU layer's GPU part first, then its call
    free = {"gpu": 0.0, "cpu": 0.0}
    while any(p < LAYERS for p in pos):
        # the resource that can start work soonest, and on it the micro-batch waiting longest
        best = None
        for m in range(micro):
            if pos[m] >= LAYERS:
                continue
            res = phase[m]
            start = max(ready[m], free[res])
            if best is None or (start, ready[m]) < (best[0], best[2]):
                best = (start, m, ready[m], res)
        start, m, _, res = best
        if res == "cpu":
            dur = cpu_call
        elif pos[m] in cpu_layers:
            dur = gpu_in_cpu_layer
        else:
            dur = gpu_layer
        end = start + dur
        free[res] = end
        ready[m] = end
        if res == "gpu" and pos[m] in cpu_layers:
            phase[m] = "cpu"
        else:
            phase[m] = "gpu"
            pos[m] += 1
    return max(ready)


def spread(n_cpu: int) -> set[int]:
    """n_cpu CPU layers spread evenly over LAYERS (one every LAYERS / n_cpu, from the first)."""
    return {round(i * LAYERS / n_cpu) for i in range(n_cpu)}


def server_calls(evidence: str, alone1: float, alone4: float) -> dict:
    """The server's log windows (a call's time) sorted into batch-1 and batch-4 windows by the kernel-alone times (a
    window within 0.9-1.5x either); windows that mix the two, and the warm-up's, fall outside both and are left out."""
    calls = [float(x) for x in CALL_RE.findall(evidence)]
    one = [c for c in calls if 0.9 * alone1 <= c <= 1.5 * alone1]
    four = [c for c in calls if 0.9 * alone4 <= c <= 1.5 * alone4]
    return {"batch1_ms": one, "batch4_ms": four}


def derive(run: Path = RUN) -> dict:
    prof = {p["streams"]: p["budget"]
            for p in json.loads((run / "r7-prof" / "k16-preset-int4-prof.probe.json").read_text())["profile"]}
    hand = {k.split("-")[1]: v for k, v in json.loads((run / "r7-prof" / "handoffs.json").read_text()).items()}
    bench = {(r["threads"], r["batch"]): r["ms_median"]
             for r in json.loads((run / "r7" / "int4-bench.json").read_text())["rows"]}
    alone1, alone4 = bench[12, 1], bench[12, 4]
    windows = server_calls((run / "r7" / "k16-preset-int4.evidence.txt").read_text(), alone1, alone4)
    slow = statistics.median([c / alone1 for c in windows["batch1_ms"]] + [c / alone4 for c in windows["batch4_ms"]])
    handoff = {n: sum(hand[f"s{n}"][k]["median"] for k in ("before_us", "copies_out_us", "copy_back_us", "after_us"))
               / 1e3 for n in (1, 4)}
    kinds1, kinds4 = prof[1]["kernel_time_by_name_pattern_ms"], prof[4]["kernel_time_by_name_pattern_ms"]
    gaps = statistics.fmean(prof[n]["period_ms"] - prof[n]["gpu_busy_ms"] - prof[n]["wait_stall_ms"] for n in (1, 4))
    gpu_layers = LAYERS - CPU_LAYERS
    out: dict = {"what": __doc__.split("\n\n")[0], "derived_not_measured": True,
                 "inputs": {"kernel_alone_ms": {"1": alone1, "4": alone4}, "server_slowdown": round(slow, 3),
                            "server_windows_ms": windows, "handoff_copies_ms": handoff,
                            "gpu_ms_by_kind": {"1": kinds1, "4": kinds4}, "other_gaps_ms": round(gaps, 3)},
                 "cases": []}
    first = set(range(CPU_LAYERS))
    for name, micro, tokens, layers in (("one batch of 4 (the server as it runs)", 1, 4, first),
                                        ("two micro-batches of 2, CPU layers first", 2, 2, first),
                                        ("two micro-batches of 2, CPU layers spread", 2, 2, spread(CPU_LAYERS))):
        g = gpu_ms(kinds1, kinds4, gaps, tokens)
        shared = g["dense"] + g["gaps"] + g["attention"] + g["other"]
        gpu_layer = shared / LAYERS + g["experts"] / gpu_layers
        call = cpu_call_ms(alone1, alone4, slow, handoff[1 if tokens == 1 else 4], tokens)
        step = schedule(micro, gpu_layer, shared / LAYERS, call, layers)
        out["cases"].append({"case": name, "micro_batches": micro, "tokens_each": tokens,
                             "cpu_layers": sorted(layers), "gpu_ms_per_micro_batch": round(sum(g.values()), 3),
                             "cpu_call_ms": round(call, 3), "step_ms": round(step, 2),
                             "tok_s": round(4 * 1e3 / step, 1)})
    # the one-batch case against the same machine's server: its 4-stream aggregate (r7/, median of 3 rounds) as a
    # step, and the profiled step (r7-prof/)
    agg = probe_figures(json.loads((run / "r7" / "k16-preset-int4.probe.json").read_text()))["aggregate_4_streams_tok_s"]
    out["measured"] = {"four_stream_tok_s": round(agg, 1), "four_stream_step_ms": round(4 * 1e3 / agg, 2),
                       "profiled_step_ms": prof[4]["period_ms"]}
    out["one_batch_model_error"] = round(out["cases"][0]["step_ms"] / out["measured"]["four_stream_step_ms"] - 1, 3)
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=RUN / "overlap-derived.json")
    args = ap.parse_args(argv)
    res = derive()
    args.out.write_text(json.dumps(res, indent=1) + "\n")
    for c in res["cases"]:
        print(f"{c['case']}: {c['step_ms']} ms a step, {c['tok_s']} tok/s")
    m = res["measured"]
    print(f"measured (r7/, 4 streams): {m['four_stream_step_ms']} ms a step ({m['four_stream_tok_s']} tok/s); "
          f"the one-batch case {res['one_batch_model_error']:+.1%} off it")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
