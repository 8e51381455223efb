#!/usr/bin/env bash
# The int4 CPU-expert kernel alone at two revisions (issue 18): REV's services/sglang-kt/kt_compat/int4_experts.c
# ("before") against the working tree's ("after"), each build asked (ISAS: avx2, native), rounds taken in turn so a
# host's drift lands on both sides, then each (side, build, threads, batch)'s median over the rounds.
#   benchmarks/gpu/int4_ab.sh REV OUT [ROUNDS] [ISAS] [THREADS] [BATCHES]     (PY: the python with numpy and torch)
# REV may be a file instead: that source as "before" (staged where the tree has no .git, as on the GPU host)
# Writes OUT/{before,after}-{isa}-r{N}.json (int4_experts_bench.py's) and OUT/summary.json. A kernel-level figure:
# the server's decode is measured in a server run.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 REV OUT [ROUNDS] [ISAS] [THREADS] [BATCHES]" >&2; exit 2; }
rev=$1 out=$2 rounds=${3:-3} isas=${4:-avx2 native} threads=${5:-1,2} batches=${6:-1,4}
PY=${PY:-python3}
cd "$(dirname "$0")/../.."
old=$(mktemp --suffix=.c)
trap 'rm -f "$old"' EXIT
if [ -f "$rev" ]; then      # a file: that source as "before" (a tree without .git: the GPU host's copy)
  cp "$rev" "$old"; rev=$(basename "$rev")
else
  git show "$rev:services/sglang-kt/kt_compat/int4_experts.c" > "$old" \
    || { echo "$0: no int4_experts.c at $rev" >&2; exit 2; }
  rev=$(git rev-parse --short "$rev")     # the summary names the commit, not a name that moves (HEAD)
fi
mkdir -p "$out"
for r in $(seq 1 "$rounds"); do
  for isa in $isas; do
    for side in before after; do
      src=services/sglang-kt/kt_compat/int4_experts.c
      [ "$side" = before ] && src=$old
      "$PY" benchmarks/gpu/int4_experts_bench.py --isa "$isa" --threads "$threads" --batches "$batches" --layers 4 \
        --calls 120 --source "$src" --out "$out/$side-$isa-r$r.json" > /dev/null
    done
  done
done
"$PY" - "$out" "$rev" <<'PY'
import json, statistics, sys
from pathlib import Path
out, rev = Path(sys.argv[1]), sys.argv[2]
runs = {}
for f in sorted(out.glob("*-r*.json")):
    side = f.stem.split("-")[0]
    d = json.loads(f.read_text())
    for r in d["rows"]:
        runs.setdefault((side, d["isa"], r["threads"], r["batch"]), []).append(r["ms_median"])
rows = [{"side": s, "isa": i, "threads": t, "batch": b, "rounds": len(v), "ms_median_of_rounds": statistics.median(v)}
        for (s, i, t, b), v in sorted(runs.items())]
first = json.loads(next(out.glob("after-*-r1.json")).read_text())
json.dump({"before": rev, "cpu": first["cpu"], "cpus": first["cpus"], "date": first["date"], "rows": rows},
          open(out / "summary.json", "w"), indent=1)
for r in rows:
    print(json.dumps(r))
PY
