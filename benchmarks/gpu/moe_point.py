"""One issue-12 point on the GPU host, started through the kit: `vramkit up --runtime native` (the plan,
the checks, the start, health, warm-up), then moe_probe.py (decode at 1/2/4 streams, TTFT sweep), then
optionally `vramkit bench`, then `vramkit down`. NVML's peak (20 Hz, above the ballast) and the server's
host RAM (RSS of its process tree, psutil) are recorded beside SGLang's own log figures.

    python3 benchmarks/gpu/moe_point.py --name NAME --out DIR [--env K=V ...] [--probe "..."] [--bench "..."] \
        -- <vramkit up arguments>
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from calibrate_point import PeakSampler, in_use  # noqa: E402

from vramkit.adapters.state import state_dir  # noqa: E402
from vramkit.core import sglang_log  # noqa: E402


def tree_memory(pid: int) -> dict:
    """One walk of the server's process tree: each process (pid, name, the start of its command line, RSS and
    shared bytes) and the tree's sums. "shared" is the file-backed and shared-memory pages (RssFile + RssShmem on
    Linux: kt-kernel's weights where it maps them; the rest is anonymous, what transparent huge pages can back). The
    tree's sum read either ~37 or ~31 GiB for one config on one machine while the sampler of processes naming sglang
    never passed 31.9 (kt-estimate.md, RSS_LOWER_STATE in tests/unit/test_kt_estimate.py): the rows say which
    process it is. A process that ends mid-walk is left out; a tree that is gone reads zero."""
    import psutil
    try:
        p = psutil.Process(pid)
        procs = [p, *p.children(recursive=True)]
    except psutil.Error:
        procs = []
    rows = []
    for x in procs:
        try:
            m = x.memory_info()
            rows.append({"pid": x.pid, "name": x.name(), "cmdline": " ".join(x.cmdline())[:120], "rss": m.rss,
                         "shared": m.shared})
        except psutil.Error:
            continue
    return {"rss": sum(r["rss"] for r in rows), "shared": sum(r["shared"] for r in rows), "by_process": rows}


def record_memory(res: dict, when: str, pid: int) -> None:
    """A tree reading into a point's JSON under its historical keys (`when`: "after_start" or "end"; the end's RSS
    sum is host_rss_peak_bytes, the RSS once the probe ended)."""
    m = tree_memory(pid)
    res["host_rss_after_start_bytes" if when == "after_start" else "host_rss_peak_bytes"] = m["rss"]
    res[f"host_rss_{when}_shared_bytes"] = m["shared"]
    res[f"host_rss_{when}_by_process"] = m["by_process"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--env", action="append", default=[], help="K=V for the server (e.g. KT_KERNEL_CPU_VARIANT)")
    ap.add_argument("--probe", default="", help="moe_probe.py arguments")
    ap.add_argument("--bench", default="", help="vramkit bench arguments")
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--wait-file", type=Path, help="probe only once this file exists (a build sharing the CPU "
                    "during the server's start has finished)")
    ap.add_argument("up_args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    up_args = [x for x in a.up_args if x != "--"]
    a.out.mkdir(parents=True, exist_ok=True)
    name = f"moe-{a.name}"
    env = {**os.environ, **dict(kv.split("=", 1) for kv in a.env)}
    base = in_use(0)
    sampler = PeakSampler([0])
    sampler.start()
    t0 = time.time()
    up = subprocess.run([sys.executable, "-m", "vramkit", "up", "--runtime", "native", "--name", name,
                         "--no-fit-check", "--timeout", str(a.timeout), *up_args],
                        capture_output=True, text=True, env=env)
    res: dict = {"name": a.name, "up_rc": up.returncode, "start_s": round(time.time() - t0, 1),
                 "vramkit_up_args": up_args, "env": a.env}
    (a.out / f"{a.name}.up.txt").write_text(up.stdout[-30000:] + "\n--- stderr ---\n" + up.stderr[-8000:])
    state = {}
    sf = state_dir() / f"{name}.json"
    if sf.exists():
        state = json.loads(sf.read_text())
    if up.returncode == 0:
        pid = int(state.get("pid") or 0)
        record_memory(res, "after_start", pid)
        if a.wait_file is not None:
            t_wait = time.time()
            while not a.wait_file.exists() and time.time() - t_wait < 1200:
                time.sleep(2)
            res["waited_for_quiet_cpu_s"] = round(time.time() - t_wait, 1)
        if a.probe is not None:
            p = subprocess.run([sys.executable, "benchmarks/gpu/moe_probe.py", "--out", str(a.out / f"{a.name}.probe.json"),
                                "--label", a.name, *shlex.split(a.probe)], capture_output=True, text=True, timeout=900)
            res["probe_rc"] = p.returncode
            print(p.stdout[-2000:], flush=True)
        if a.bench:
            b = subprocess.run([sys.executable, "-m", "vramkit", "bench", *shlex.split(a.bench)],
                               capture_output=True, text=True, timeout=600)
            (a.out / f"{a.name}.bench.txt").write_text(b.stdout[-20000:] + "\n--- stderr ---\n" + b.stderr[-5000:])
            res["bench_rc"] = b.returncode
        record_memory(res, "end", pid)
    sampler.stop()
    # PeakSampler's once-a-second host reading, from before the start to here: the highest RSS summed over the
    # processes naming sglang (the server tree, load buffers included)
    res["host_rss_max_sampled_bytes"] = sampler.server_rss_max
    res["peak_vram_bytes"] = max(sampler.peaks[0] - base, 0)
    subprocess.run([sys.executable, "-m", "vramkit", "down", "--name", name], capture_output=True, text=True)
    time.sleep(3)
    log = state_dir() / f"{name}.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    (a.out / f"{a.name}.server.log").write_text(text[-300000:])
    res["log_figures_gib"] = sglang_log.parse(text).values
    res["error"] = "" if up.returncode == 0 else sglang_log.last_error(text)
    (a.out / f"{a.name}.json").write_text(json.dumps(res, indent=2, default=str))
    print(json.dumps({k: res.get(k) for k in ("name", "up_rc", "start_s", "peak_vram_bytes", "host_rss_peak_bytes",
                                               "error")}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
