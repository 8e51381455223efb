"""`vramkit host`: prepare the host around the GPU (the design's optimize_cpu_offload.py).

Checks, each pass / warn / fail with a reason: CPU topology (logical/physical, P/E cores, NUMA,
the GPU's nearest CPUs from NVML), the proposed cpusets for SGLang and the side services, memlock
and RAM against the pinned host pool (--pinned-gib, default the running preset's hicache_bytes),
a real pinned allocation + host-to-GPU copy speed (when a GPU is there).
Actions, when asked: --write puts VRAMKIT_SGLANG_CPUSET / VRAMKIT_SIDE_CPUSET into .env (docker
compose and the launcher read it); --pin PID sets a running server's CPU affinity; --warmup sends
requests to a running server until latency settles.
Exit 0 when nothing failed, else the first failing check's code.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import psutil
from rich.console import Console
from rich.table import Table

from vramkit import catalog
from vramkit.adapters import host as hostio
from vramkit.adapters import membw, nvml, state
from vramkit.bench.workloads import ANY_MODEL_VOCAB
from vramkit.core import host_plan as hp
from vramkit.core.checks import FAIL, PASS, WARN, Check
from vramkit.core.gpu.snapshot import is_na
from vramkit.errors import Exit, VramkitError
from vramkit.units import GiB, bytes2human

STATUS_STYLE = {PASS: "green", WARN: "yellow", FAIL: "red"}
DEFAULT_URL = f"http://127.0.0.1:{catalog.sglang().port}"  # config/sglang.toml


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("host", help="CPU pinning, NUMA, pinned memory and warm-up checks",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.add_argument("--gpu", type=int, default=0, help="GPU whose nearest CPUs count (default 0)")
    p.add_argument("--write", action="store_true", help="write the proposed cpusets into the .env file")
    p.add_argument("--env-file", type=Path, default=None, help="default: .env at the repository root")
    p.add_argument("--pin", type=int, metavar="PID", default=None,
                   help="set this running server's CPU affinity (its threads and children too)")
    p.add_argument("--cpuset", default=None,
                   help="CPU list for --pin and --write instead of the proposal, e.g. 0-7")
    p.add_argument("--pinned-gib", type=float, default=None,
                   help="pinned host pool to check, GiB (default: running preset's hicache_bytes)")
    p.add_argument("--copy-test-gib", type=float, default=1.0,
                   help="size of the pinned host-to-GPU copy test, GiB; 0 skips it (default 1)")
    p.add_argument("--bandwidth", action="store_true",
                   help="measure host memory read bandwidth on 1, 2, 4, ... threads up to the server's cores, each "
                        f"count's best of {membw.HOST_ROUNDS} rounds (the hybrid MoE mode's CPU experts: preset moe); "
                        "--write keeps it in .env as VRAMKIT_HOST_READ_GBS=THREADS:GBS,... for the planner's thread "
                        "term")
    p.add_argument("--warmup", action="store_true", help="warm up a running server")
    p.add_argument("--url", default=None, help=f"server for --warmup (default: running state, else {DEFAULT_URL})")
    p.add_argument("--warmup-max", type=int, default=20, help="most warm-up requests (default 20)")
    p.add_argument("--warmup-tokens", type=int, default=256, help="prompt tokens per request (default 256)")
    p.set_defaults(func=run)


def default_env_file() -> Path:
    repo = Path(__file__).resolve().parents[2]
    return repo / ".env" if (repo / "pyproject.toml").exists() else Path.cwd() / ".env"


def _pinned_bytes(args: argparse.Namespace, running: list[dict]) -> tuple[int | None, str]:
    if args.pinned_gib is not None:
        return int(args.pinned_gib * GiB), "--pinned-gib"
    total = sum(int(e["hicache_bytes"]) for e in running if isinstance(e.get("hicache_bytes"), (int, float)))
    return (total, "running preset's hicache_bytes") if total else (None, "")


def _warmup(url: str, max_requests: int, prompt_tokens: int) -> Check:
    from vramkit.adapters.sglang_http import SglangClient

    with SglangClient(url, timeout_s=300.0) as client:
        code = client.health()
        if code != 200:
            what = "nothing answers" if code is None else f"/health says {code}"
            return Check("warmup", FAIL,
                            f"{what} at {url} -> start the server (make start-qwen-optimized) or give --url",
                            {"url": url, "code": int(Exit.SERVICE_DOWN)})
        latencies: list[float] = []
        for i in range(max_requests):
            # Distinct prompts: a repeated one would hit the radix cache and "settle" for that reason.
            ids = [(1000 + 7 * i + j) % (ANY_MODEL_VOCAB - 1) + 1 for j in range(prompt_tokens)]
            res = client.generate(input_ids=ids, max_new_tokens=32, stream=False)
            if not res.ok:
                return Check("warmup", FAIL, f"request {i + 1} failed: {res.error}",
                                {"url": url, "latencies_s": latencies, "code": int(Exit.SERVICE_DOWN)})
            latencies.append(round(res.latency_s, 4))
            if hp.latency_settled(latencies):
                return Check("warmup", PASS, f"settled after {len(latencies)} requests: first "
                                f"{latencies[0]:.3f} s, last {latencies[-1]:.3f} s",
                                {"url": url, "latencies_s": latencies})
        return Check("warmup", WARN, f"latency did not settle in {max_requests} requests "
                        f"(last {latencies[-3:]})", {"url": url, "latencies_s": latencies})


def collect(args: argparse.Namespace) -> tuple[list[Check], dict]:
    running = state.read_running()
    checks: list[Check] = []
    facts: dict = {}

    topo = hostio.read_topology()
    facts["topology"] = {
        "logical": topo.logical, "physical": topo.physical, "allowed": hp.format_cpulist(topo.allowed),
        "p_cores": hp.format_cpulist(topo.p_cores), "e_cores": hp.format_cpulist(topo.e_cores),
        "hybrid_source": topo.hybrid_source,
        "numa_nodes": {str(k): hp.format_cpulist(v) for k, v in topo.numa_nodes.items()},
    }
    hybrid = (f"P-cores {hp.format_cpulist(topo.p_cores)}, E-cores {hp.format_cpulist(topo.e_cores)}"
              if topo.hybrid else "no P/E split exposed")
    checks.append(Check("cpu_topology", PASS,
                           f"{topo.logical} logical / {topo.physical} physical CPUs, {len(topo.allowed)} allowed; "
                           f"{hybrid}; {max(1, len(topo.numa_nodes))} NUMA node(s)"))

    checks.append(_kt_kernel_check(facts))

    snap = nvml.read_snapshot(with_processes=False)
    gpu = next((g for g in snap.gpus if g.index == args.gpu), None)
    gpu_cpus = None
    if snap.unavailable is not None:
        checks.append(Check("gpu_affinity", WARN, f"skipped: {snap.unavailable.reason}"))
    elif gpu is None:
        checks.append(Check("gpu_affinity", WARN, f"skipped: no GPU {args.gpu} (NVML sees {len(snap.gpus)})"))
    elif is_na(gpu.cpu_affinity):
        checks.append(Check("gpu_affinity", WARN, f"GPU {gpu.index}: {gpu.cpu_affinity.reason}"))
    else:
        gpu_cpus = gpu.cpu_affinity
        checks.append(Check("gpu_affinity", PASS,
                               f"GPU {gpu.index} nearest CPUs (NVML): {hp.format_cpulist(gpu_cpus)}"))
    facts["gpu_cpus"] = hp.format_cpulist(gpu_cpus) if gpu_cpus else None

    plan = hp.propose_cpusets(topo, gpu_cpus)
    if args.cpuset:
        try:
            chosen = hp.parse_cpulist(args.cpuset)
        except ValueError as e:
            raise VramkitError(f"--cpuset: {e}", "e.g. --cpuset 0-7,16-23", Exit.BAD_INPUT) from None
        plan = hp.CpusetPlan(chosen, plan.side, plan.status, plan.notes + ("server cpuset from --cpuset",))
    env = plan.env()
    facts["cpusets"] = env
    checks.append(Check("cpusets", plan.status, f"server {env[hp.ENV_SERVER_CPUSET]}, "
                           f"side {env[hp.ENV_SIDE_CPUSET]}; " + "; ".join(plan.notes), env))

    docker, why = hostio.in_docker()
    soft, hard = hostio.memlock_limit()
    pinned, pinned_src = _pinned_bytes(args, running)
    facts |= {"in_docker": docker, "in_docker_reason": why, "memlock_soft_bytes": soft,
              "memlock_hard_bytes": hard, "pinned_bytes": pinned, "pinned_source": pinned_src}
    checks.append(hp.memlock_check(soft, pinned, docker))
    total, available = hostio.host_memory()
    checks.append(hp.pinned_ram_check(pinned, total, available, hostio.cgroup_memory_limit()))

    if args.copy_test_gib > 0:
        res = hostio.pinned_copy_speed(int(args.copy_test_gib * GiB), device=args.gpu)
        if is_na(res):
            checks.append(Check("pinned_copy", WARN, f"skipped: {res.reason}"))
        else:
            checks.append(Check("pinned_copy", PASS,
                                   f"{bytes2human(res['size_bytes'])} pinned in {res['pin_alloc_s']:.2f} s; "
                                   f"host->GPU {res['h2d_pinned_GBps']} GB/s pinned, "
                                   f"{res['h2d_pageable_GBps']} GB/s pageable", res))

    if args.bandwidth:
        from vramkit.launch.hybrid import ENV_HOST_READ, format_read_gbs
        threads = max(1, len(topo.cores(plan.server)))
        # per thread count (the planner's thread term for --kt-cpuinfer): 1, 2, 4, ... and the server's cores
        counts = sorted({threads} | {2 ** i for i in range(8) if 2 ** i < threads})
        try:
            runs = membw.sweep(counts, rounds=membw.HOST_ROUNDS)
        except (ImportError, RuntimeError, MemoryError) as e:
            checks.append(Check("host_read_bw", WARN, f"skipped: {e}"))
        else:
            env = env | {ENV_HOST_READ: format_read_gbs(runs)}
            facts["host_read_bw"] = runs
            said = "host memory read " + ", ".join(f"{r['bytes_per_s'] / 1e9:.1f} GB/s on {r['threads']} thread(s)"
                                                   for r in runs) + " (what CPU experts decode from"
            w = membw.widest_spread(runs)
            if w is not None and w["spread"] > membw.NOISY_SPREAD:
                lo, hi = w["slowest_bytes_per_s"] / 1e9, w["bytes_per_s"] / 1e9
                checks.append(Check("host_read_bw", WARN, said + f"; each count's best of {w['rounds']} rounds): the "
                                    f"rounds disagreed, {lo:.1f}-{hi:.1f} GB/s on {w['threads']} thread(s): this "
                                    "host's read varies (other work, or a "
                                    "virtual machine). The plan reads the best, as the GPU host's servers decoded "
                                    "(benchmarks/results/gpu/kt-estimate.md); other work reading memory slows the "
                                    "decode below it", {"runs": runs, "widest": w}))
            else:
                checks.append(Check("host_read_bw", PASS, said + ")", {"runs": runs}))

    if args.write:
        path = args.env_file or default_env_file()
        try:
            old = path.read_text() if path.exists() else ""
            path.write_text(hp.update_env_text(old, env))
        except OSError as e:
            raise VramkitError(f"cannot write {path}: {e.strerror}", "check the path and its permissions",
                               Exit.BAD_FILE) from None
        checks.append(Check("env_file", PASS, f"wrote {', '.join(env)} to {path}",
                               {"path": str(path)}))

    if args.pin is not None:
        try:
            done = hostio.pin_process(args.pin, plan.server)
        except psutil.NoSuchProcess:
            checks.append(Check("pin", FAIL, f"no process {args.pin} -> give the server's pid "
                                   "(vramkit status shows it)", {"code": int(Exit.NOT_RUNNING)}))
        except psutil.AccessDenied:
            checks.append(Check("pin", FAIL, f"not allowed to change pid {args.pin} -> run as its user or root",
                                   {"code": int(Exit.BAD_INPUT)}))
        else:
            status = PASS if not done["failed"] else WARN
            checks.append(Check("pin", status, f"pid {args.pin}: {done['threads_set']} threads in "
                                   f"{len(done['processes'])} process(es) set to {hp.format_cpulist(plan.server)}; "
                                   f"affinity now {hp.format_cpulist(done['affinity_now'])}"
                                   + (f"; failed: {', '.join(done['failed'][:3])}" if done["failed"] else ""), done))

    if args.warmup:
        url = args.url
        if not url:
            port = next((e.get("port") for e in running if e.get("port")), None)
            url = f"http://127.0.0.1:{port}" if port else DEFAULT_URL
        checks.append(_warmup(url, args.warmup_max, args.warmup_tokens))
    return checks, facts


def _kt_kernel_check(facts: dict) -> Check:
    """The hybrid MoE mode on this CPU: which kt-kernel build it runs and the release the kit installs for it
    (`make setup-kt-native`; config/versions.toml: an AVX2-only CPU gets the first release whose avx2 build runs)."""
    from vramkit.core.plan import kt_hybrid as kt
    from vramkit.launch.hybrid import this_host_isa
    isa = this_host_isa()
    if isa is None:
        facts["kt_kernel"] = None
        return Check("kt_kernel", WARN, "this CPU has not even AVX2: kt-kernel runs nowhere here, so the moe preset "
                                        "cannot keep experts in host RAM -> layer offload (plan without --kt-method)")
    release = catalog.versions().kt_kernel_for(isa)
    facts["kt_kernel"] = {"isa": isa, "build": kt.KT_VARIANT[isa], "release": release}
    return Check("kt_kernel", PASS, f"the moe preset's CPU experts: kt-kernel {release}'s {kt.KT_VARIANT[isa]} build "
                                    f"(this CPU: {isa}; `make setup-kt-native` installs it)")


def exit_code(checks: list[Check]) -> int:
    for c in checks:
        if c.status == FAIL:
            return int(c.data.get("code", Exit.HOST_MEMORY if c.name == "pinned_ram" else Exit.BAD_INPUT))
    return int(Exit.OK)


def run(args: argparse.Namespace) -> int:
    if args.warmup_max < 2 or args.warmup_tokens < 1:
        raise VramkitError("--warmup-max must be >= 2 and --warmup-tokens >= 1", "", Exit.BAD_INPUT)
    # a size below 0 (or nan/inf) is refused, not checked as a pool of -3 GiB that "fits" (issue 20 item 7)
    for flag, value in (("--pinned-gib", args.pinned_gib), ("--copy-test-gib", args.copy_test_gib)):
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise VramkitError(f"{flag} {value:g} is not a size: it must be a finite number of GiB >= 0",
                               f"e.g. {flag} 8", Exit.BAD_INPUT)
    checks, facts = collect(args)
    code = exit_code(checks)
    if args.json:
        print(json.dumps({"exit_code": code, "facts": facts,
                          "checks": [{"name": c.name, "status": c.status, "reason": c.reason, "data": c.data}
                                     for c in checks]}, indent=2, default=str))
        return code
    table = Table(box=None, show_header=True, pad_edge=False, padding=(0, 2))
    for col in ("check", "status", "reason"):
        table.add_column(col)
    for c in checks:
        table.add_row(c.name, f"[{STATUS_STYLE[c.status]}]{c.status}[/]", c.reason)
    console = Console()
    console.print(table)
    env = facts["cpusets"]
    console.print(f"\n{hp.ENV_SERVER_CPUSET}={env[hp.ENV_SERVER_CPUSET]}\n{hp.ENV_SIDE_CPUSET}={env[hp.ENV_SIDE_CPUSET]}",
                  highlight=False)
    return code
