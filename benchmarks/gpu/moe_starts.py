"""The kit against llama.cpp over starts taken in turn (issue 18): each round a fresh start of the kit's point and of
each llama.cpp mode (run_moe_vs_llamacpp.sh STEPS="setup lint4ab": the NAME-sN points), each round's figures and its
kit / llama.cpp ratios, then over the rounds each engine's median and each ratio's median and worst.

Why: one machine's int4 preset, started again right after a first start, decoded 0.90x it (moe-vs-llamacpp-int4/
r5-again/), a spread of the order of the kit's margin over llama.cpp at depth 0 (1.08-1.10x on two machines). The
comparison's JSON sets one start of each engine side by side; here a round's two engines ran minutes apart, so a
machine's drift lands on both and a round's ratio is a paired figure.

    python3 benchmarks/gpu/moe_starts.py RES [--kit k16-preset-int4] [--llama llama-16-best,llama-16-fit] [--out STEM]

Writes STEM.json and STEM.md (default: RES/starts). A round whose kit or llama.cpp probes are missing is listed as
such and left out of the medians.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from moe_session import METRICS, fmt, llama_best, load, probe_figures  # noqa: E402

# each figure's kit / llama.cpp ratio and the goal it is held to (issue 18): at least, or at most (a time)
GOALS = {"decode_tok_s": (">=", 1.0), "decode_tok_s_8k": (">=", 1.0), "ttft_30k_s": ("<=", 1.0),
         "aggregate_4_streams_tok_s": (">=", 2.0)}


def round_numbers(res: Path, kit: str) -> list[int]:
    """The rounds N with a NAME-sN probe of the kit's point, in order."""
    out = []
    for f in res.glob(f"{kit}-s*.probe.json"):
        tail = f.name[len(kit) + 2:-len(".probe.json")]
        if tail.isdigit():
            out.append(int(tail))
    return sorted(out)


def one_round(res: Path, kit: str, llamas: list[str], n: int) -> dict:
    """Round n: the kit's figures, llama.cpp's best per figure over its modes (and which), the ratios."""
    k = load(res / f"{kit}-s{n}.probe.json")
    modes = {m: probe_figures(p) for m in llamas if isinstance(p := load(res / f"{m}-s{n}.probe.json"), dict)}
    row: dict = {"round": n, "kit": probe_figures(k) if isinstance(k, dict) else None}
    missing = [what for what, gone in (("the kit's probe", row["kit"] is None), ("llama.cpp's probes", not modes))
               if gone]
    if missing:
        row["missing"] = " and ".join(missing)
        return row
    best, which = llama_best(modes)
    row["llamacpp"] = {key: best[key] for key in METRICS}
    row["llamacpp_mode"] = {key: which[key] for key in METRICS if key in which}
    row["ratios"] = {key: round(row["kit"][key] / best[key], 3) if row["kit"][key] and best[key] else None
                     for key in METRICS}
    return row


def summarize(res: Path, kit: str, llamas: list[str]) -> dict:
    rows = [one_round(res, kit, llamas, n) for n in round_numbers(res, kit)]
    full = [r for r in rows if "ratios" in r]
    summary: dict = {}
    for key, (way, goal) in GOALS.items():
        ratios = [r["ratios"][key] for r in full if r["ratios"][key] is not None]
        kits = [r["kit"][key] for r in full if r["kit"][key] is not None]
        lls = [r["llamacpp"][key] for r in full if r["llamacpp"][key] is not None]
        if not ratios:
            continue
        worst = min(ratios) if way == ">=" else max(ratios)
        summary[key] = {"kit_median": statistics.median(kits), "llamacpp_median": statistics.median(lls),
                        "ratio_median": statistics.median(ratios), "ratio_worst": worst, "goal": f"{way} {goal}x",
                        "rounds_meeting_goal": sum((x >= goal) if way == ">=" else (x <= goal) for x in ratios),
                        "rounds": len(ratios)}
    return {"what": __doc__.split("\n\n")[0], "res": res.name, "kit": kit, "llamacpp_modes": llamas,
            "rounds": rows, "summary": summary}


def markdown(d: dict) -> str:
    out = [f"# {d['kit']} against llama.cpp, starts taken in turn ({len(d['rounds'])} rounds)", "",
           d["what"], "", "| figure | kit, median | llama.cpp, median | kit / llama.cpp, median | worst round | "
           "rounds meeting the goal |", "| --- | --- | --- | --- | --- | --- |"]
    for key, s in d["summary"].items():
        out.append(f"| {key} | {fmt(s['kit_median'])} | {fmt(s['llamacpp_median'])} | {s['ratio_median']:.2f}x | "
                   f"{s['ratio_worst']:.2f}x | {s['rounds_meeting_goal']} of {s['rounds']} ({s['goal']}) |")
    out += ["", "| round | " + " | ".join(METRICS) + " |", "| --- |" + " --- |" * len(METRICS)]
    for r in d["rounds"]:
        if "ratios" not in r:
            out.append(f"| {r['round']} | missing: {r['missing']} |" + " |" * (len(METRICS) - 1))
            continue
        out.append(f"| {r['round']} | " + " | ".join(
            f"{fmt(r['kit'][k])} / {fmt(r['llamacpp'][k])} ({r['ratios'][k]:.2f}x)" if r["ratios"][k] else "-"
            for k in METRICS) + " |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("res", type=Path)
    ap.add_argument("--kit", default="k16-preset-int4")
    ap.add_argument("--llama", default="llama-16-best,llama-16-fit")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    if not a.res.is_dir():
        print(f"moe_starts: {a.res} is not a folder of a session's points", file=sys.stderr)
        return 2
    d = summarize(a.res, a.kit, [m for m in a.llama.split(",") if m])
    if not d["rounds"]:
        print(f"moe_starts: no {a.kit}-sN.probe.json in {a.res} (STEPS=\"setup lint4ab\" writes them)", file=sys.stderr)
        return 3
    stem = a.out or a.res / "starts"
    stem.with_suffix(".json").write_text(json.dumps(d, indent=1) + "\n")
    stem.with_suffix(".md").write_text(markdown(d))
    print(markdown(d))
    return 0


if __name__ == "__main__":
    sys.exit(main())
