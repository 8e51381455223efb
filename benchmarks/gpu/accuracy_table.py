"""The planner against every committed calibration point, as the README's model-family accuracy table.

    python3 benchmarks/gpu/accuracy_table.py            # markdown: worst error per family, then one row per point
    python3 benchmarks/gpu/accuracy_table.py --check    # exit 1 when README.md's table is stale

Each row: the point's model family, the card it emulated, and planner / SGLang for the weights ("Load
weight end ... mem usage"), the KV pool (tokens) and the peak (NVML). The same `_plan` as
tests/unit/test_calibration.py, so the table and the CI check cannot disagree.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "unit"))

from test_calibration import POINTS, _plan

from vramkit import catalog

BEGIN, END = "<!-- models-accuracy -->", "<!-- /models-accuracy -->"


def _model(d: dict):
    return catalog.model(str(ROOT / d["model"]) if (ROOT / d["model"]).is_dir() else d["model"])


def _card(d: dict) -> str:
    b = d.get("emulated_budget_gib") or 0
    return f"{b:g} GB" if b else "whole H100"


def _pct(pred: float, meas: float) -> str:
    return f"{100 * (pred - meas) / meas:+.2f} %"


def _kind(m) -> str:
    return m.family + (f", {m.quantization.method}" if m.quantization else "")


def _worst(errors: list[float]) -> str:
    e = max(errors, key=abs)
    return f"{100 * e:+.2f} %"


def rows() -> list[str]:
    families: dict[str, tuple[list[float], list[float], list[float]]] = {}   # weights, KV, peak errors
    out = ["| point | family | card | weights GiB: planner / SGLang | KV tokens: planner / SGLang | "
           "peak GiB: planner / NVML |", "| --- | --- | --- | --- | --- | --- |"]
    for path in POINTS:
        d = json.loads(path.read_text())
        m, p, meas = _model(d), _plan(d), d["measured"]
        kind = _kind(m)
        family = kind + (f", {d['cpu_offload_gb']} GiB offloaded" if d.get("cpu_offload_gb") else "")
        w, kv, pk = meas["weights_bytes"], meas["kv_pool_tokens"], meas["peak_vram_bytes"]
        w_e, kv_e, pk_e = families.setdefault(kind, ([], [], []))
        w_e.append((p.weights_bytes - w) / w)
        kv_e.append((p.kv_pool_tokens - kv) / kv)
        if pk:
            pk_e.append((p.peak_vram_bytes - pk) / pk)
        peak = (f"{p.peak_vram_bytes / 2**30:.2f} / {pk / 2**30:.2f} ({_pct(p.peak_vram_bytes, pk)})" if pk
                else "not measured")
        out.append(f"| {path.stem} | {family} | {_card(d)} | {p.weights_bytes / 2**30:.2f} / {w / 2**30:.2f} "
                   f"({_pct(p.weights_bytes, w)}) | {p.kv_pool_tokens:,} / {kv:,} ({_pct(p.kv_pool_tokens, kv)}) "
                   f"| {peak} |")
    summary = ["| family | points | worst weights error | worst KV pool error | worst peak error |",
               "| --- | --- | --- | --- | --- |"]
    for kind, (w_e, kv_e, pk_e) in sorted(families.items()):
        summary.append(f"| {kind} | {len(w_e)} | {_worst(w_e)} | {_worst(kv_e)} | "
                       f"{_worst(pk_e) if pk_e else 'not measured'} |")
    # catalogued families no point ran: derived from SGLang's source, and said so
    for kind in sorted({_kind(m) for m in catalog.models().values()} - set(families)):
        summary.append(f"| {kind} | 0 | derived from source, not measured | | |")
    return summary + [""] + out


def main(argv: list[str]) -> int:
    table = "\n".join(rows())
    if "--check" in argv:
        text = (ROOT / "README.md").read_text()
        current = text.split(BEGIN, 1)[1].split(END, 1)[0].strip() if BEGIN in text else ""
        if current != table:
            print("README.md's model accuracy table is stale: run benchmarks/gpu/accuracy_table.py --write")
            return 1
        return 0
    if "--write" in argv:
        readme = ROOT / "README.md"
        text = readme.read_text()
        head, rest = text.split(BEGIN, 1)
        readme.write_text(f"{head}{BEGIN}\n{table}\n{END}{rest.split(END, 1)[1]}")
        return 0
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
