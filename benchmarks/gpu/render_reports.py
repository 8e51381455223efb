"""Re-render the plots and A/B tables of the committed GPU bench results (no GPU, no server needed).

    .venv/bin/python benchmarks/gpu/render_reports.py [RESULTS_DIR]

The JSONs in benchmarks/results/gpu/ were written by `vramkit bench --no-plots` on the GPU host; this
draws what that skipped, with the bench package's own code: <run>-<suite>.png beside each run, and the
two A/B comparisons through `vramkit bench --compare`:
  compare-hicache.md/.png  the multi-turn suite with the host cache off vs on (same seed, same 6 sessions)
  compare-presets.md/.png  the baseline preset vs the optimized one
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from vramkit import cli
from vramkit.bench.report import write_plots

RESULTS = Path(__file__).resolve().parents[1] / "results" / "gpu"
RUNS = ("optimized-16g", "baseline-16g", "128k-16g")
COMPARISONS = {                       # output name -> (baseline run, other run)
    "compare-hicache": ("hicache-off-16g", "optimized-16g"),
    "compare-presets": ("baseline-16g", "optimized-16g"),
    "moe-16g-compare": ("moe-16g", "moe-16g-int4"),   # issue 12: FP8 vs AMXINT4 CPU experts (the moe preset)
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    results = Path(argv[0]) if argv else RESULTS
    for run in RUNS:
        result = json.loads((results / f"{run}.json").read_text())
        written = write_plots(result, results / run)
        if not written:   # the plots draw context, concurrency and multi-turn suites only
            print(f"{run}: no suite with a plot (ran: {', '.join(result['summary'])})")
        for path in written:
            print(f"wrote {path}")
    for name, runs in COMPARISONS.items():
        code = cli.main(["bench", "--compare", *(str(results / f"{r}.json") for r in runs),
                         "--out", str(results / f"{name}.md")])
        if code:
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
