"""Compare what SGLang logged serving the random-weight GGUFs of run_gguf.sh with `vramkit plan --model X.gguf`.

    python3 benchmarks/gpu/gguf_report.py RUN_DIR [--out benchmarks/results/gpu/gguf-qwen2.json]

RUN_DIR holds run_gguf.sh's $OUT (gguf-<name>.json and .log). Each GGUF is written again here by the same writer
(tools/make_random_gguf.py: the shapes, types and sizes are deterministic), planned with the knobs run_gguf.sh
gave SGLang and the free memory SGLang saw at start ("Load weight begin. avail mem"), and compared: weights
(SGLang's "Load weight end ... mem usage") and KV tokens ("KV Cache is allocated ... #tokens").
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from vramkit.core import sglang_log  # noqa: E402

GIB = 1 << 30
# run_gguf.sh's SGLang flags, as the planner's knobs
KNOBS = ["--mem-fraction", "0.8", "--context", "32768", "--chunked-prefill", "2048", "--max-running", "64",
         "--cuda-graph-max-bs", "8", "--kv-dtype", "auto"]
SHAPES = {"qwen2.5-coder-7b-instruct-Q4_K_M": ("qwen2.5-coder-7b-instruct", "Q4_K_M"),
          "qwen2.5-0.5b-instruct-Q8_0": ("qwen2.5-0.5b-instruct", "Q8_0")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "gpu" / "gguf-qwen2.json")
    a = ap.parse_args(argv)
    points = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (model, layout) in SHAPES.items():
            meta_path, log_path = a.run_dir / f"gguf-{name}.json", a.run_dir / f"gguf-{name}.log"
            if not meta_path.is_file() or not log_path.is_file():
                continue
            meta = json.loads(meta_path.read_text())
            fig = sglang_log.parse(log_path.read_text(errors="replace")).values
            gguf = Path(tmp) / meta["file"]
            subprocess.run([sys.executable, str(ROOT / "tools" / "make_random_gguf.py"),
                            str(ROOT / "config" / "models" / model), str(gguf), "--type", layout],
                           check=True, capture_output=True)
            if gguf.stat().st_size != meta["file_bytes"]:
                raise SystemExit(f"{gguf.name}: {gguf.stat().st_size} bytes here, {meta['file_bytes']} there")
            point = {"name": name, "model_shape": model, "ggml_layout": layout, "file_bytes": meta["file_bytes"],
                     "served": meta["ready"] and bool(meta.get("output_ids")),
                     "output_ids": meta.get("output_ids"), "nvml_free_mib_at_start": meta["nvml_free_mib_at_start"],
                     "sglang_log": {k: fig.get(k) for k in ("load_begin_avail", "weights", "kv_tokens",
                                                            "max_total_num_tokens", "context_len",
                                                            "available_after_start")}}
            if "load_begin_avail" in fig and "weights" in fig and "kv_tokens" in fig:
                free = fig["load_begin_avail"]
                p = subprocess.run([sys.executable, "-m", "vramkit", "plan", "--json", "--model", str(gguf),
                                    "--gpu-free-gib", str(free), *KNOBS], capture_output=True, text=True, cwd=ROOT)
                plan = json.loads(p.stdout)
                w_meas, w_plan = fig["weights"] * GIB, plan["weights_bytes"]
                kv_meas, kv_plan = fig["kv_tokens"], plan["kv_pool_tokens"]
                point |= {"plan_command": f"vramkit plan --model {meta['file']} --gpu-free-gib {free} "
                                          + " ".join(KNOBS),
                          "planned": {"weights_gib": round(w_plan / GIB, 3), "kv_tokens": kv_plan,
                                      "context_len": plan["context_len"]},
                          "measured": {"weights_gib": fig["weights"], "kv_tokens": kv_meas,
                                       "context_len": fig.get("context_len")},
                          "error_pct": {"weights": round(100 * (w_plan - w_meas) / w_meas, 2),
                                        "kv_tokens": round(100 * (kv_plan - kv_meas) / kv_meas, 2)}}
            points.append(point)
    first = next((json.loads((a.run_dir / f"gguf-{n}.json").read_text()) for n in SHAPES
                  if (a.run_dir / f"gguf-{n}.json").is_file()), {})
    result = {"what": "SGLang 0.5.15.post1 serving random-weight GGUFs of catalogued dense Qwen2 shapes "
                      "(tools/make_random_gguf.py) with the planner's knobs, against `vramkit plan --model X.gguf` "
                      "(issue 19 item 1)",
              "device": (first.get("device") or "?") + ", memory held to 16 GiB free by ballast.py",
              "versions": first.get("versions"), "date": first.get("date"),
              "sglang_flags": "--skip-tokenizer-init --mem-fraction-static 0.8 --context-length 32768 "
                              "--kv-cache-dtype auto --chunked-prefill-size 2048 --max-running-requests 64 "
                              "--cuda-graph-max-bs-decode 8 --disable-prefill-cuda-graph --attention-backend triton "
                              "--sampling-backend pytorch --grammar-backend none",
              "driver": "benchmarks/gpu/run_gguf.sh", "points": points}
    a.out.write_text(json.dumps(result, indent=1) + "\n")
    for pt in points:
        print(pt["name"], pt.get("measured"), pt.get("planned"), pt.get("error_pct"), "served" if pt["served"] else
              "NOT served")
    return 0


if __name__ == "__main__":
    sys.exit(main())
