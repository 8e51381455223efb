"""`vramkit vram-safe`: is GPU memory in use under the threshold? For scripts, CI and monitoring.

Exit codes follow the monitoring-plugin convention (Nagios, Icinga, Zabbix and friends read them as is):
  0 OK        every chosen GPU at or under its warn line (3 % under the threshold)
  1 WARNING   over the warn line but at or under the threshold: less than 3 % headroom left
  2 CRITICAL  over the threshold on at least one GPU
  3 UNKNOWN   cannot tell: no NVML, no driver, no GPU, a GPU unreadable or lost (and none over)
  64          bad arguments (a typo, --threshold -5%)
  65          a malformed run-state record (its budget or GPU list); says which
Call `vramkit vram-safe` from scripts, not `make vram-safe`: make turns every failure into exit 2.
One line on stdout says which, and what it read: "in use" is NVML's total - free, which counts
driver-reserved memory (nvidia-smi's memory.used does not).

Threshold: --threshold 12GiB or 75%; default the running preset's planned budget
(vram_budget_bytes in the launcher's run-state), else 75 % of each GPU.
"""
from __future__ import annotations

import argparse
import json

from vramkit.adapters import nvml, state
from vramkit.core.gpu import vram
from vramkit.errors import Exit, VramkitError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("vram-safe", help="exit 0 OK, 1 WARNING (near the threshold), 2 CRITICAL (over), 3 UNKNOWN",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threshold", default=None,
                   help="12GiB, 15.5GB or 75%% (default: running preset's budget, else 75%%)")
    p.add_argument("--gpu", default="all", help="GPU index or 'all' (default all)")
    p.add_argument("--json", action="store_true", help="one JSON object instead of the line")
    p.set_defaults(func=run)


def resolve_thresholds(text: str | None) -> dict[int | None, vram.Threshold]:
    if text:
        try:
            return {None: vram.parse_threshold(text)}
        except ValueError as e:
            raise VramkitError(f"--threshold: {e}", "write e.g. 12GiB or 75%", Exit.BAD_INPUT) from None
    try:
        budgets = vram.budget_thresholds(state.read_running())
    except ValueError as e:
        raise VramkitError(str(e), f"fix or remove it in {state.state_dir()} (`vramkit status` lists what runs), "
                                   "or pass --threshold", Exit.BAD_FILE) from None
    if budgets:
        return budgets
    return {None: vram.Threshold(fraction=vram.DEFAULT_GUARD_FRACTION,
                                 source="default; no running preset recorded a budget")}


def run(args: argparse.Namespace) -> int:
    if args.gpu == "all":
        gpu = None
    else:
        try:
            gpu = int(args.gpu)
        except ValueError:
            raise VramkitError(f"--gpu {args.gpu!r} is not an index", "use --gpu 0 or --gpu all",
                               Exit.BAD_INPUT) from None
    thresholds = resolve_thresholds(args.threshold)
    result = vram.vram_safe(nvml.read_snapshot(with_processes=False), thresholds, gpu)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(result.line)
    return int(result.code)
