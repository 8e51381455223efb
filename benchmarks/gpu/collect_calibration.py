"""Turn the GPU session's raw point files into benchmarks/calibration/<name>.json (one per configuration).

    python3 benchmarks/gpu/collect_calibration.py RAW_DIR [RAW_DIR ...]

RAW_DIR holds what calibrate_point.py wrote (<name>.json and/or <name>.server.log). A later directory's
<name>.json wins (a re-run). A point with only a server log (its JSON writer failed) keeps what the
log says (free memory, weights, KV tokens) and `peak_vram_bytes: null`: it was not measured.
The SGLang settings are read back from the log's own `server_args=ServerArgs(...)` line.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from vramkit.core import sglang_log

OUT = ROOT / "benchmarks" / "calibration"


def server_arg(text: str, name: str):
    m = re.search(rf"\b{name}=([^,)]+)", text)
    if not m:
        return None
    v = m.group(1).strip("'\"")
    return None if v == "None" else v


def main(dirs: list[str]) -> int:
    points: dict[str, dict] = {}
    logs: dict[str, str] = {}
    for d in map(Path, dirs):
        for log in d.glob("*.server.log"):
            logs[log.name.removesuffix(".server.log")] = log.read_text(errors="replace")
        for j in d.glob("*.json"):
            data = json.loads(j.read_text())
            if "measured" in data:
                points[data["name"]] = data
    for name, text in logs.items():
        if name not in points:
            fig = sglang_log.parse(text).values
            points[name] = {"name": name, "survived": "fired up" in text, "gpu_free_gib_at_start": fig.get("load_begin_avail"),
                            "measured": {"weights_bytes": int(fig["weights"] * 2**30), "kv_pool_tokens": fig["kv_tokens"],
                                         "peak_vram_bytes": None, "startup_avail_gib": fig.get("available_after_start"),
                                         "log_figures_gib": fig},
                            "note": "JSON writer failed on the GPU host; figures from the server log, peak not measured"}
    OUT.mkdir(parents=True, exist_ok=True)
    for name, p in sorted(points.items()):
        text = logs.get(name, "")
        model_path = server_arg(text, "model_path") or ""
        model = Path(model_path).name or p.get("model")
        rec = {
            "name": name,
            "model": p.get("model") or model,
            "gpu_free_gib_at_start": p["gpu_free_gib_at_start"],
            "emulated_budget_gib": p.get("emulated_budget_gib"),
            "mem_fraction_static": float(server_arg(text, "mem_fraction_static") or p.get("mem_fraction_static")),
            "kv_cache_dtype": server_arg(text, "kv_cache_dtype") or p.get("kv_cache_dtype"),
            "tp": int(server_arg(text, "tp_size") or p.get("tp") or 1),
            "cpu_offload_gb": int(server_arg(text, "cpu_offload_gb") or p.get("cpu_offload_gb") or 0),
            "chunked_prefill_size": int(server_arg(text, "chunked_prefill_size") or 0),
            "cuda_graph_max_bs_decode": int(server_arg(text, "cuda_graph_max_bs_decode") or 0),
            "max_running_requests": int(server_arg(text, "max_running_requests") or 0) or None,
            "context_length": int(server_arg(text, "context_length") or 0) or None,
            "hicache_size_gb": int(server_arg(text, "hicache_size") or 0),
            "moe_runner_backend": server_arg(text, "moe_runner_backend") or "auto",
            # the token embeddings in pinned host RAM: where the adapter's own log line says it moved them
            "kt_embed_host": "on" if sglang_log.EMBED_MOVED in text else "off",
            "survived": p.get("survived"),
            "start_s": p.get("start_s"),       # `vramkit up` wall time: plan, start, /health, warm-up
            "measured": p["measured"],
            "probe": p.get("probe"),
            "device": p.get("device", "NVIDIA H100 80GB HBM3"),
            "versions": p.get("versions", {"sglang": "0.5.15.post1"}),
            "date": p.get("date", "2026-11-22"),
            "source": "benchmarks/gpu/run_calibration.sh via calibrate_point.py (vramkit up --runtime native --load-format dummy)",
        }
        if "note" in p:
            rec["note"] = p["note"]
        (OUT / f"{name}.json").write_text(json.dumps(rec, indent=2, default=str) + "\n")
        print(name, rec["model"], rec["mem_fraction_static"], rec["kv_cache_dtype"], rec["measured"]["kv_pool_tokens"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
