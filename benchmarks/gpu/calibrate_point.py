"""One calibration point on the GPU host, end to end through the kit's own launcher.

    python3 benchmarks/gpu/calibrate_point.py --name NAME --model MODEL --budget-gib 16 --out DIR \
        [--bench "--suites latency,concurrency --quick"] -- <vramkit up arguments>

1. reads NVML's "in use" before the start (the ballast and driver reserve are the baseline);
2. `python3 -m vramkit up --runtime native --load-format dummy ...` (the kit plans, checks, starts,
   waits for /health and warms up), while a thread samples NVML at 20 Hz for the peak; with --checkpoint DIR,
   that checkpoint's weights from disk instead of dummy ones;
3. a probe: one prompt of ~90 % of the longest the server accepts (the largest prefill the pool
   allows) plus 4 concurrent short requests, then optionally `vramkit bench`;
4. `vramkit down`; writes DIR/NAME.json with what SGLang logged, the NVML peak, device and versions.
A point whose server dies at start-up is recorded too (`survived: false` with SGLang's last error).
"""
from __future__ import annotations

import argparse
import json
import random
import shlex
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from vramkit.adapters import host, nvml
from vramkit.adapters.sglang_http import SglangClient
from vramkit.adapters.state import state_dir
from vramkit.core import sglang_log
from vramkit.core.bench_stats import decode_tok_s


class PeakSampler(threading.Thread):
    """NVML's "in use" on each of `indices` at 20 Hz; `peaks[i]` is the highest seen on GPU i. Once a second
    also the host: the lowest MemAvailable (/proc/meminfo through psutil) and the highest RSS summed over the
    server's processes (command lines naming sglang), for what --cpu-offload-gb pins."""

    def __init__(self, indices: list[int], period_s: float = 0.05):
        super().__init__(daemon=True)
        self.indices, self.period_s = indices, period_s
        self.peaks = {i: 0 for i in indices}
        self.samples = 0
        self.host_avail_before = host.host_memory()[1]
        self.host_avail_min = self.host_avail_before
        self.server_rss_max = 0
        self._stop_evt = threading.Event()

    def _host(self) -> None:
        self.host_avail_min = min(self.host_avail_min, host.host_memory()[1])
        self.server_rss_max = max(self.server_rss_max, host.rss_of("sglang"))

    def run(self) -> None:
        while not self._stop_evt.is_set():
            for i in self.indices:
                used = nvml.read_gpu(i, with_processes=False).in_use_bytes
                if isinstance(used, int):
                    self.peaks[i] = max(self.peaks[i], used)
            if self.samples % 20 == 0:
                self._host()
            self.samples += 1
            time.sleep(self.period_s)

    def stop(self) -> None:
        self._stop_evt.set()
        self.join(timeout=2)


def in_use(index: int = 0) -> int:
    return int(nvml.read_gpu(index, with_processes=False).in_use_bytes)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--budget-gib", type=float, required=True, help="the emulated card's free memory (ballast)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--bench", default="", help="vramkit bench arguments to run after the probe")
    ap.add_argument("--long-output", type=int, default=32)
    ap.add_argument("--probe-fraction", type=float, default=0.9)
    ap.add_argument("--decode-tokens", type=int, default=256,
                    help="tokens of the single-stream decode probe (few with --cpu-offload-gb: each step copies it)")
    ap.add_argument("--gpus", default="0", help="GPU indices the server uses (one per tensor-parallel rank)")
    ap.add_argument("--checkpoint", type=Path, help="a checkpoint folder on disk to load (make_random_checkpoint.py) "
                    "instead of dummy weights of the model's config")
    ap.add_argument("up_args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    up_args = [x for x in a.up_args if x != "--"]
    a.out.mkdir(parents=True, exist_ok=True)
    name = f"cal-{a.name}"
    log_path = state_dir() / f"{name}.log"
    folder = (ROOT / a.model) if (ROOT / a.model).is_dir() else None
    # a catalogued name runs its config folder as --model-path; a folder model (`--model <folder>`) is
    # given as the user gives it, so the kit's own folder rendering is what starts the server
    where = [] if folder else ["--model-path", str(ROOT / "config" / "models" / a.model)]
    dummy = ["--load-format", "dummy"]
    if a.checkpoint is not None:    # its weights read from disk, as a user's download is
        where, dummy = ["--model-path", str(a.checkpoint)], []

    gpus = [int(x) for x in a.gpus.split(",")]
    baseline = {i: in_use(i) for i in gpus}    # the ballast and the driver's own, before the server
    sampler = PeakSampler(gpus)
    sampler.start()
    t0 = time.time()
    up = subprocess.run([sys.executable, "-m", "vramkit", "up", "--runtime", "native", "--name", name,
                         "--model", str(folder or a.model), *where, *dummy,
                         "--no-fit-check", "--timeout", "900", "--gpus", a.gpus, *up_args], capture_output=True, text=True)
    start_s = time.time() - t0
    (a.out / f"{a.name}.up.txt").write_text(up.stdout[-20000:] + "\n--- stderr ---\n" + up.stderr[-5000:])
    result: dict = {"name": a.name, "model": a.model, "up_rc": up.returncode, "start_s": round(start_s, 1),
                    "up_error": up.stderr.strip().splitlines()[-1] if up.returncode else ""}
    probe = {}
    server_info = {}
    if up.returncode == 0:
        with SglangClient("http://127.0.0.1:30000", timeout_s=900) as c:
            server_info = c.server_info()
            max_in = int(server_info.get("max_req_input_len") or 0)
            vocab = 151000 if "qwen" in a.model else 32000
            rng = random.Random(7)
            n_long = int((max_in - a.long_output - 8) * a.probe_fraction)
            if n_long > 0:
                ids = [rng.randrange(10, vocab) for _ in range(n_long)]
                r = c.generate(input_ids=ids, max_new_tokens=a.long_output, stream=True)
                probe["long"] = {"prompt_tokens": n_long, "ok": r.ok, "ttft_s": r.ttft_s, "latency_s": r.latency_s,
                                 "completion_tokens": r.completion_tokens, "error": r.error,
                                 "decode_tok_s": decode_tok_s(r.latency_s, r.ttft_s, r.completion_tokens)
                                 if r.ok else None}
            # single-stream decode speed at a short context (the roofline point)
            r = c.generate(input_ids=[rng.randrange(10, vocab) for _ in range(256)], max_new_tokens=a.decode_tokens,
                           stream=True)
            probe["decode_256"] = {"ok": r.ok, "ttft_s": r.ttft_s, "latency_s": r.latency_s,
                                   "decode_tok_s": decode_tok_s(r.latency_s, r.ttft_s, r.completion_tokens)
                                   if r.ok else None, "error": r.error}
        if a.bench:
            b = subprocess.run([sys.executable, "-m", "vramkit", "bench", *shlex.split(a.bench)],
                               capture_output=True, text=True, timeout=420)
            (a.out / f"{a.name}.bench.txt").write_text(b.stdout[-20000:] + "\n--- stderr ---\n" + b.stderr[-5000:])
            probe["bench_rc"] = b.returncode
    sampler.stop()
    per_gpu = {i: max(sampler.peaks[i] - baseline[i], 0) for i in gpus}
    peak = max(per_gpu.values())               # per rank, as the planner counts: the fullest card
    subprocess.run([sys.executable, "-m", "vramkit", "down", "--name", name], capture_output=True, text=True)
    time.sleep(3)
    text = log_path.read_text(errors="replace") if log_path.exists() else ""
    (a.out / f"{a.name}.server.log").write_text(text[-400000:])
    fig = sglang_log.parse(text).values
    args_flat = " ".join(up_args)

    def flag(name: str, default=None):
        toks = shlex.split(args_flat)
        return toks[toks.index(name) + 1] if name in toks else default

    import torch  # the GPU host's torch: versions for the record
    result.update({
        "survived": up.returncode == 0,
        "gpu_free_gib_at_start": fig.get("load_begin_avail"),
        "emulated_budget_gib": a.budget_gib,
        "mem_fraction_static": float(server_info.get("mem_fraction_static") or flag("--mem-fraction", 0) or 0),
        "kv_cache_dtype": server_info.get("kv_cache_dtype") or flag("--kv-dtype", "auto"),
        "tp": int(server_info.get("tp_size") or flag("--tp", 1)),
        "cpu_offload_gb": int(server_info.get("cpu_offload_gb") or 0),
        "chunked_prefill": server_info.get("chunked_prefill_size"),
        "max_running_requests": server_info.get("max_running_requests"),
        "hicache_size_gb": server_info.get("hicache_size"),
        "context_len": fig.get("context_len"),
        "vramkit_up_args": up_args,
        "measured": {
            "weights_bytes": int(fig["weights"] * 2**30) if "weights" in fig else None,
            "kv_pool_tokens": fig.get("kv_tokens") or server_info.get("max_total_num_tokens"),
            "peak_vram_bytes": peak,
            "peak_vram_bytes_per_gpu": {str(i): v for i, v in per_gpu.items()},
            "startup_avail_gib": fig.get("available_after_start"),
            "log_figures_gib": fig,
            "max_req_input_len": server_info.get("max_req_input_len"),
            "nvml_samples": sampler.samples,
            # host RAM the server took: MemAvailable's largest drop during the point, and its processes' RSS
            "host_avail_drop_bytes": sampler.host_avail_before - sampler.host_avail_min,
            "server_rss_max_bytes": sampler.server_rss_max,
        },
        "probe": probe,
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "?",
        "versions": {"sglang": server_info.get("version"), "torch": torch.__version__,
                     "driver": str(nvml.read_snapshot(with_processes=False).driver_version)},
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "error": "" if up.returncode == 0 else sglang_log.last_error(text),
    })
    (a.out / f"{a.name}.json").write_text(json.dumps(result, indent=2, default=str))
    print(json.dumps({k: result[k] for k in ("name", "survived", "gpu_free_gib_at_start", "error")}
                     | {"kv": result["measured"]["kv_pool_tokens"], "peak_gib": round(peak / 2**30, 2),
                        "start_s": result["start_s"]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
