#!/usr/bin/env python3
"""On a real GPU: vramkit's VRAM readings against nvidia-smi and torch, and the monitor's own cost.

    PYTHONPATH=. python3 benchmarks/gpu/nvml_vs_smi.py OUT.json      (~60 s; needs GPU 0)

1. Allocate 0, 4, 8 GiB with torch on GPU 0 (then free them) and at each step read
   - vramkit's NVML adapter (total, free, NVML used, reserved, in use = total - free),
   - `vramkit vram-safe --json` (what the guard compares),
   - `nvidia-smi --query-gpu=memory.used,memory.total,memory.reserved,memory.free` (MiB),
   - `torch.cuda.mem_get_info()` (CUDA's free/total) and the caching allocator's own counters.
2. Time the adapter's query (100 readings) and run the monitor at 4 samples/s for 20 s, headless
   (log only) and with the live rich screen, measuring each process's CPU time (psutil) as a share
   of one core, plus its cadence from the log.
3. Pinned host memory: a 1 GiB pinned allocation and host-to-GPU copy speed, and whether a pinned
   allocation still works with RLIMIT_MEMLOCK lowered to 64 KiB (is CUDA pinning charged to it?).
Writes one JSON: device, driver, versions, date, every reading, the comparison.
Only needs what the GPU host has: python3 with torch, nvidia-ml-py, psutil, rich, httpx.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from vramkit.adapters import host as hostio
from vramkit.adapters import nvml
from vramkit.core.gpu.snapshot import is_na, to_jsonable

GiB, MiB = 1 << 30, 1 << 20
STEPS_GIB = [0, 4, 8, 0]
SETTLE_S = 0.5
MONITOR_HZ = 4
MONITOR_WINDOW_S = 20.0      # measured window, after MONITOR_WARM_S of start-up (imports, NVML init)
MONITOR_WARM_S = 2.0

# Runs one vramkit command module without the full CLI dispatcher, so this script works even if
# another part's command module is missing from the checkout. Same run(args) code path.
BOOT = """
import argparse, importlib, sys
from vramkit.errors import VramkitError
m = importlib.import_module('vramkit.commands.' + sys.argv[1])
p = argparse.ArgumentParser()
m.register(p.add_subparsers())
a = p.parse_args(sys.argv[2:])
try:
    sys.exit(a.func(a))
except VramkitError as e:
    print(e.line(), file=sys.stderr)
    sys.exit(int(e.code))
"""


def command_in_process(module: str, argv: list[str]) -> tuple[int, str]:
    import argparse
    import importlib
    mod = importlib.import_module(f"vramkit.commands.{module}")
    p = argparse.ArgumentParser()
    mod.register(p.add_subparsers())
    args = p.parse_args(argv)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = args.func(args)
    return code, buf.getvalue()


def smi(index: int = 0) -> dict:
    fields = ["memory.used", "memory.total", "memory.reserved", "memory.free"]
    for fs in (fields, fields[:2] + fields[3:]):
        r = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(fs)}", "--format=csv,noheader,nounits",
                            "-i", str(index)], capture_output=True, text=True, timeout=30)
        if r.returncode == 0:
            vals = [v.strip() for v in r.stdout.strip().split(",")]
            return {f.replace("memory.", "") + "_mib": (int(v) if v.isdigit() else v)
                    for f, v in zip(fs, vals, strict=False)}
        err = r.stderr.strip() or r.stdout.strip()
    return {"error": err}


def reading(torch, step_gib: int) -> dict:
    g = nvml.read_gpu(0)
    code, out = command_in_process("vram_safe", ["vram-safe", "--json", "--gpu", "0", "--threshold", "100%"])
    safe = json.loads(out)
    free, total = torch.cuda.mem_get_info(0)
    mine = None
    if not is_na(g.processes):
        mine = next((p.used_bytes for p in g.processes if p.pid == os.getpid()), None)
    return {
        "allocated_gib": step_gib,
        "adapter": {k: to_jsonable(getattr(g, k)) for k in
                    ("total_bytes", "free_bytes", "nvml_used_bytes", "reserved_bytes", "memory_api")}
                   | {"in_use_bytes": to_jsonable(g.in_use_bytes), "this_process_bytes": to_jsonable(mine)},
        "vram_safe": {"exit_code": code, "line": safe["line"], **(safe["gpus"][0] if safe["gpus"] else {})},
        "nvidia_smi": smi(0),
        "torch": {"mem_get_info_free_bytes": free, "mem_get_info_total_bytes": total,
                  "allocated_bytes": torch.cuda.memory_allocated(0),
                  "reserved_bytes": torch.cuda.memory_reserved(0)},
    }


def compare(readings: list[dict]) -> dict:
    """Differences in MiB; the deltas are relative to the first (0 GiB) reading."""
    base = readings[0]
    rows = []
    for r in readings:
        a, s, t = r["adapter"], r["nvidia_smi"], r["torch"]
        row = {"allocated_gib": r["allocated_gib"]}
        if "used_mib" in s and a["nvml_used_bytes"] is not None:
            row["adapter_nvml_used_minus_smi_used_mib"] = round(a["nvml_used_bytes"] / MiB - s["used_mib"], 2)
            row["adapter_total_minus_smi_total_mib"] = round(a["total_bytes"] / MiB - s["total_mib"], 2)
            if isinstance(s.get("reserved_mib"), int):
                row["adapter_in_use_minus_smi_used_plus_reserved_mib"] = round(
                    a["in_use_bytes"] / MiB - s["used_mib"] - s["reserved_mib"], 2)
        torch_in_use = t["mem_get_info_total_bytes"] - t["mem_get_info_free_bytes"]
        row["adapter_in_use_minus_torch_total_minus_free_mib"] = round((a["in_use_bytes"] - torch_in_use) / MiB, 2)
        row["nvml_total_minus_cuda_total_mib"] = round((a["total_bytes"] - t["mem_get_info_total_bytes"]) / MiB, 2)
        row["vram_safe_in_use_equals_adapter"] = r["vram_safe"].get("in_use_bytes") is not None and \
            abs(r["vram_safe"]["in_use_bytes"] - a["in_use_bytes"]) <= 64 * MiB
        row["adapter_in_use_delta_gib"] = round((a["in_use_bytes"] - base["adapter"]["in_use_bytes"]) / GiB, 3)
        if "used_mib" in s and "used_mib" in base["nvidia_smi"]:
            row["smi_used_delta_gib"] = round((s["used_mib"] - base["nvidia_smi"]["used_mib"]) / 1024, 3)
        row["torch_in_use_delta_gib"] = round((torch_in_use - (base["torch"]["mem_get_info_total_bytes"]
                                                              - base["torch"]["mem_get_info_free_bytes"])) / GiB, 3)
        rows.append(row)
    return {"rows": rows}


def query_cost(n: int = 100) -> dict:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        nvml.read_snapshot()
        times.append(time.perf_counter() - t0)
    times.sort()
    return {"n": n, "mean_ms": round(1000 * statistics.mean(times), 3),
            "p50_ms": round(1000 * times[n // 2], 3), "p95_ms": round(1000 * times[int(n * 0.95)], 3)}


def start_monitor(kind: str, tmp: Path) -> dict:
    log = tmp / f"monitor-{kind}.jsonl"
    screen = tmp / f"monitor-{kind}.screen"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if kind == "live":
        env |= {"TTY_COMPATIBLE": "1", "FORCE_COLOR": "1", "COLUMNS": "120", "LINES": "40"}
    argv = [sys.executable, "-c", BOOT, "monitor", "monitor", "--interval", str(1 / MONITOR_HZ),
            "--duration", str(MONITOR_WARM_S + MONITOR_WINDOW_S + 1.0), "--log", str(log)]
    fh = screen.open("wb")
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=fh, stderr=subprocess.STDOUT)
    return {"kind": kind, "proc": proc, "ps": psutil.Process(proc.pid), "log": log, "screen": screen, "fh": fh}


def monitor_cost() -> list[dict]:
    with tempfile.TemporaryDirectory() as d:
        runs = [start_monitor(k, Path(d)) for k in ("headless", "live")]
        time.sleep(MONITOR_WARM_S)
        t0 = time.monotonic()
        c0 = {r["kind"]: r["ps"].cpu_times() for r in runs}
        time.sleep(MONITOR_WINDOW_S)
        wall = time.monotonic() - t0
        c1 = {r["kind"]: r["ps"].cpu_times() for r in runs}
        out = []
        for r in runs:
            r["proc"].wait(timeout=30)
            r["fh"].close()
            a, b = c0[r["kind"]], c1[r["kind"]]
            cpu = (b.user - a.user) + (b.system - a.system)
            times = [json.loads(x)["time_s"] for x in r["log"].read_text().splitlines()]
            gaps = [y - x for x, y in zip(times, times[1:], strict=False)]
            screen = r["screen"].read_bytes()
            out.append({
                "kind": r["kind"], "interval_s": 1 / MONITOR_HZ, "window_s": round(wall, 3),
                "cpu_s": round(cpu, 4), "cpu_share_of_one_core": round(cpu / wall, 5),
                "user_s": round(b.user - a.user, 4), "system_s": round(b.system - a.system, 4),
                "exit_code": r["proc"].returncode, "samples_logged": len(times),
                "gap_mean_s": round(statistics.mean(gaps), 4) if gaps else None,
                "gap_max_s": round(max(gaps), 4) if gaps else None,
                "screen_bytes": len(screen), "screen_has_ansi": b"\x1b[" in screen,
                "screen_tail": screen[-600:].decode("utf-8", "replace") if r["kind"] == "headless" else None,
            })
        return out


MEMLOCK_PROBE = """
import resource, json, torch
resource.setrlimit(resource.RLIMIT_MEMLOCK, (64 << 10, resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]))
out = {"memlock_soft": resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]}
try:
    t = torch.empty(1 << 30, dtype=torch.uint8, pin_memory=True)
    out["pin_memory_1gib"] = "ok" if t.is_pinned() else "not pinned"
except Exception as e:
    out["pin_memory_1gib"] = f"{type(e).__name__}: {e}"[:300]
print(json.dumps(out))
"""


def memlock_probe() -> dict:
    r = subprocess.run([sys.executable, "-c", MEMLOCK_PROBE], capture_output=True, text=True, timeout=120)
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": (r.stderr or r.stdout)[-500:]}


def versions(torch) -> dict:
    def ver(name):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    smi_v = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader",
                            "-i", "0"], capture_output=True, text=True, timeout=30).stdout.strip()
    return {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "nvidia_ml_py": ver("nvidia-ml-py"), "psutil": ver("psutil"), "rich": ver("rich"),
            "nvidia_smi": smi_v, "kernel": platform.release()}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 64
    out_path = Path(argv[0])
    t_start = time.monotonic()
    import torch

    if not torch.cuda.is_available():
        print("nvml_vs_smi: no CUDA GPU here -> run it on the GPU host", file=sys.stderr)
        return 2
    torch.zeros(1, device="cuda:0")                 # create the context before the 0 GiB reading
    snap = nvml.read_snapshot()
    result: dict = {
        "what": "vramkit NVML adapter / vram-safe vs nvidia-smi vs torch.cuda.mem_get_info; monitor CPU cost",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "device": torch.cuda.get_device_name(0),
        "driver": to_jsonable(snap.driver_version),
        "versions": versions(torch),
        "gpu_count": len(snap.gpus),
        "snapshot_at_start": to_jsonable(snap),
        "readings": [],
    }
    held = None
    for gib in STEPS_GIB:
        held = None
        torch.cuda.empty_cache()
        if gib:
            held = torch.empty(gib * GiB, dtype=torch.uint8, device="cuda:0")
            held.fill_(1)                             # touch it: the memory is really backed
        torch.cuda.synchronize()
        time.sleep(SETTLE_S)
        result["readings"].append(reading(torch, gib))
    held = None
    torch.cuda.empty_cache()
    result["comparison"] = compare(result["readings"])
    result["adapter_query_cost"] = query_cost()
    result["monitor_cost"] = monitor_cost()
    result["pinned_copy_1gib"] = to_jsonable(hostio.pinned_copy_speed(GiB))
    result["memlock_probe"] = memlock_probe()
    result["host_facts"] = { "memlock": hostio.memlock_limit(),
                      "in_docker": hostio.in_docker(), "cpus": os.cpu_count()}
    result["elapsed_s"] = round(time.monotonic() - t_start, 1)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(result, indent=2, default=str) + "\n")
    for row in result["comparison"]["rows"]:
        print(json.dumps(row))
    for m in result["monitor_cost"]:
        print(f"monitor {m['kind']}: {100 * m['cpu_share_of_one_core']:.2f} % of one core at "
              f"{MONITOR_HZ}/s, {m['samples_logged']} samples, max gap {m['gap_max_s']} s")
    print(f"wrote {out_path} in {result['elapsed_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
