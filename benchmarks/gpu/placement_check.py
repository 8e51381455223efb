"""Does an expert placement keep the model's outputs? (issue 18, the placement lever; core/plan/kt_placement.py)

    python3 benchmarks/gpu/placement_check.py compare BASE.probe.json OTHER.probe.json [...]

Each probe JSON holds `greedy` (moe_probe.py --greedy-logprobs N): N seeded prompts decoded greedily, each generated
token's id and log-probability. A placement only moves experts between the GPU's and the CPU's slots, so with the CPU
experts read from the same checkpoint (--kt-method FP8 from the checkpoint folder) a correct one changes each
token's log-probability by kernel rounding alone; a wrong one (the router's ids indexing slots whose weights belong
to other experts) changes the tokens. `compare` says, per other server against the base: the share of prompts whose
tokens all agree, the share of generated positions that agree before the first divergence, the largest and mean
|log-probability difference| over the positions both decoded alike, and the same at the first generated token alone
(every server read the same prompt there: the cleanest single-forward comparison).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def greedy(probe: dict) -> dict[int, dict]:
    """seed -> {"tokens": [...], "logprobs": [...]} of a probe's greedy requests."""
    return {int(r["seed"]): r for r in probe.get("greedy", []) if r.get("tokens")}


def compare(base: dict, other: dict) -> dict:
    """The other server's greedy decodes against the base's, prompt by prompt (the module docstring)."""
    a, b = greedy(base), greedy(other)
    seeds = sorted(set(a) & set(b))
    if not seeds:
        raise ValueError("no greedy request in common (moe_probe.py --greedy-logprobs on both)")
    same_prompts, agree, total, diffs, first = 0, 0, 0, [], []
    for s in seeds:
        if a[s]["logprobs"] and b[s]["logprobs"] and None not in (a[s]["logprobs"][0], b[s]["logprobs"][0]):
            first.append(abs(a[s]["logprobs"][0] - b[s]["logprobs"][0]))
        ta, tb = a[s]["tokens"], b[s]["tokens"]
        n = min(len(ta), len(tb))
        k = next((i for i in range(n) if ta[i] != tb[i]), n)
        same_prompts += k == n == len(ta) == len(tb)
        agree += k
        total += max(len(ta), len(tb))
        diffs += [abs(x - y) for x, y in zip(a[s]["logprobs"][:k], b[s]["logprobs"][:k], strict=False)
                  if x is not None and y is not None]
    return {"prompts": len(seeds), "prompts_identical": round(same_prompts / len(seeds), 3),
            "positions_agreeing_before_divergence": round(agree / total, 3) if total else None,
            "logprob_abs_diff_max": round(max(diffs), 5) if diffs else None,
            "logprob_abs_diff_mean": round(sum(diffs) / len(diffs), 5) if diffs else None,
            "first_token_logprob_abs_diff_max": round(max(first), 5) if first else None,
            "first_token_logprob_abs_diff_mean": round(sum(first) / len(first), 5) if first else None}


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] != "compare":
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 64
    if not Path(argv[1]).exists():
        print(f"placement_check: no baseline {argv[1]} (its server did not run)", file=sys.stderr)
        return 66
    base = json.loads(Path(argv[1]).read_text())
    print(json.dumps({Path(p).name: compare(base, json.loads(Path(p).read_text())) if Path(p).exists() else None
                      for p in argv[2:]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
